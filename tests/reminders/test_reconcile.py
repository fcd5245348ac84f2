"""Bounded reconciliation repairs what lost events left behind — a missing row, a stale row —
and touches nothing outside its bounds: other farms, occurrences outside today..today+N,
inactive sources. Its document queries are filtered by the watermark or by the window, and
its watermark moves only with a successful batch. (Writes outside ``bus.commit()`` publish
nothing: their events are lost on purpose.)"""

from __future__ import annotations

import io
import re
from datetime import date, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from reminders.models import ReconciliationWatermark
from reminders.services import reconcile as reconcile_module
from reminders.services.reconcile import reminder_reconcile
from reminders.services.sources import document_update
from scheduler.models import DueWork
from tests.devices.factories import FarmFactory, stored_reading
from tests.reminders.conftest import NOW, date_setting, document, rows_of, statuses
from tests.reminders.test_thresholds import silo_source, threshold_setting

pytestmark = pytest.mark.django_db

LATER = NOW + timedelta(minutes=5)  # past the settle delay of the writes at NOW


@pytest.fixture
def drift(farm, bus):
    """Farm A (allowlisted) and farm B, both with offsets 7 and 1 at 09:00; the window is
    2026-03-02..2026-03-09 (Berlin)."""
    other = FarmFactory(time_zone="Europe/Berlin")
    with bus.commit():
        date_setting(farm, offsets_days=[7, 1])
        date_setting(other, offsets_days=[7, 1])
        stale = document(farm, date(2026, 3, 12), title="stale")  # rows 03-05 and 03-11
    assert statuses(stale.guid) == {
        "expiry:2026-03-12:7": "pending",
        "expiry:2026-03-12:1": "pending",
    }
    # Lost events from here on:
    document_update(document_id=stale.pk, expires_on=date(2026, 3, 20), now=NOW)
    return {
        "farm": farm,
        "other": other,
        "stale": stale,
        "missing": document(farm, date(2026, 3, 10), title="missing"),  # 03-03 and 03-09
        "far": document(farm, date(2026, 5, 1), title="far"),  # 04-24 and 04-30
        "elsewhere": document(other, date(2026, 3, 10), title="elsewhere"),
    }


def test_reconciliation_repairs_a_missing_and_a_stale_row_inside_its_bounds(drift) -> None:
    farm, stale = drift["farm"], drift["stale"]
    outside = DueWork.objects.get(scheduler_key__endswith="2026-03-12:1")
    report = reminder_reconcile(provider="document", now=LATER, farm_ids=[farm.pk], window_days=7)
    assert sorted((r.source_guid, r.action, r.reason) for r in report.repairs) == sorted(
        [
            (str(drift["missing"].guid), "inserted", ""),
            (str(drift["missing"].guid), "inserted", ""),
            (str(stale.guid), "deactivated", "source_no_longer_valid"),
        ]
    )
    assert statuses(drift["missing"].guid) == {
        "expiry:2026-03-10:7": "pending",
        "expiry:2026-03-10:1": "pending",
    }
    # The stale row inside the window is deactivated; the one outside it is not touched
    # (execution-time revalidation will deactivate it), and nothing new is created there.
    assert statuses(stale.guid) == {
        "expiry:2026-03-12:7": "deactivated",
        "expiry:2026-03-12:1": "pending",
    }
    assert DueWork.objects.get(pk=outside.pk).version == outside.version
    assert rows_of(drift["far"].guid) == [] and rows_of(drift["elsewhere"].guid) == []
    assert report.visited_changed == 3  # the allowlisted farm's changed documents only


def test_a_second_pass_finds_nothing_and_the_watermark_has_moved(drift) -> None:
    farm = drift["farm"]
    reminder_reconcile(provider="document", now=LATER, farm_ids=[farm.pk])
    mark = ReconciliationWatermark.objects.get(provider="document", scope=str(farm.pk))
    assert (mark.changed_since, mark.cursor_id) == (NOW, drift["far"].pk)
    # Another scope has its own watermark: the whole-product pass repairs farm B only now.
    again = reminder_reconcile(provider="document", now=LATER + timedelta(minutes=15))
    assert {(r.farm_id, r.action) for r in again.repairs} == {(drift["other"].pk, "inserted")}
    second = reminder_reconcile(
        provider="document", now=LATER + timedelta(minutes=30), farm_ids=[farm.pk]
    )
    assert second.visited_changed == 0 and second.repairs == []
    assert second.visited_window == 1  # "missing" is in the window and now in line


