"""The dispatcher: the only code that publishes MQTT RPC.

Guarantees: a command is claimed by exactly one worker (lease + version compare-and-set);
the database's unique ``inflight_endpoint`` keeps one live command per device endpoint;
``deviceCommandId`` is assigned once and reused on every retry, so a crash between publish
and marking ``dispatched`` leads to a re-send the device recognises, never a second apply.
A broker outage spends no attempts: while the broker is unreachable a command waits (capped,
bounded by ``COMMAND_MAX_AGE_S``) with its budget intact; a connected broker's silence does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from automation import coordination
from automation.gates import command_gate_failure
from automation.models import AutomationRule, DeviceCommand
from automation.services.claim import DispatchOutcome, commands_claim
from automation.services.commands import (
    command_await_broker,
    command_retry_or_expire,
    command_transition,
)
from automation.services.dispatch_sql import commands_read, receipts_answered
from automation.services.spine import Committed, hand_on_commit
from automation.services.transitions import (
    CommandFields,
    GuardedTransition,
    Transition,
    guarded_transitions_apply,
)
from automation.states import COMMAND_DISPATCHABLE, CommandStatus, ReasonCode
from devices.models import DeviceInstanceEndpoint
from devices.mqtt.client import MqttError
from devices.mqtt.contract import RpcRequest, rpc_request_topic
from devices.mqtt.publisher import BrokerUnreachable, get_publisher

logger = logging.getLogger(__name__)

PublishFn = Callable[[str, bytes], int]
# Publishes every request back to back, then waits for the PUBACKs: a message id or the
# error, per request, in order.
PublishManyFn = Callable[[Sequence[tuple[str, bytes]]], list["int | MqttError"]]
ConnectedFn = Callable[[], bool]


def _precheck(
    command: DeviceCommand, now: datetime, holders: dict[int, int]
) -> DispatchOutcome | None:
    if command.status not in COMMAND_DISPATCHABLE:
        return DispatchOutcome.NOT_DISPATCHABLE
    if command.next_attempt_at is not None and command.next_attempt_at > now:
        return DispatchOutcome.NOT_DUE
    if command.lease_expires_at is not None and command.lease_expires_at > now:
        return DispatchOutcome.LEASED
    holder = holders.get(command.target_device_endpoint_id)
    if holder is not None and holder != command.pk:
        return DispatchOutcome.ENDPOINT_BUSY
    return None


def command_dispatch(
    *,
    command_id: int,
    publish: PublishFn,
    now: datetime | None = None,
    trust_cache: bool = True,
    connected: ConnectedFn | None = None,
) -> DispatchOutcome:
    """One command through ``commands_dispatch`` (a batch of one)."""

    def publish_many(requests: Sequence[tuple[str, bytes]]) -> list[int | MqttError]:
        results: list[int | MqttError] = []
        for topic, payload in requests:
            try:
                results.append(publish(topic, payload))
            except MqttError as exc:
                results.append(exc)
        return results

    outcomes = commands_dispatch(
        command_ids=[command_id],
        publish_many=publish_many,
        now=now,
        trust_cache=trust_cache,
        connected=connected,
    )
    return outcomes.get(command_id, DispatchOutcome.NOT_DISPATCHABLE)


def commands_dispatch_via_publisher(*, command_ids: Sequence[int], trust_cache: bool = True) -> int:
    """The dispatch task's one call: ``commands_dispatch`` through this process's
    publisher (one MQTT connection per worker process, kept between tasks). How many were
    dispatched."""
    publisher = get_publisher()
    outcomes = commands_dispatch(
        command_ids=command_ids,
        publish_many=publisher.publish_many,
        trust_cache=trust_cache,
        connected=publisher.is_connected,
    )
    return sum(1 for o in outcomes.values() if o == DispatchOutcome.DISPATCHED)


def commands_dispatch(
    *,
    command_ids: Sequence[int],
    publish_many: PublishManyFn,
    now: datetime | None = None,
    trust_cache: bool = True,
    connected: ConnectedFn | None = None,
) -> dict[int, DispatchOutcome]:
    """Claim, re-check, publish (the batch back to back, then every PUBACK) and mark
    ``dispatched``; the outcome per command id.

    A constant number of statements per batch, each hand-written
    (``automation.services.dispatch_sql``): one read of the commands with their targets,
    rules and endpoint holders, one claim, one move to ``dispatched`` per kind of move, one
    audit insert. The rare ways out (a broker away, a gate that fails, a budget spent) go
    row by row.

    ``trust_cache=False`` (the sweep) ignores the inflight markers and lets the database
    decide. ``connected`` (the publisher's state) lets a command already waiting for the
    broker wait on without a claim, a gate check or a publish while it is still away.
    """
    now = now or timezone.now()
    read = commands_read(command_ids)
    commands = [row.command for row in read]
    rules = {row.command.pk: row.rule for row in read}
    targets = {row.command.pk: row.target for row in read}
    outcomes: dict[int, DispatchOutcome] = {}
    holders = (
        coordination.inflight_holders([i.target_device_endpoint_id for i in commands])
        if trust_cache
        else {}
    )
    ready: list[DeviceCommand] = []
    for command in commands:
        refused = _precheck(command, now, holders)
        if refused is None:
            refused = _before_claim(command, now, connected)
        if refused is not None:
            outcomes[command.pk] = refused
        else:
            ready.append(command)
    db_holders = {
        row.command.target_device_endpoint_id: row.holder_id
        for row in read
        if row.holder_id is not None
    }
    claimed = commands_claim(ready, now, outcomes, db_holders)
    if not claimed:
        return outcomes
    coordination.inflights_mark(
        {i.target_device_endpoint_id: i.pk for i in claimed},
        settings.DISPATCH_LEASE_S + settings.ACK_TIMEOUT_S + settings.APPLIED_WINDOW_S,
    )
    sendable = _gate_batch(claimed, rules, targets, now, outcomes)
    _publish_batch(sendable, publish_many, now, outcomes)
    return outcomes


def _before_claim(
    command: DeviceCommand, now: datetime, connected: ConnectedFn | None
) -> DispatchOutcome | None:
    if (
        connected is not None
        and command.status == CommandStatus.RETRYING
        and command.attempt_count < command.max_attempts
        and not connected()
    ):
        return _await_broker(command, now, "MQTT publisher not connected", claimed=False)
    if command.attempt_count >= command.max_attempts:  # claims that crashed used the budget
        command_retry_or_expire(command, ReasonCode.RETRY_BUDGET_EXHAUSTED, now=now)
        return DispatchOutcome.EXPIRED
    return None


def _gate_batch(
    claimed: list[DeviceCommand],
    rules: dict[int, AutomationRule | None],
    targets: dict[int, DeviceInstanceEndpoint],
    now: datetime,
    outcomes: dict[int, DispatchOutcome],
) -> list[tuple[DeviceCommand, DeviceInstanceEndpoint]]:
    """Every safety gate of docs/spec.md §3.5, on the rule and target read with the batch
    (the same statement as the commands, just before the claim; a manual command has no rule
    to re-check); a briefly offline device is transient (docs/spec.md §3.4), any other
    failure final."""
    sendable: list[tuple[DeviceCommand, DeviceInstanceEndpoint]] = []
    for command in claimed:
        target = targets[command.pk]
        gate = command_gate_failure(
            rules[command.pk],
            target,
            value=command.target_value,
            now=now,
            freshness_s=settings.DEVICE_FRESHNESS_S,
        )
        if gate == ReasonCode.TARGET_OFFLINE:
            command_retry_or_expire(command, gate, now=now, detail="device not seen recently")
            outcomes[command.pk] = DispatchOutcome.RETRY_SCHEDULED
        elif gate is not None:
            command_transition(command, CommandStatus.FAILED, gate, now=now, detail="safety gate")
            outcomes[command.pk] = DispatchOutcome.GATE_FAILED
        else:
            sendable.append((command, target))
    return sendable


def _publish_batch(
    sendable: list[tuple[DeviceCommand, DeviceInstanceEndpoint]],
    publish_many: PublishManyFn,
    now: datetime,
    outcomes: dict[int, DispatchOutcome],
) -> None:
    if not sendable:
        return
    deadline = now + timedelta(seconds=settings.ACK_TIMEOUT_S)
    requests = [
        (
            rpc_request_topic(command.target_serial_number),
            RpcRequest(
                command_id=command.device_command_id or "",
                method=command.command_method,
                params=command.command_params,
                sent_at=now,
                deadline_at=deadline,
            ).to_json(),
        )
        for command, _ in sendable
    ]
    coordination.correlations_remember(
        {command.device_command_id or "": command.pk for command, _ in sendable}
    )
    results = publish_many(requests)
    moves: list[GuardedTransition] = []
    for (command, target), result in zip(sendable, results, strict=True):
        if isinstance(result, BrokerUnreachable):
            outcomes[command.pk] = _await_broker(command, now, str(result), claimed=True)
        elif isinstance(result, MqttError):  # PubackTimeout, local refusals: attempt spent
            expired_before = command.attempt_count >= command.max_attempts
            command_retry_or_expire(command, ReasonCode.PUBLISH_ERROR, now=now, detail=str(result))
            outcomes[command.pk] = (
                DispatchOutcome.EXPIRED if expired_before else DispatchOutcome.RETRY_SCHEDULED
            )
        else:
            moves.append(_dispatched(command, target, result, now, deadline))
    marked = guarded_transitions_apply(moves, now=now)
    for move in moves:
        outcomes[move.command.pk] = DispatchOutcome.DISPATCHED
    if marked:
        # A fast device may have answered before this commit: the bridge then left its
        # receipts to us (``device_messages_record``), and reconcile decides on them.
        hand_on_commit(Committed(evidence=receipts_answered([m.command.pk for m in marked])))


def _dispatched(
    command: DeviceCommand,
    target: DeviceInstanceEndpoint,
    message_id: int,
    now: datetime,
    deadline: datetime,
) -> GuardedTransition:
    fields: CommandFields = {
        "dispatched_at": now,
        "deadline_at": deadline,
        "lease_expires_at": None,
        "next_attempt_at": None,
        "mqtt_request_id": str(message_id),
    }
    if command.first_dispatched_at is None:  # what telemetry must differ from to prove it
        fields["first_dispatched_at"] = now
        fields["prior_value"] = target.last_value
        fields["prior_value_at"] = target.last_value_at
    step = Transition(
        CommandStatus.DISPATCHED, ReasonCode.DISPATCHED, f"attempt {command.attempt_count}"
    )
    return GuardedTransition(command, [step], fields)


def _await_broker(
    command: DeviceCommand, now: datetime, detail: str, *, claimed: bool
) -> DispatchOutcome:
    """No attempt spent on a broker that was away (no connection, or lost before the PUBACK:
    a copy it got anyway, or one paho resends after reconnecting, is harmless, devices being
    idempotent by commandId). A PUBACK timeout on a live connection does spend one
    (``_publish``): that broker may hold and deliver the request like any sent attempt, and
    counting it bounds the re-sends into a broker that accepts connections but stalls."""
    if not command_await_broker(command, now=now, detail=detail, claimed=claimed):
        return DispatchOutcome.LOST_RACE
    if command.status == CommandStatus.EXPIRED:
        return DispatchOutcome.EXPIRED
    return DispatchOutcome.BROKER_UNREACHABLE


def commands_due(*, now: datetime, pending_older_than: datetime, limit: int) -> list[int]:
    """Commands the dispatcher should (re)try now: pending ones whose nudge may have been lost,
    and retries whose backoff has elapsed. Bounded; skips endpoints held by a live command."""
    free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now)
    endpoint_free_or_mine = Q(target_device_endpoint__inflight_command__isnull=True) | Q(
        inflight_endpoint__isnull=False  # a claim that crashed still holds its own slot
    )
    pending = (
        Q(status=CommandStatus.PENDING_DISPATCH, created_at__lt=pending_older_than)
        & endpoint_free_or_mine
    )
    retry = Q(status=CommandStatus.RETRYING, next_attempt_at__lte=now)
    return list(
        DeviceCommand.objects.filter(free & (pending | retry))
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )
