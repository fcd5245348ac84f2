"""Raisers outside the alarms app: a rollout whose abort criterion trips raises one
rollout_aborted alarm in the same transaction as its move; the open alarms are exported by
severity; cleared alarms go with their audit trail after their retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User

from alarms.metrics import alarms_gauges
from alarms.models import Alarm, AlarmTransition
from alarms.services import alarm_clear, alarm_raise
from automation.states import CommandStatus
from common.retention import retention_prune
from rollouts.services.drive import rollout_tick
from rollouts.states import RolloutStatus
from tests.devices.factories import FarmFactory
from tests.rollouts.fleet import finish, make_fleet, sent_commands

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@pytest.mark.django_db
def test_an_aborted_rollout_raises_one_alarm_on_its_first_farm() -> None:
    olga = User.objects.create_user(username="olga", password="pw")
    fleet = make_fleet(farms=2, per_farm=10)
    criterion = {"outcome": "failed", "min_finished": 2, "threshold_pct": 50}
    rollout = fleet.rollout(olga, now=T0, canary_size=2, abort_criteria=[criterion])
    rollout_tick(rollout.pk, now=T0)
    finish(sent_commands(rollout), CommandStatus.FAILED, T0 + timedelta(seconds=1))
    tick = rollout_tick(rollout.pk, now=T0 + timedelta(seconds=2))
    assert tick.moved_to == RolloutStatus.ABORTED
    # Its failed commands raised their own alarms (the farm's default policy).
    alarm = Alarm.objects.get(source="rollout")
    assert (alarm.source, alarm.source_id, alarm.type, alarm.severity) == (
        "rollout",
        rollout.pk,
        "rollout_aborted",
        "major",
    )
    assert alarm.farm_id == min(f.pk for f in fleet.farms)
    assert "abort criterion tripped" in alarm.detail


@pytest.mark.django_db
def test_open_alarms_are_exported_by_severity_every_severity_answered() -> None:
    farm = FarmFactory()
    for n, severity in enumerate(("critical", "critical", "minor")):
        alarm_raise(
            farm_id=farm.pk,
            source="device",
            source_id=n,
            type="device_offline",
            severity=severity,
            actor="t",
            now=T0,
        )
    alarm_clear(alarm_id=Alarm.objects.get(source_id=2).pk, actor="a", comment="ok", now=T0)
    (gauge,) = alarms_gauges(T0)
    values = {s.labels["severity"]: s.value for s in gauge.samples}
    assert values == {"critical": 2, "major": 0, "minor": 0, "warning": 0}


@pytest.mark.django_db
def test_cleared_alarms_go_with_their_trail_after_retention_open_ones_stay(settings) -> None:
    settings.RETENTION_ALARMS_DAYS = 1
    farm = FarmFactory()
    old = T0 - timedelta(days=3)
    ids = [
        alarm_raise(
            farm_id=farm.pk,
            source="device",
            source_id=n,
            type="device_offline",
            severity="major",
            actor="t",
            now=old,
        )
        for n in range(2)
    ]
    alarm_clear(alarm_id=ids[0], actor="a", comment="ok", now=old)
    retention_prune(now=T0)
    assert list(Alarm.objects.values_list("pk", flat=True)) == [ids[1]]
    assert set(AlarmTransition.objects.values_list("alarm_id", flat=True)) == {ids[1]}
