"""Date-based document reminders through the event bus: the rows after each step of a
document's and its setting's life are exactly the seed-000 tables (ensure; deactivate old
rows first; offset → recreate; send time → in place; template → untouched; deactivated →
pending rows deactivated, completed kept)."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time

import pytest

from common.localtime import LocalTimeRule
from events.services import event_deliver
from events.states import HandlerOutcome
from reminders.models import ReminderOccurrence
from reminders.services.settings import reminder_setting_create, reminder_setting_update
from reminders.services.sources import (
    SourceInvalid,
    document_create,
    document_deactivate,
    document_update,
)
from scheduler.models import DueWork
from tests.devices.factories import DeviceFactory, FarmFactory
from tests.reminders.conftest import (
    NOW,
    Row,
    date_setting,
    document,
    notifications_for,
    rows_of,
    run_due,
    statuses,
)

pytestmark = pytest.mark.django_db

P, D, C = "pending", "deactivated", "completed"


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_a_documents_life_leaves_exactly_the_seed_rows(farm, bus) -> None:
    with bus.commit():
        setting = date_setting(farm)
        doc = document(farm, date(2026, 6, 30))
    # Created: one Pending row per offset, 09:00 Berlin summer time = 07:00 UTC.
    assert rows_of(doc.guid) == [
        Row("expiry:2026-06-30:30", P, _utc(2026, 5, 31, 7), ""),
        Row("expiry:2026-06-30:7", P, _utc(2026, 6, 23, 7), ""),
    ]

    with bus.commit():
        document_update(document_id=doc.pk, expires_on=date(2026, 7, 31), now=NOW)
    # Expiry moved: the old occurrences are deactivated first, the new ones ensured.
    assert rows_of(doc.guid) == [
        Row("expiry:2026-06-30:30", D, _utc(2026, 5, 31, 7), "source_no_longer_valid"),
        Row("expiry:2026-06-30:7", D, _utc(2026, 6, 23, 7), "source_no_longer_valid"),
        Row("expiry:2026-07-31:30", P, _utc(2026, 7, 1, 7), ""),
        Row("expiry:2026-07-31:7", P, _utc(2026, 7, 24, 7), ""),
    ]
    thirty = DueWork.objects.get(scheduler_key__endswith="2026-07-31:30")

    with bus.commit():
        reminder_setting_update(setting_id=setting.pk, offsets_days=[30, 14], now=NOW)
    # Offset changed: 7 deactivated, 14 created; 30 is the same occurrence, untouched.
    assert statuses(doc.guid) == {
        "expiry:2026-06-30:30": D,
        "expiry:2026-06-30:7": D,
        "expiry:2026-07-31:14": P,
        "expiry:2026-07-31:30": P,
        "expiry:2026-07-31:7": D,
    }
    assert rows_of(doc.guid)[-1].reason == "setting_changed"
    assert DueWork.objects.get(pk=thirty.pk).version == thirty.version

    with bus.commit():
        reminder_setting_update(setting_id=setting.pk, send_time=time(10, 0), now=NOW)
    # Send time: the same keys, moved in place.
    moved = {r.tail: r.scheduled_on for r in rows_of(doc.guid) if r.status == P}
    assert moved == {
        "expiry:2026-07-31:14": _utc(2026, 7, 17, 8),
        "expiry:2026-07-31:30": _utc(2026, 7, 1, 8),
    }
    versions = dict(DueWork.objects.values_list("scheduler_key", "version"))

    with bus.commit():
        reminder_setting_update(
            setting_id=setting.pk, template_name="document_expiry", channels=["email", "inbox"]
        )
    # Template / delivery: pending rows untouched (execution reloads them).
    assert dict(DueWork.objects.values_list("scheduler_key", "version")) == versions

    assert run_due(_utc(2026, 7, 1, 8)) == {"completed": 1}
    key_30 = thirty.scheduler_key
    assert [n.channel for n in notifications_for(key_30)] == ["email", "inbox"]

    with bus.commit(at=_utc(2026, 7, 2, 6)):
        reminder_setting_update(setting_id=setting.pk, active=False)
    # Deactivated: pending rows deactivated; the completed one stays as history.
    final = {r.tail: (r.status, r.reason) for r in rows_of(doc.guid)}
    assert final["expiry:2026-07-31:30"] == (C, "")
    assert final["expiry:2026-07-31:14"] == (D, "reminder_setting_inactive")


def test_each_event_is_handled_once_per_idempotency_key(farm, bus) -> None:
    with bus.commit():
        date_setting(farm)
        doc = document(farm, date(2026, 6, 30))
    (message,) = [m for m in bus.messages if m["type"] == "DocumentChanged"]
    (first,) = [d for d in bus.delivered if d.idempotency_key == message["idempotency_key"]]
    assert first.outcomes["reminders.document_changed"] == HandlerOutcome.DONE
    with bus.commit():
        again = event_deliver(message={**message, "event_id": str(uuid.uuid4())})
    assert again.outcomes["reminders.document_changed"] == HandlerOutcome.DUPLICATE
    assert len(rows_of(doc.guid)) == 2


def test_deactivated_and_undated_documents_stop_their_pending_rows(farm, bus) -> None:
    with bus.commit():
        date_setting(farm)
        doc = document(farm, date(2026, 6, 30))
        other = document(farm, date(2026, 6, 30), title="Second policy")
    with bus.commit():
        document_deactivate(document_id=doc.pk, now=NOW)
        document_update(document_id=other.pk, expires_on=None, now=NOW)
    for guid in (doc.guid, other.guid):
        assert {(r.status, r.reason) for r in rows_of(guid)} == {(D, "source_no_longer_valid")}


def test_a_document_inside_its_reminder_period_gets_one_reminder_now(farm, bus) -> None:
    """Immediate notification: created 3 days before expiry with offsets 30 and 7, the
    7-day occurrence (already past) is ensured and runs at once; 30 stays uncreated."""
    with bus.commit():
        date_setting(farm, offsets_days=[30, 7, 0])
        doc = document(farm, date(2026, 3, 5))
    assert statuses(doc.guid) == {"expiry:2026-03-05:7": P, "expiry:2026-03-05:0": P}
    assert run_due(NOW) == {"completed": 1}
    assert statuses(doc.guid)["expiry:2026-03-05:7"] == C


def test_an_expired_document_is_not_reminded_retroactively(farm, bus) -> None:
    with bus.commit():
        date_setting(farm)
        doc = document(farm, date(2026, 2, 1))
    assert rows_of(doc.guid) == []


def test_a_farm_setting_replaces_its_organisations_for_that_farm(farm, bus) -> None:
    sibling = FarmFactory(organization=farm.organization, time_zone="America/New_York")
    with bus.commit():
        org_setting = reminder_setting_create(
            name="Org default",
            organization_id=farm.organization_id,
            source_type="document",
            trigger_type="date_based",
            offsets_days=[10],
            send_time=time(8, 0),
            template_name="document_expiry",
            channels=["email"],
            now=NOW,
        )
        here = document(farm, date(2026, 6, 30))
        there = document(sibling, date(2026, 6, 30))
    assert set(statuses(here.guid)) == {"expiry:2026-06-30:10"}
    with bus.commit():
        date_setting(farm)  # the farm's own setting: offsets 30 and 7
    assert statuses(here.guid) == {
        "expiry:2026-06-30:10": D,
        "expiry:2026-06-30:30": P,
        "expiry:2026-06-30:7": P,
    }
    assert statuses(there.guid) == {"expiry:2026-06-30:10": P}  # 08:00 New York
    (row,) = rows_of(there.guid)
    assert row.scheduled_on == _utc(2026, 6, 20, 12)
    assert (
        str(org_setting.guid)
        in DueWork.objects.get(scheduler_key__contains=str(there.guid)).scheduler_key
    )


def test_setting_filters_by_document_type_and_subjects_are_validated(farm, bus) -> None:
    device = DeviceFactory(farm=farm)
    with bus.commit():
        date_setting(farm, document_type="calibration_certificate")
        cert = document(
            farm,
            date(2026, 6, 30),
            subject_kind="device",
            device_id=device.pk,
            document_type="calibration_certificate",
        )
        vetting = document(
            farm,
            date(2026, 6, 30),
            subject_kind="worker",
            worker_name="A. Worker",
            document_type="police_vetting",
        )
    assert len(rows_of(cert.guid)) == 2 and rows_of(vetting.guid) == []
    elsewhere = DeviceFactory()
    with pytest.raises(SourceInvalid):
        document_create(
            farm_id=farm.pk,
            subject_kind="device",
            device_id=elsewhere.pk,
            document_type="calibration_certificate",
            title="x",
            expires_on=date(2026, 6, 30),
        )
    with pytest.raises(SourceInvalid):
        document_create(
            farm_id=farm.pk,
            subject_kind="worker",
            document_type="first_aid_certificate",
            title="x",
            expires_on=date(2026, 6, 30),
        )


def test_occurrences_record_the_local_time_rule(farm, bus) -> None:
    """02:30 on Berlin's spring-forward day does not exist: moved forward by the gap."""
    with bus.commit():
        date_setting(farm, offsets_days=[1], send_time=time(2, 30))
        doc = document(farm, date(2026, 3, 30))
    link = ReminderOccurrence.objects.get(source_guid=doc.guid)
    assert link.scheduled_local_date == date(2026, 3, 29)
    assert link.local_time_rule == LocalTimeRule.GAP_SHIFTED_FORWARD
    assert link.scheduled_on == _utc(2026, 3, 29, 1, 30)  # 03:30 CEST
