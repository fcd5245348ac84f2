"""Creating a rollout: every bad field is named and nothing is written; a value some targets
cannot take skips those targets; start and end are each farm's wall clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User

from devices.models import Device, DeviceStatus
from rollouts.models import Rollout, RolloutTarget, RolloutTransition
from rollouts.services.counts import rollout_waves
from rollouts.services.drive import rollout_tick
from rollouts.services.plan import RolloutInvalid
from rollouts.states import RolloutStatus, SkipReason, TargetStep
from tests.devices.factories import FarmFactory
from tests.rollouts.fleet import Fleet, make_fleet

pytestmark = [pytest.mark.django_db]

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)  # 13:00 in Berlin, 07:00 in New York


@pytest.fixture
def olga(db: None) -> User:
    return User.objects.create_user(username="olga", password="pw")


@pytest.fixture
def fleet(db: None) -> Fleet:
    return make_fleet(farms=2, per_farm=3)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"endpoint_key": "nope"}, "endpoint_key"),
        ({"value": 3}, "value"),
        ({"value": "open"}, "value"),
        ({"base_rate_per_minute": 0.5}, "base_rate_per_minute"),
        ({"increment_factor": 1.05}, "increment_factor"),
        ({"increment_factor": 5.5}, "increment_factor"),
        ({"max_live_per_farm": 0}, "max_live_per_farm"),
        ({"max_rate_per_minute": 2.0}, "max_rate_per_minute"),
        ({"canary_size": 0}, "canary_size"),
        (
            {"abort_criteria": [{"outcome": "failed", "min_finished": 1, "threshold_pct": 0}]},
            "abort_criteria",
        ),
        (
            {"abort_criteria": [{"outcome": "late", "min_finished": 1, "threshold_pct": 5}]},
            "abort_criteria",
        ),
        (
            {"abort_criteria": [{"outcome": "failed", "min_finished": 0, "threshold_pct": 5}]},
            "abort_criteria",
        ),
        ({"start_local": "2026-12-04T12:00:00"}, "start_local"),  # 11:00 UTC in Berlin
        ({"start_local": "2026-12-04T14:00:00+01:00"}, "start_local"),
        ({"start_local": "tomorrow"}, "start_local"),
        ({"start_local": "2026-12-05T10:00", "end_local": "2026-12-05T09:00"}, "end_local"),
        ({"farm_ids": []}, "farm_ids"),
        ({"device_ids": [10**9]}, "device_ids"),
        ({"mode": "sometimes"}, "mode"),
        ({"end_behaviour": "explode"}, "end_behaviour"),
        ({"reason": "  "}, "reason"),
    ],
)
def test_a_bad_field_is_named_and_nothing_is_written(
    fleet: Fleet, olga: User, overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(RolloutInvalid) as refused:
        fleet.rollout(olga, now=T0, **overrides)
    assert field in refused.value.errors
    assert not Rollout.objects.exists() and not RolloutTarget.objects.exists()


def test_a_selector_matching_no_device_is_refused(olga: User) -> None:
    fleet = make_fleet(farms=1, per_farm=0)
    with pytest.raises(RolloutInvalid) as refused:
        fleet.rollout(olga, now=T0)
    assert "farm_ids" in refused.value.errors
    assert not Rollout.objects.exists()


def test_a_second_rollout_on_endpoints_a_live_one_targets_is_refused(
    fleet: Fleet, olga: User
) -> None:
    first = fleet.rollout(olga, now=T0)
    with pytest.raises(RolloutInvalid) as refused:
        fleet.rollout(olga, now=T0, device_ids=[fleet.devices[0].pk])
    assert f"#{first.pk}" in refused.value.errors["endpoint_key"][0]
    assert Rollout.objects.count() == 1
    Rollout.objects.filter(pk=first.pk).update(status=RolloutStatus.CANCELLED)
    assert fleet.rollout(olga, now=T0).pk != first.pk  # an ended one no longer holds them


def test_targets_that_cannot_take_the_value_are_skipped_not_failed(
    fleet: Fleet, olga: User
) -> None:
    Device.objects.filter(pk=fleet.devices[0].pk).update(status=DeviceStatus.MAINTENANCE)
    fleet.vent.min_value = None
    rollout = fleet.rollout(olga, now=T0)
    skipped = RolloutTarget.objects.filter(rollout=rollout, step=TargetStep.SKIPPED)
    assert list(skipped.values_list("reason", flat=True)) == [SkipReason.TARGET_MAINTENANCE]
    assert RolloutTarget.objects.filter(rollout=rollout, step=TargetStep.PENDING).count() == 5


def test_each_farm_starts_at_its_own_wall_clock(olga: User) -> None:
    berlin = make_fleet(farms=1, per_farm=2, time_zone="Europe/Berlin")
    york = FarmFactory(organization=berlin.organization, time_zone="America/New_York")
    berlin.farms.append(york)
    for n in range(2):
        berlin.add_device(york, f"NY-{n}")
    rollout = berlin.rollout(olga, now=T0, start_local="2026-12-04T14:00", canary_size=10)
    assert rollout.status == RolloutStatus.SCHEDULED
    assert rollout_tick(rollout.pk, now=T0 + timedelta(minutes=30)).commands == []
    assert Rollout.objects.get(pk=rollout.pk).status == RolloutStatus.SCHEDULED
    at_two_in_berlin = rollout_tick(rollout.pk, now=T0 + timedelta(hours=1, minutes=1))
    assert len(at_two_in_berlin.commands) == 2  # only Berlin's devices
    assert at_two_in_berlin.moved_to == RolloutStatus.RUNNING
    at_two_in_york = rollout_tick(rollout.pk, now=T0 + timedelta(hours=7, minutes=1))
    assert len(at_two_in_york.commands) == 2


@pytest.mark.parametrize(
    ("behaviour", "ends"), [("stop", RolloutStatus.COMPLETED), ("cancel", RolloutStatus.CANCELLED)]
)
def test_when_the_window_closes_the_unsent_targets_are_skipped(
    fleet: Fleet, olga: User, behaviour: str, ends: str
) -> None:
    rollout = fleet.rollout(
        olga, now=T0, end_local="2026-12-04T14:00", end_behaviour=behaviour, canary_size=2
    )
    rollout_tick(rollout.pk, now=T0)
    tick = rollout_tick(rollout.pk, now=T0 + timedelta(hours=2))
    rollout.refresh_from_db()
    skipped = RolloutTarget.objects.filter(rollout=rollout, reason=SkipReason.WINDOW_CLOSED)
    assert skipped.count() == 4
    if behaviour == "cancel":
        assert tick.moved_to == ends == rollout.status
    else:  # stop: the two sent run to their end first
        assert rollout.status == RolloutStatus.RUNNING
    last = RolloutTransition.objects.filter(rollout=rollout).latest("pk")
    if behaviour == "cancel":
        assert "window" in last.reason
    else:  # no move since the creation: the canary's wave is on its targets
        assert "created" in last.reason
        assert [str(w) for w in rollout_waves(rollout.pk)] == ["wave 1: 2 started, 0 skipped"]
