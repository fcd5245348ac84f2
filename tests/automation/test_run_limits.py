"""Run-time limits: a command that carries ``max_on_s`` is followed, once applied, by one
``run_limit`` command back to the safe value (or the limit's own value), due at the applied
time + ``max_on_s`` on the scheduler under the key ``run-limit:{commandId}``. The follow-up is
created and applied once whatever runs the row twice, and dropped when a later command
changed the endpoint first or the endpoint already reports the value."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from automation.models import CommandTransition, DeviceCommand
from automation.services.commands import command_transition
from automation.services.dispatch import command_dispatch
from automation.services.manual import endpoint_command_manual
from automation.services.run_limit_due import run_limit_run
from automation.services.support import command_mark_failed
from automation.states import CommandOrigin, CommandStatus, ReasonCode
from devices.models import DeviceInstanceEndpoint
from scheduler.models import DueWork
from scheduler.registry import SchedulerJob
from scheduler.services import scheduler_claim_due, scheduler_process_due, scheduler_release_stale
from scheduler.states import SchedulerReason, SchedulerStatus
from tests.automation.conftest import ack, dispatch, fake_publish, make_intent, reply, state
from tests.concurrency import race
from tests.devices.factories import FarmKit, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def safe_farm(safe_value: Any = False) -> FarmKit:
    """A farm whose relay ``io1`` declares a safe value (off)."""
    kit = make_farm()
    profile_endpoint = kit.io1.profile_endpoint
    profile_endpoint.safe_value = safe_value
    profile_endpoint.save(update_fields=["safe_value"])
    return kit


def applied(intent: DeviceCommand, value: Any = True) -> DeviceCommand:
    """Dispatched (on the database's word alone: a test commits no on_commit release of the
    endpoint), acknowledged and reported: the command is ``applied``."""
    command_dispatch(command_id=intent.pk, publish=fake_publish, trust_cache=False)
    done = state(ack(DeviceCommand.objects.get(pk=intent.pk)), value)
    assert done.status == CommandStatus.APPLIED
    return done


def limited_and_applied(kit: FarmKit, max_on_s: int = 30, **limit: Any) -> DeviceCommand:
    """ "temp > 30 → io1 on" with a run-time limit, fired and applied."""
    kit.rule(target_value=True, max_on_s=max_on_s, **limit)
    intent = make_intent(kit)
    assert intent.max_on_s == max_on_s
    return applied(intent)


def row_of(command: DeviceCommand) -> DueWork:
    return DueWork.objects.get(scheduler_key=f"run-limit:{command.pk}")


def dropped_because(command: DeviceCommand) -> str:
    """The detail of the row's move to deactivated."""
    move = row_of(command).transitions.get(to_status=SchedulerStatus.DEACTIVATED)
    return str(move.detail)


def run_due(at: datetime) -> dict[str, int]:
    return dict(scheduler_process_due(clock=lambda: at))


def follow_ups(kit: FarmKit) -> list[DeviceCommand]:
    rows = DeviceCommand.objects.filter(target_device=kit.actuator, origin=CommandOrigin.RUN_LIMIT)
    return list(rows.order_by("pk"))


def test_the_due_work_is_ensured_at_applied_time_plus_max_on_s() -> None:
    kit = safe_farm()
    command = limited_and_applied(kit, max_on_s=30)
    row = row_of(command)
    assert command.applied_at is not None
    assert row.scheduled_on == command.applied_at + timedelta(seconds=30)
    assert (row.automation_type, row.status, row.farm_id) == (
        "run_limit",
        SchedulerStatus.PENDING,
        kit.farm.pk,
    )


def test_a_command_without_a_limit_schedules_nothing() -> None:
    kit = safe_farm()
    kit.rule(target_value=True)
    applied(make_intent(kit))
    assert not DueWork.objects.filter(scheduler_key__startswith="run-limit:").exists()


