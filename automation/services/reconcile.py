"""Reconciliation: receipts (stored by ``automation.services.receipts``), deadlines and
telemetry decide where a command stands.

``applied`` is reached only with evidence: a state report for the commandId whose reported
value matches, or telemetry of the target endpoint received after the request, equal to the
target and unlike what the endpoint reported before (``decide`` ranks the evidence). The
verdict reads the whole receipt set in the statement that takes the command's row lock, so
the order in which a reply and the dispatcher's own commit arrive cannot lose a transition
(a reply committed while that statement waits for the lock nudges a reconcile of its own),
and a duplicate receipt is absorbed by its unique key before it is ever read. The batch's
statements are hand-written (``automation.services.reconcile_sql``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from automation.models import DeviceCommand, ReceiptType
from automation.operators import values_equal
from automation.services.commands import command_retry_or_expire, receipt_mark
from automation.services.cooldown import (
    COOLDOWN_STATUSES,
    command_cooldown_record,
    command_cooldowns_clear,
)
from automation.services.evidence import Evidence, evidence_batch
from automation.services.latency import command_stage_times
from automation.services.reconcile_sql import (
    commands_lock_read,
)
from automation.services.transitions import (
    CommandFields,
    GuardedTransition,
    Transition,
    guarded_transitions_apply,
)
from automation.states import (
    COMMAND_AWAITING_DEVICE,
    CommandStatus,
    ReasonCode,
    command_can_move,
)
from common.handoff import after_commit
from common.json_types import JsonValue
from config.metrics import metrics_stage_latencies_observed
from devices.mqtt.contract import (
    ResultCode,
)
from devices.reported import report_value

logger = logging.getLogger(__name__)

_FAILING_CODES = {
    ResultCode.INVALID_PARAM: ReasonCode.INVALID_PARAM,
    ResultCode.NOT_SUPPORTED: ReasonCode.NOT_SUPPORTED,
    ResultCode.HARDWARE_FAULT: ReasonCode.HARDWARE_FAULT,
}


# --- the verdict (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    to: CommandStatus
    reason: ReasonCode
    fields: CommandFields = field(default_factory=CommandFields)
    retry: bool = False  # a transient failure: retry or expire by the budget
    detail: str = ""


def decide(e: Evidence, now: datetime, applied_window_s: float) -> Verdict | None:
    """The next transition the evidence justifies, or None. Called repeatedly until None,
    so dispatched + ack + matching state walks dispatched → acknowledged → applied.

    Precedence of evidence, strongest first (docs/correctness.md):

    1. A refusal of the current attempt (``rejected`` with a non-transient code) → ``failed``
       with that code. The device said no; no report or reading afterwards overrules it.
    2. A state report for this commandId: the value matches → ``applied``; it contradicts →
       ``uncertain``/``state_mismatch`` (the device did something, not this).
    3. Telemetry of the target received after the request was published, equal to the
       target and different from what the endpoint reported before → ``applied``. It is not
       tied to the commandId, so a contradicting state report outranks it.
    4. An ack → ``acknowledged``, also a late one after a timeout (the device has it).
    5. ``busy`` for the current attempt → ``retrying``.
    6. No ack by the deadline → ``retrying``/``ack_timeout``.
    7. Acknowledged, no proof within the applied window → ``uncertain``.
    """
    if e.status not in COMMAND_AWAITING_DEVICE:
        return None
    refusal = _refusal(e)
    if refusal is not None:
        return Verdict(CommandStatus.FAILED, refusal, detail="refused by the device")
    reported = _reported(e)
    if any(values_equal(v, e.target_value) for v in reported):
        return _if_acked_first(e, Verdict(CommandStatus.APPLIED, ReasonCode.STATE_REPORTED))
    if reported:  # every report contradicts the desired state
        return Verdict(
            CommandStatus.UNCERTAIN, ReasonCode.STATE_MISMATCH, detail=f"reported {reported[-1]!r}"
        )
    if e.telemetry_reading:
        applied = Verdict(
            CommandStatus.APPLIED, ReasonCode.TELEMETRY_MATCHED, detail=e.telemetry_reading
        )
        return _if_acked_first(e, applied)
    ack = _accepted(e)
    if ack is not None and e.status != CommandStatus.ACKNOWLEDGED:
        return Verdict(
            CommandStatus.ACKNOWLEDGED, ReasonCode.ACKNOWLEDGED, {"acknowledged_at": ack}
        )
    current = [r for r in e.responses if r.attempt == e.attempt]
    if (
        ack is None
        and current
        and e.status == CommandStatus.DISPATCHED
        and current[-1].code == ResultCode.BUSY
    ):
        return Verdict(CommandStatus.RETRYING, ReasonCode.DEVICE_BUSY, retry=True)
    if e.status == CommandStatus.DISPATCHED and e.deadline_at and now >= e.deadline_at:
        return Verdict(CommandStatus.RETRYING, ReasonCode.ACK_TIMEOUT, retry=True)
    if (
        e.status == CommandStatus.ACKNOWLEDGED
        and e.acknowledged_at
        and now >= e.acknowledged_at + timedelta(seconds=applied_window_s)
    ):
        return Verdict(CommandStatus.UNCERTAIN, ReasonCode.NO_APPLIED_EVIDENCE)
    return None


def reading_may_decide(e: Evidence) -> bool:
    """Whether a reading of the target could change ``decide``'s verdict: not once the
    device refused the current attempt or reported the endpoint's state (1 and 2 outrank
    3). Neither depends on the status, so it holds for every step of a chain."""
    return _refusal(e) is None and not _reported(e)


def _reported(e: Evidence) -> list[JsonValue]:
    """The values the state reports give for the target, in the order they came."""
    return [
        value
        for found, value in (
            report_value(s, param_key=e.param_key, endpoint_key=e.endpoint_key) for s in e.states
        )
        if found
    ]


def _refusal(e: Evidence) -> ReasonCode | None:
    """The reason of a non-transient refusal of the current attempt, if the device sent one."""
    for r in reversed(e.responses):
        if r.attempt == e.attempt and r.status == "rejected" and r.code in _FAILING_CODES:
            return _FAILING_CODES[ResultCode(r.code)]
    return None


def _accepted(e: Evidence) -> datetime | None:
    return next((r.at for r in e.responses if r.status == "accepted"), None)


def _if_acked_first(e: Evidence, applied: Verdict) -> Verdict:
    """Record the acknowledgement step first when an ack exists, for a readable timeline."""
    ack = _accepted(e)
    if ack is not None and e.status in (CommandStatus.DISPATCHED, CommandStatus.RETRYING):
        return Verdict(
            CommandStatus.ACKNOWLEDGED, ReasonCode.ACKNOWLEDGED, {"acknowledged_at": ack}
        )
    return applied


# --- applying it ------------------------------------------------------------------------


def command_reconcile(*, command_id: int, now: datetime | None = None) -> str:
    """One command through ``commands_reconcile``; the status reached ("" if none)."""
    return commands_reconcile(command_ids=[command_id], now=now).get(command_id, "")


def commands_reconcile(
    *, command_ids: Sequence[int], now: datetime | None = None
) -> dict[int, str]:
    """Apply every transition the evidence justifies, for a batch under its row locks; the
    status each command reached. An end on the device's word starts the pair's cool-down; an
    applied command lifts it.

    The common moves (acknowledged, applied, uncertain, failed) are decided in memory and
    written together (``guarded_transitions_apply``); a retry (busy, ack timeout) goes row
    by row, as it also writes a receipt and may expire the command."""
    now = now or timezone.now()
    if not command_ids:
        return {}
    with transaction.atomic():
        rows = commands_lock_read(command_ids)
        commands = [r.command for r in rows]
        started = {i.pk: i.status for i in commands}
        evidence = evidence_batch(rows, reading_may_decide=reading_may_decide)
        moves: list[GuardedTransition] = []
        for command in commands:
            walk = _walk(command, evidence[command.pk], now)
            if walk.retry is not None:  # it writes a receipt and may expire: row by row
                if not _retry(command, walk.retry, now):
                    continue
                walk = _walk(command, evidence[command.pk], now)  # on from where it left
            if walk.path:
                moves.append(GuardedTransition(command, list(walk.path), walk.fields))
        guarded_transitions_apply(moves, now=now)
        changed = [i for i in commands if i.status != started[i.pk]]
        _cooldowns_follow(changed, now)
        applied = [i.pk for i in changed if i.status == CommandStatus.APPLIED]
        if applied:
            after_commit(lambda: _latencies_observe(applied))
    return {i.pk: i.status for i in commands}


@dataclass(frozen=True)
class Walk:
    """Where the evidence leads a command from where it stands: the moves, decided in memory
    and written together, or the retry the walk stopped at (busy, ack timeout) before any
    move: a retry writes a receipt and may expire the command, so it goes row by row."""

    path: tuple[Transition, ...] = ()
    fields: CommandFields = field(default_factory=CommandFields)
    retry: Verdict | None = None


def _walk(command: DeviceCommand, evidence: Evidence, now: datetime) -> Walk:
    """``decide`` again and again from the command's status, until it has nothing more to
    say (dispatched + ack + matching state walks dispatched → acknowledged → applied)."""
    status, fields = CommandStatus(command.status), CommandFields()
    path: list[Transition] = []
    for _ in range(4):  # no chain is longer: a status never repeats on one walk
        verdict = decide(
            replace(
                evidence,
                status=status,
                attempt=command.attempt_count,
                deadline_at=command.deadline_at,
                acknowledged_at=fields.get("acknowledged_at", command.acknowledged_at),
            ),
            now,
            settings.APPLIED_WINDOW_S,
        )
        if verdict is None:
            break
        if verdict.retry:
            return Walk(tuple(path), fields, None if path else verdict)
        if not command_can_move(status, verdict.to):
            break
        path.append(Transition(verdict.to, verdict.reason, verdict.detail))
        fields |= verdict.fields
        if verdict.to == CommandStatus.APPLIED:
            fields["applied_at"] = now
        status = verdict.to
    return Walk(tuple(path), fields)


def _retry(command: DeviceCommand, verdict: Verdict, now: datetime) -> bool:
    """A transient failure of the current attempt: its mark, then the next attempt or the
    end of the budget. False when another worker moved the command first."""
    if verdict.reason == ReasonCode.ACK_TIMEOUT:
        deadline = command.deadline_at.isoformat() if command.deadline_at else None
        receipt_mark(
            command,
            ReceiptType.TIMEOUT_MARK,
            {"attempt": command.attempt_count, "deadlineAt": deadline},
            now,
        )
    return command_retry_or_expire(command, verdict.reason, now=now)


def _latencies_observe(command_ids: list[int]) -> None:
    for times in command_stage_times(command_ids=command_ids).values():
        metrics_stage_latencies_observed(hops=times.hops())


def _cooldowns_follow(changed: Sequence[DeviceCommand], now: datetime) -> None:
    for command in changed:
        if command.status in COOLDOWN_STATUSES:
            command_cooldown_record(command, now=now)
    command_cooldowns_clear(
        [
            (i.target_device_endpoint_id, i.target_value)
            for i in changed
            if i.status == CommandStatus.APPLIED
        ]
    )


def commands_overdue(*, now: datetime, limit: int) -> list[int]:
    """Commands past their ack deadline or applied window: timeout handling is due."""
    window = timedelta(seconds=settings.APPLIED_WINDOW_S)
    dispatched = DeviceCommand.objects.filter(
        status=CommandStatus.DISPATCHED, deadline_at__lte=now
    ).values_list("pk", flat=True)[:limit]
    acknowledged = DeviceCommand.objects.filter(
        status=CommandStatus.ACKNOWLEDGED, acknowledged_at__lte=now - window
    ).values_list("pk", flat=True)[:limit]
    return sorted(set(dispatched) | set(acknowledged))[:limit]
