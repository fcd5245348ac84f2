"""Rollouts' retention (``rollouts.retention``): an ended rollout goes past
``RETENTION_ROLLOUTS_DAYS`` after its end, with its targets, its timeline and its selector's
links; one not ended stays however old, its targets reading ``pruned`` once the ledger's
retention took their ended commands."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from automation.models import DeviceCommand
from automation.states import CommandStatus
from common.retention import retention_oldest, retention_prune
from rollouts.models import Rollout, RolloutTarget, RolloutTransition
from rollouts.services.counts import PRUNED, rollout_count
from rollouts.services.drive import rollout_tick
from rollouts.services.lifecycle import rollout_act
from tests.rollouts.fleet import finish, make_fleet, sent_commands

pytestmark = [pytest.mark.django_db]
DAY = timedelta(days=1)


@pytest.fixture
def olga(db: None) -> User:
    return User.objects.create_user(username="olga", password="pw")


def _later(days: float) -> datetime:
    return timezone.now() + days * DAY


def test_an_ended_rollout_goes_by_its_end_one_not_ended_stays(olga: User) -> None:
    now = timezone.now()
    ended = make_fleet(per_farm=3).rollout(olga, now=now, canary_size=2)
    rollout_tick(ended.pk, now=now + timedelta(seconds=1))
    finish(sent_commands(ended), CommandStatus.APPLIED, now + timedelta(seconds=2))
    # Cancelled 100 days later: its retention counts from the end, not the start.
    rollout_act(rollout_id=ended.pk, action="cancel", actor=olga, reason="done", now=_later(100))
    paused = make_fleet(per_farm=2).rollout(olga, now=now, canary_size=1)
    rollout_tick(paused.pk, now=now + timedelta(seconds=1))
    finish(sent_commands(paused), CommandStatus.FAILED, now + timedelta(seconds=2))
    rollout_act(rollout_id=paused.pk, action="pause", actor=olga, reason="look first")
    links = Rollout.farms.through

    retention_prune(now=_later(181))
    # The ended rollout is kept (ended 81 days before); the commands of both went (ended,
    # created 181 days before): their targets read pruned.
    assert Rollout.objects.filter(pk=ended.pk).exists()
    assert not DeviceCommand.objects.exists()
    assert rollout_count(ended.pk)[PRUNED] == 2
    assert rollout_count(paused.pk)[PRUNED] == 1
    assert retention_oldest(now=_later(181))["rollouts.Rollout"] == pytest.approx(81 * 86400, abs=5)

    result = retention_prune(now=_later(281))
    assert result.deleted["rollouts.Rollout"] == 1
    assert list(Rollout.objects.values_list("pk", flat=True)) == [paused.pk]
    for model in (RolloutTarget, RolloutTransition, links):
        assert not model.objects.filter(rollout_id=ended.pk).exists()
        assert model.objects.filter(rollout_id=paused.pk).exists()
    assert Rollout.objects.get(pk=paused.pk).farms.exists()
    # The paused rollout has no end: no age either.
    assert retention_oldest(now=_later(281))["rollouts.Rollout"] is None