def test_nothing_is_due_before_its_time() -> None:
    kit = safe_farm()
    command = limited_and_applied(kit, max_on_s=30)
    assert run_due(row_of(command).scheduled_on - timedelta(seconds=1)) == {}
    assert follow_ups(kit) == []


def test_the_follow_up_returns_to_the_safe_value_and_is_applied_once() -> None:
    kit = safe_farm()
    command = limited_and_applied(kit, max_on_s=30)
    due = row_of(command).scheduled_on
    assert run_due(due).get("completed") == 1
    assert run_due(due + timedelta(minutes=5)) == {}  # a second beat: nothing left to run
    [follow_up] = follow_ups(kit)
    assert (follow_up.target_value, follow_up.max_on_s, follow_up.idempotency_key) == (
        False,
        None,
        f"run-limit:{command.pk}",
    )
    assert follow_up.target_device_endpoint_id == kit.io1.pk
    assert follow_up.status == CommandStatus.PENDING_DISPATCH
    assert row_of(command).status == SchedulerStatus.COMPLETED
    # The normal dispatcher sends it; applied only on the device's word, once.
    done = applied(follow_up, False)
    assert done.origin == CommandOrigin.RUN_LIMIT
    moves = CommandTransition.objects.filter(command=done, to_status=CommandStatus.APPLIED)
    assert moves.count() == 1
    # The follow-up carries no limit of its own: no further row.
    assert not DueWork.objects.filter(scheduler_key=f"run-limit:{done.pk}").exists()


def test_the_limits_own_value_wins_over_the_safe_value() -> None:
    kit = safe_farm(safe_value=0)
    pe = kit.fan.profile_endpoint
    pe.safe_value = 0
    pe.save(update_fields=["safe_value"])
    kit.rule(target_endpoint=kit.fan, target_value=80, max_on_s=60, max_on_value=20)
    command = make_intent(kit)
    command_dispatch(command_id=command.pk, publish=fake_publish, trust_cache=False)
    sent = ack(DeviceCommand.objects.get(pk=command.pk))
    body = {"commandId": sent.device_command_id, "reportedState": {"fan": 80}}
    command = reply(sent, "state", body | {"appliedAt": timezone.now().isoformat()})
    assert command.status == CommandStatus.APPLIED
    run_due(row_of(command).scheduled_on)
    [follow_up] = follow_ups(kit)
    assert (follow_up.target_value, follow_up.command_params) == (20, {"fan": 20})


def test_a_later_command_on_the_endpoint_drops_the_follow_up() -> None:
    kit = safe_farm()
    command = limited_and_applied(kit, max_on_s=30)
    user = User.objects.create_user(username="olga")
    later = endpoint_command_manual(
        endpoint_id=kit.io1.pk, value=True, actor=user, reason="keep it on"
    ).command
    assert run_due(row_of(command).scheduled_on).get("deactivated") == 1
    row = row_of(command)
    assert (row.status, row.failure_reason_code) == (
        SchedulerStatus.DEACTIVATED,
        SchedulerReason.SOURCE_NO_LONGER_VALID,
    )
    assert f"command {later.pk} changed the endpoint first" in dropped_because(command)
    assert follow_ups(kit) == []


def test_a_later_command_that_failed_does_not_drop_the_follow_up() -> None:
    kit = safe_farm()
    command = limited_and_applied(kit, max_on_s=30)
    user = User.objects.create_user(username="olga")
    later = endpoint_command_manual(
        endpoint_id=kit.io1.pk, value=True, actor=user, reason="keep it on"
    ).command
    assert command_mark_failed(command_id=later.pk, actor="support", reason="stuck")
    run_due(row_of(command).scheduled_on)
    assert [c.target_value for c in follow_ups(kit)] == [False]


def test_an_endpoint_already_at_the_value_drops_the_follow_up() -> None:
    kit = safe_farm()
    command = limited_and_applied(kit, max_on_s=30)
    DeviceInstanceEndpoint.objects.filter(pk=kit.io1.pk).update(last_value=False)
    assert run_due(row_of(command).scheduled_on).get("deactivated") == 1
    assert "already reports" in dropped_because(command)
    assert follow_ups(kit) == []


