"""A rollout's wave costs the same statements for one target as for fifty (``waves.py`` is
set based, like every stage of tests/automation/test_batch_cost.py): one tick of the ramp,
on one farm, counted with ``CaptureQueriesContext``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automation.states import CommandStatus
from rollouts import models as bounds
from rollouts.services.drive import rollout_tick
from tests.rollouts.fleet import finish, make_fleet

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
SMALL, LARGE = 1, 50

# Statements of one tick that starts a wave, counted inside the test's transaction (the
# tick's transaction shows as SAVEPOINT + RELEASE): the rollout's read and the lease's UPDATE,
# the version check, the farms' windows, the counters, the farms' room, the targets' claim,
# their endpoints, the endpoints' commands and reported values, the manual holds, the
# commands' INSERT, read-back by key and audit INSERT, the targets' UPDATE (which records the
# wave) and the release. PostgreSQL adds the advisory lock of the targets.
STATEMENTS = {"postgresql": 19, "sqlite": 18}


OnCommit = Callable[..., AbstractContextManager[Any]]


def _wave_statements(user: User, size: int, on_commit: OnCommit) -> int:
    """Statements of the ramp's first tick on a farm of ``size`` pending targets, its
    after-commit work included (the dispatch hand-off aside: no worker here)."""
    fleet = make_fleet(farms=1, per_farm=size + 1)
    rollout = fleet.rollout(
        user,
        now=T0,
        canary_size=1,
        base_rate_per_minute=bounds.RATE_MAX,
        max_rate_per_minute=bounds.RATE_MAX,
        max_live_per_farm=bounds.LIVE_PER_FARM_MAX,
        ramp_every_applied=bounds.RAMP_EVERY_MAX,
    )
    canary = rollout_tick(rollout.pk, now=T0)
    assert canary is not None and len(canary.commands) == 1
    finish(canary.commands, CommandStatus.APPLIED, T0)
    assert rollout_tick(rollout.pk, now=T0 + timedelta(seconds=1)).commands == []  # the ramp
    with CaptureQueriesContext(connection) as queries, on_commit(execute=True):
        tick = rollout_tick(rollout.pk, now=T0 + timedelta(seconds=61))
    assert tick is not None and len(tick.commands) == size
    return len(queries.captured_queries)


def test_a_wave_of_one_and_a_wave_of_fifty_take_the_same_statements(
    django_capture_on_commit_callbacks: OnCommit, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rollouts.services.drive.hand_on_commit", lambda committed: None)
    user = User.objects.create_user(username="olga", password="pw")
    on_commit = django_capture_on_commit_callbacks
    _wave_statements(user, 2, on_commit)  # first-use lookups (content types, caches)
    small = _wave_statements(user, SMALL, on_commit)
    large = _wave_statements(user, LARGE, on_commit)
    assert large == small, f"statements per wave: {SMALL} → {small}, {LARGE} → {large}"
    assert small == STATEMENTS[connection.vendor]
