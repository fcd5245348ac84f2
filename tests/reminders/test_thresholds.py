"""Threshold reminders over a scripted metric series: when each firing policy fires again
and when it does not, and a metric that turns false deactivates the pending row. Readings
are real AutomationEndpointEvent rows; ``endpoint_metric_evaluate`` is the entry point the
ingest stage (or the reconciliation pass) calls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from reminders.models import EndpointMetricSource, ThresholdState
from reminders.services.handlers import endpoint_metric_evaluate
from reminders.services.settings import reminder_setting_create, reminder_setting_update
from reminders.services.sources import endpoint_metric_source_create
from scheduler.models import DueWork
from tests.devices.factories import stored_reading
from tests.reminders.conftest import NOW, rows_of, run_due

pytestmark = pytest.mark.django_db

T0 = NOW
DAY = timedelta(days=1)


def threshold_setting(farm, policy: str, **overrides):
    fields = {
        "name": f"Silo {policy}",
        "farm_id": farm.pk,
        "source_type": "endpoint_metric",
        "trigger_type": "threshold_condition",
        "threshold_metric": "silo_level",
        "threshold_operator": "gte",
        "threshold_value": Decimal("90"),
        "firing_policy": policy,
        "recipients_policy": "external_contacts",
        "template_name": "endpoint_threshold",
        "channels": ["email"],
        "now": T0,
    }
    fields.update(overrides)
    return reminder_setting_create(**fields)


def silo_source(kit, *, now: datetime = T0) -> EndpointMetricSource:
    """The ``silo_level`` source: the latest value of the kit's temperature endpoint."""
    return endpoint_metric_source_create(
        farm_id=kit.farm.pk,
        endpoint_id=kit.temp.pk,
        metric_key="silo_level",
        aggregate="latest",
        now=now,
    )


def completed(source_guid) -> int:
    return sum(r.status == "completed" for r in rows_of(source_guid))


# One scripted series: (time, silo level). Berlin is UTC+1 in March.
SERIES = [
    (T0 + timedelta(minutes=10), 92),  # crosses: every policy fires
    (T0 + timedelta(minutes=20), 95),  # still true: nobody fires
    (T0 + timedelta(minutes=30), 60),  # false again
    (T0 + timedelta(minutes=40), 93),  # true again, same day: only FalseToTrue fires
    (T0 + DAY, 94),  # next local day, still true: only OncePerDay fires
]


@pytest.mark.parametrize(
    ("policy", "fired"),
    [
        ("OncePerSource", [1, 0, 0, 0, 0, 0]),
        ("OncePerThreshold", [1, 0, 0, 0, 0, 1]),
        ("OncePerDay", [1, 0, 0, 0, 1, 1]),
        ("FalseToTrue", [1, 0, 0, 1, 0, 1]),
    ],
)
def test_firing_policy_over_a_scripted_series(kit, bus, policy, fired) -> None:
    """The last step lowers the threshold from 90 to 85 (a new threshold identity):
    OncePerSource stays quiet, every other policy fires for the new threshold."""
    with bus.commit():
        setting = threshold_setting(kit.farm, policy)
        source = silo_source(kit, now=T0)
    assert rows_of(source.guid) == []  # no data yet: false
    seen = []
    for at, level in SERIES:
        stored_reading(kit.temp, at, level)
        before = completed(source.guid)
        endpoint_metric_evaluate(source_id=source.pk, now=at)
        run_due(at)
        seen.append(completed(source.guid) - before)
    at = SERIES[-1][0] + timedelta(minutes=5)
    before = completed(source.guid)
    with bus.commit(at=at):
        reminder_setting_update(setting_id=setting.pk, threshold_value=Decimal("85"), now=at)
    run_due(at)
    seen.append(completed(source.guid) - before)
    assert seen == fired
    tails = [r.tail for r in rows_of(source.guid)]
    assert all(t.startswith("metric:threshold:silo_level.gte:") for t in tails)