def test_a_manual_command_carries_the_limit() -> None:
    kit = safe_farm()
    user = User.objects.create_user(username="olga")
    result = endpoint_command_manual(
        endpoint_id=kit.io1.pk, value=True, actor=user, reason="dry run", max_on_s=120
    )
    assert (result.command.max_on_s, result.command.max_on_value) == (120, None)
    command = applied(result.command)
    assert row_of(command).scheduled_on == command.applied_at + timedelta(seconds=120)
    run_due(row_of(command).scheduled_on)
    assert [c.target_value for c in follow_ups(kit)] == [False]


def test_a_worker_killed_holding_the_row_leaves_one_follow_up() -> None:
    """A worker claims the row and dies (its transaction never commits): the lease runs out,
    the row is released, the next beats run it once."""
    kit = safe_farm()
    command = limited_and_applied(kit, max_on_s=30)
    due = row_of(command).scheduled_on
    assert scheduler_claim_due(now=due, limit=10)  # the killed worker's claim
    assert run_due(due) == {}  # held by the claim
    later = due + timedelta(hours=1)
    scheduler_release_stale(now=later)
    for beat in range(3):
        run_due(later + timedelta(hours=beat))
    assert len(follow_ups(kit)) == 1
    assert row_of(command).status == SchedulerStatus.COMPLETED


def test_an_ended_command_never_reaches_due_work_again() -> None:
    """Applied is terminal: a redelivered state report moves nothing and ensures nothing new."""
    kit = safe_farm()
    command = limited_and_applied(kit, max_on_s=30)
    version = row_of(command).version
    state(command, True)
    assert row_of(command).version == version
    assert DueWork.objects.filter(scheduler_key__startswith="run-limit:").count() == 1


def test_the_due_time_is_the_applied_time_of_the_move_plus_max_on_s() -> None:
    """Whenever reconciliation moves the command, the row is due max_on_s after that move."""
    kit = safe_farm()
    kit.rule(target_value=True, max_on_s=45)
    sent = ack(dispatch(make_intent(kit)))
    at = timezone.now() + timedelta(minutes=3)
    assert command_transition(
        sent, CommandStatus.APPLIED, ReasonCode.STATE_REPORTED, now=at, applied_at=at
    )
    assert row_of(sent).scheduled_on == at + timedelta(seconds=45)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_handlers_and_workers_racing_on_the_row_create_and_apply_one_follow_up() -> None:
    """Four handler runs at once on four connections, then four workers claiming the row at
    once: one follow-up, applied once."""
    kit = safe_farm()
    command = limited_and_applied(kit, max_on_s=30)
    row = row_of(command)
    job = SchedulerJob(
        scheduler_id=row.pk,
        token=row.version,
        automation_type=row.automation_type,
        trigger_type=row.trigger_type,
        scheduler_key=row.scheduler_key,
        scheduled_on=row.scheduled_on,
        scheduled_local_date=None,
        time_zone_id=row.time_zone_id,
        input_hash=row.input_hash,
        retry_count=0,
        now=row.scheduled_on,
    )
    assert race(lambda: run_limit_run(job), 4) == []
    assert race(lambda: run_due(row.scheduled_on), 4) == []
    [follow_up] = follow_ups(kit)
    assert row_of(command).status == SchedulerStatus.COMPLETED
    done = applied(follow_up, False)
    assert CommandTransition.objects.filter(command=done, to_status="applied").count() == 1


def test_the_command_page_shows_the_limit(support: Client) -> None:
    kit = safe_farm()
    command = limited_and_applied(kit, max_on_s=30)
    page = support.get(f"/admin/automation/devicecommand/{command.pk}/change/")
    assert page.status_code == 200
    assert "back to the endpoint&#x27;s safe value 30 s after it applied" in page.content.decode()
    rules = support.get("/admin/automation/automationrule/").content.decode()
    assert "for at most 30 s" in rules
