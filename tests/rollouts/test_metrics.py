"""/metrics answers rollouts by state and the targets of the rollouts not ended by state
(a sent target's state its command's), every state present, in a fixed number of queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from automation.states import CommandStatus
from rollouts.metrics import rollouts_gauges
from rollouts.services.counts import TARGET_STATES
from rollouts.services.drive import rollout_tick
from rollouts.services.lifecycle import rollout_act
from rollouts.states import RolloutStatus
from tests.rollouts.fleet import finish, make_fleet, sent_commands

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def olga(db: None) -> User:
    return User.objects.create_user(username="olga", password="pw")


def _gauges(client: Client, name: str) -> dict[str, float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        s.labels["state"]: s.value
        for family in text_string_to_metric_families(response.content.decode())
        if family.name == name
        for s in family.samples
    }


def _now() -> datetime:
    return timezone.now().astimezone(UTC)


def test_the_gauges_show_rollouts_and_targets_by_state(
    olga: User, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    assert _gauges(client, "farm_rollouts") == dict.fromkeys(RolloutStatus.values, 0.0)
    assert _gauges(client, "farm_rollout_targets") == dict.fromkeys(TARGET_STATES, 0.0)
    now = _now()
    running = make_fleet(per_farm=5).rollout(olga, now=now, canary_size=3)
    rollout_tick(running.pk, now=now + timedelta(seconds=1))
    canary = sent_commands(running)
    finish(canary[:2], CommandStatus.APPLIED, now + timedelta(seconds=2))
    finish(canary[2:], CommandStatus.FAILED, now + timedelta(seconds=2))
    paused = make_fleet(per_farm=2).rollout(olga, now=now, canary_size=1)
    rollout_act(rollout_id=paused.pk, action="pause", actor=olga, reason="wait")
    cancelled = make_fleet(per_farm=4).rollout(olga, now=now, canary_size=1)
    rollout_act(rollout_id=cancelled.pk, action="cancel", actor=olga, reason="wrong value")

    rollouts = _gauges(client, "farm_rollouts")
    assert rollouts["running"] == 1 and rollouts["paused"] == 1 and rollouts["cancelled"] == 1
    assert rollouts["scheduled"] == rollouts["completed"] == rollouts["aborted"] == 0
    targets = _gauges(client, "farm_rollout_targets")
    # The running rollout's 2 applied, 1 failed, 2 pending and the paused one's 2 pending;
    # the cancelled one's 4 skipped targets are not counted (it ended).
    assert targets["applied"] == 2 and targets["failed"] == 1
    assert targets["pending"] == 4 and targets["skipped"] == 0
    assert sum(targets.values()) == 7


def test_the_gauges_cost_two_queries_whatever_the_rollouts(olga: User) -> None:
    now = _now()
    for n in range(3):
        rollout = make_fleet(per_farm=3).rollout(olga, now=now, canary_size=2)
        rollout_tick(rollout.pk, now=now + timedelta(seconds=n + 1))
    with CaptureQueriesContext(connection) as queries:
        families = list(rollouts_gauges(now))
    assert [f.name for f in families] == ["farm_rollouts", "farm_rollout_targets"]
    assert len(queries.captured_queries) == 2