def test_keys_spell_metric_value_policy_and_scope(kit, bus) -> None:
    with bus.commit():
        threshold_setting(kit.farm, "OncePerDay", threshold_value=Decimal("90.000"))
        source = silo_source(kit, now=T0)
    stored_reading(kit.temp, T0, 91.5)
    endpoint_metric_evaluate(source_id=source.pk, now=T0)
    (row,) = rows_of(source.guid)
    assert row.tail == "metric:threshold:silo_level.gte:90:OncePerDay:day-2026-03-02"
    assert row.status == "pending" and row.scheduled_on == T0


def test_a_metric_false_again_deactivates_the_pending_row(kit, bus) -> None:
    with bus.commit():
        threshold_setting(kit.farm, "FalseToTrue")
        source = silo_source(kit, now=T0)
    stored_reading(kit.temp, T0, 97)
    endpoint_metric_evaluate(source_id=source.pk, now=T0)
    assert [r.status for r in rows_of(source.guid)] == ["pending"]
    stored_reading(kit.temp, T0 + timedelta(minutes=1), 40)
    endpoint_metric_evaluate(source_id=source.pk, now=T0 + timedelta(minutes=1))
    (row,) = rows_of(source.guid)
    assert (row.status, row.reason) == ("deactivated", "source_no_longer_valid")
    assert run_due(T0 + timedelta(minutes=2)) == {}


def test_re_evaluating_an_unchanged_condition_writes_nothing(kit, bus) -> None:
    with bus.commit():
        threshold_setting(kit.farm, "FalseToTrue")
        source = silo_source(kit, now=T0)
    stored_reading(kit.temp, T0, 97)
    endpoint_metric_evaluate(source_id=source.pk, now=T0)
    version = DueWork.objects.get().version
    again = endpoint_metric_evaluate(source_id=source.pk, now=T0 + timedelta(minutes=3))
    assert again is not None and again.repaired == []
    assert DueWork.objects.get().version == version
    assert ThresholdState.objects.get().episode == 1


@pytest.mark.parametrize(
    ("aggregate", "operator", "value", "holds"),
    [
        ("max", "gte", 90, True),  # 95 within the hour
        ("min", "lte", 20, True),  # 15 within the hour
        ("avg", "gte", 60, False),  # (95 + 15 + 50) / 3 = 53.3
        ("avg", "lt", 60, True),
        ("latest", "gte", 90, False),  # the latest is 50
    ],
)
def test_aggregates_over_the_window(kit, bus, aggregate, operator, value, holds) -> None:
    with bus.commit():
        threshold_setting(
            kit.farm, "OncePerThreshold", threshold_operator=operator, threshold_value=value
        )
        source = endpoint_metric_source_create(
            farm_id=kit.farm.pk,
            endpoint_id=kit.temp.pk,
            metric_key="silo_level",
            aggregate=aggregate,
            window_minutes=60,
            now=T0,
        )
    stored_reading(kit.temp, T0 - timedelta(minutes=90), 99)  # outside the window
    stored_reading(kit.temp, T0 - timedelta(minutes=50), 95)
    stored_reading(kit.temp, T0 - timedelta(minutes=30), 15)
    stored_reading(kit.temp, T0 - timedelta(minutes=20), True)  # not a number: ignored
    stored_reading(kit.temp, T0 - timedelta(minutes=10), 50)
    endpoint_metric_evaluate(source_id=source.pk, now=T0)
    assert len(rows_of(source.guid)) == (1 if holds else 0)


def test_the_battery_low_threshold_and_its_template_context(kit, bus) -> None:
    with bus.commit():
        threshold_setting(
            kit.farm,
            "FalseToTrue",
            threshold_metric="battery",
            threshold_operator="lte",
            threshold_value=Decimal("20"),
        )
        source = endpoint_metric_source_create(
            farm_id=kit.farm.pk,
            endpoint_id=kit.humidity.pk,
            metric_key="battery",
            aggregate="latest",
            now=T0,
        )
    stored_reading(kit.humidity, T0, 18)
    endpoint_metric_evaluate(source_id=source.pk, now=T0)
    assert run_due(T0) == {"completed": 1}
    row = DueWork.objects.get()
    assert row.dispatch_result_json["queued"] == 1
    assert datetime(2026, 3, 2, tzinfo=UTC) <= row.completed_on