def test_its_document_queries_stay_inside_the_watermark_window_and_allowlist(drift) -> None:
    farm = drift["farm"]
    with CaptureQueriesContext(connection) as queries:
        reminder_reconcile(provider="document", now=LATER, farm_ids=[farm.pk], window_days=7)
    scans = [
        q["sql"]
        for q in queries.captured_queries
        if re.search(r'FROM "reminders_document"', q["sql"]) and '"guid" =' not in q["sql"]
    ]
    assert len(scans) == 2  # the changed scan and the window scan, nothing else
    changed, window = scans
    assert '"updated_at" >' in changed and '"updated_at" <=' in changed and "LIMIT" in changed
    assert "BETWEEN" in window and '"expires_on"' in window and "LIMIT" in window
    for sql in scans:
        assert '"active"' in sql and f'"farm_id" IN ({farm.pk})' in sql
    day = r"'(\d{4}-\d{2}-\d{2})'(?:::date)?"
    bounds = re.findall(rf"BETWEEN {day} AND {day}", window)
    # One range per offset (1 and 7) around the window 03-01..03-10 (a day of slack).
    assert sorted(bounds) == [("2026-03-02", "2026-03-11"), ("2026-03-08", "2026-03-17")]
    # Other single-source reads look up by guid; scheduler reads by key: no table scans.
    sched = [
        q["sql"]
        for q in queries.captured_queries
        if '"automation_automationscheduler"' in q["sql"]  # the table, not its audit table
    ]
    assert sched and all('"scheduler_key"' in s or '"id" =' in s or "WHERE id" in s for s in sched)


def test_the_watermark_advances_only_after_a_successful_batch(drift, monkeypatch) -> None:
    farm = drift["farm"]
    real = reconcile_module.reminder_source_sync
    calls = []

    def flaky(**kwargs):
        calls.append(kwargs["source_guid"])
        if len(calls) == 2:
            raise RuntimeError("database hiccup")
        return real(**kwargs)

    monkeypatch.setattr(reconcile_module, "reminder_source_sync", flaky)
    with pytest.raises(RuntimeError):
        reminder_reconcile(provider="document", now=LATER, farm_ids=[farm.pk])
    assert not ReconciliationWatermark.objects.exists()
    assert rows_of(drift["missing"].guid) == []  # the first source's repair rolled back too
    monkeypatch.setattr(reconcile_module, "reminder_source_sync", real)
    report = reminder_reconcile(provider="document", now=LATER, farm_ids=[farm.pk])
    assert len(report.repairs) == 3


def test_batches_walk_the_changed_sources_with_a_cursor(drift) -> None:
    farm = drift["farm"]
    seen = []
    for n in range(4):
        report = reminder_reconcile(
            provider="document", now=LATER + timedelta(minutes=n), farm_ids=[farm.pk], batch_size=1
        )
        seen.append(report.visited_changed)
    assert seen == [1, 1, 1, 0]
    assert len(statuses(drift["missing"].guid)) == 2


def test_a_dry_run_reports_the_repairs_and_changes_nothing(drift) -> None:
    farm = drift["farm"]
    before = list(DueWork.objects.values_list("scheduler_key", "status", "version"))
    report = reminder_reconcile(provider="document", now=LATER, farm_ids=[farm.pk], dry_run=True)
    assert report.dry_run and len(report.repairs) == 3
    after = list(DueWork.objects.values_list("scheduler_key", "status", "version"))
    assert after == before and not ReconciliationWatermark.objects.exists()


def test_the_command_prints_a_table_of_repairs(drift, time_machine) -> None:
    time_machine.move_to(LATER, tick=False)
    out = io.StringIO()
    call_command("reconcile", "--provider", "document", "--farm", str(drift["farm"].pk), stdout=out)
    text = out.getvalue()
    assert "repaired 3" in text
    assert re.search(r"scan\s+farm\s+source\s+action\s+reason\s+scheduler key", text)
    assert text.count("inserted") == 2 and "source_no_longer_valid" in text
    dry = io.StringIO()
    call_command("reconcile", "--provider", "document", "--dry-run", stdout=dry)
    assert "would repair" in dry.getvalue()


def test_metric_sources_with_new_telemetry_are_evaluated(kit, bus) -> None:
    with bus.commit():
        threshold_setting(kit.farm, "FalseToTrue")
        source = silo_source(kit, now=NOW)
    stored_reading(kit.temp, NOW + timedelta(minutes=1), 96)  # nobody evaluated it
    assert rows_of(source.guid) == []
    report = reminder_reconcile(provider="endpoint_metric", now=LATER)
    assert [r.action for r in report.repairs] == ["inserted"]
    assert [r.status for r in rows_of(source.guid)] == ["pending"]
