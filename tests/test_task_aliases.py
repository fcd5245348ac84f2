"""Tasks renamed to their owning app's prefix, or from "intent" to "command", keep their
previous release's name for one release: a message queued under the old name during an upgrade
is still consumed, on the same queue, with the same limits and retries, by the same
function."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from automation.models import DeviceCommand
from automation.states import CommandStatus
from config.celery import app as celery_app
from config.celery import route_to_stage
from config.task_names import PREVIOUS_TASK_NAMES
from devices.models import Telemetry
from devices.mqtt.messages import InboundTelemetry
from devtools.runtime import in_process_worker
from tests.automation.conftest import dispatch, make_intent
from tests.devices.factories import make_farm
from tests.waiting import wait_for

PREVIOUS_NAMES = {
    "devices.telemetry_ingest": "automation.telemetry_ingest",
    "automation.scheduler_poll_due": "scheduler.poll_due",
    "automation.scheduler_execute_batch": "scheduler.execute_batch",
    "automation.scheduler_release_stale": "scheduler.release_stale",
    "automation.scheduler_trace_prune": "scheduler.trace_prune",
    **PREVIOUS_TASK_NAMES,
}
SAME = ("stage_queue", "soft_time_limit", "time_limit", "autoretry_for", "max_retries")


@pytest.mark.parametrize(("old", "new"), sorted(PREVIOUS_NAMES.items()))
def test_a_previous_name_runs_the_renamed_task_on_its_queue_with_its_limits(
    old: str, new: str
) -> None:
    before, now = celery_app.tasks[old], celery_app.tasks[new]
    assert before.__wrapped__ is now.__wrapped__
    assert route_to_stage(old, (), {}, {}) == route_to_stage(new, (), {}, {}) is not None
    assert [getattr(before, k, None) for k in SAME] == [getattr(now, k, None) for k in SAME]


@pytest.fixture
def worker() -> Iterator[None]:
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge("ingest")  # stale messages of earlier runs
    with in_process_worker(concurrency=2):
        yield


@pytest.mark.django_db(transaction=True)
def test_a_batch_queued_under_the_previous_ingest_name_is_consumed_and_stored(worker) -> None:
    kit = make_farm(prefix="alias")
    ts = (timezone.now() - timedelta(seconds=5)).isoformat()
    payload = json.dumps({"ts": ts, "values": {"temp": 21}})
    message = InboundTelemetry(kit.sensor.serial_number, payload, timezone.now())

    celery_app.send_task("devices.telemetry_ingest", args=[[message.to_task_arg()]])

    wait_for(
        lambda: Telemetry.objects.filter(device=kit.sensor).exists(),
        "the batch sent under the previous name stored",
    )


def test_the_only_task_names_that_say_intent_are_the_previous_names() -> None:
    celery_app.loader.import_default_modules()
    intent_renames = {old for old in PREVIOUS_TASK_NAMES if "intent" in old}
    assert {name for name in celery_app.tasks if "intent" in name} == intent_renames


@pytest.mark.django_db(transaction=True)
def test_a_reconcile_queued_under_its_previous_name_decides_the_command() -> None:
    kit = make_farm(prefix="alias-reconcile")
    kit.rule(threshold_value=30, target_value=True)
    ts = (timezone.now() - timedelta(seconds=5)).isoformat()
    command = dispatch(make_intent(kit, ts=ts))
    past = timezone.now() - timedelta(seconds=1)
    DeviceCommand.objects.filter(pk=command.pk).update(deadline_at=past)  # the ack is overdue
    with celery_app.connection_for_write() as conn:
        for queue in celery_app.conf.task_queues:  # this run's hand-offs of the set-up
            conn.default_channel.queue_purge(queue.name)

    celery_app.send_task("automation.command_intents_reconcile", args=[[command.pk]])

    with in_process_worker(concurrency=2):
        wait_for(
            lambda: DeviceCommand.objects.get(pk=command.pk).status != CommandStatus.DISPATCHED,
            "the reconcile sent under the previous name decided",
        )
    assert DeviceCommand.objects.get(pk=command.pk).status == CommandStatus.RETRYING
