"""Guard: the hot path's statements stay hand-written. Each stage listed in ``HOT_STAGES``
runs at a batch of one and of fifty, and every statement it sends must come through
``common.hot_sql`` (``statements_counted`` tells them apart); one that goes back through the
ORM fails the test with its SQL. Another stage joins the guard by adding its runner."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from automation.models import DeviceCommand
from automation.services.claim import intents_claim
from automation.services.dispatch import command_intents_dispatch
from common.hot_sql import StatementCount, statements_counted
from tests.automation.conftest import make_intent
from tests.automation.test_batch_cost import _farms
from tests.devices.factories import FarmKit

pytestmark = pytest.mark.django_db

# What Django's transaction management sends itself: no query to hand-write.
TRANSACTION_CONTROL = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")


def _commands(kits: list[FarmKit]) -> list[int]:
    """One pending command per farm, on its heater (as evaluation leaves them)."""
    ts = (timezone.now() - timedelta(seconds=5)).isoformat()
    return [make_intent(kit, ts=ts).pk for kit in kits]


def _dispatch(ids: list[int]) -> None:
    outcomes = command_intents_dispatch(
        intent_ids=ids,
        publish_many=lambda requests: list(range(1, len(requests) + 1)),
        trust_cache=False,
    )
    assert set(outcomes.values()) == {"dispatched"}


def _claim(ids: list[int]) -> None:
    from automation.services.dispatch_sql import commands_read

    rows = commands_read(ids)
    holders = {r.command.target_device_endpoint_id: r.holder_id for r in rows if r.holder_id}
    claimed = intents_claim([r.command for r in rows], timezone.now(), {}, holders)
    assert len(claimed) == len(ids)


HOT_STAGES: dict[str, Callable[[list[int]], Any]] = {
    "dispatch": _dispatch,
    "claim": _claim,
}


def orm_statements(count: StatementCount) -> list[str]:
    """The statements of ``count`` that went through the ORM, but transaction control."""
    return [s for s in count.orm if not s.lstrip().upper().startswith(TRANSACTION_CONTROL)]


@pytest.mark.parametrize("stage", sorted(HOT_STAGES))
@pytest.mark.parametrize("size", [1, 50])
def test_every_hot_statement_comes_through_the_hot_path(stage: str, size: int) -> None:
    ids = _commands(_farms(size, f"hp{stage[:2]}{size}"))
    with statements_counted() as count:
        HOT_STAGES[stage](ids)
    assert count.hot, "the stage ran no statement at all"
    assert orm_statements(count) == [], f"{stage} at {size}: through the ORM"


def test_the_guard_sees_a_statement_that_goes_back_through_the_orm() -> None:
    """A regression would be caught: an ORM read inside the counted block is reported."""
    with statements_counted() as count:
        DeviceCommand.objects.filter(pk=-1).exists()
    assert len(orm_statements(count)) == 1
