"""What is known about commands, read for a batch under their row locks: the receipts of
each (acks, results, state reports) and the first reading of its target that may prove it.
``decide()`` in ``automation.services.reconcile`` ranks it. The reads are
``automation.services.reconcile_sql``'s: the receipts come with the commands' locked read,
and the readings are read only for the commands whose receipts leave them a say."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.utils import timezone

from automation.models import DeviceCommand, ReceiptType
from automation.operators import values_equal
from automation.services.reconcile_sql import Receipt, ReconcileRow, readings_received
from common.json_types import JsonObject, JsonValue
from devices.readings import Reading


class Response(NamedTuple):
    """A device's answer to one attempt: ``accepted`` or ``rejected``, with its result code."""

    attempt: int
    status: str
    code: str
    at: datetime


@dataclass(frozen=True)
class Evidence:
    """What is known about one command, read under its row lock."""

    status: str
    attempt: int
    deadline_at: datetime | None
    acknowledged_at: datetime | None
    param_key: str
    target_value: JsonValue
    responses: Sequence[Response] = ()
    states: Sequence[JsonObject] = ()  # reportedState of each state report
    # The reading that proves the command (received after the request was published, equal
    # to the target, unlike the value reported before it), described for the audit row.
    telemetry_reading: str = ""
    endpoint_key: str = ""  # the endpoint's own name, which a state report may use too

    def __post_init__(self) -> None:
        # Named whatever the caller wrote: (attempt, status, code, at) tuples become Responses.
        # Read receipts are Responses already, and reconcile's walk copies the evidence at
        # every step: those pass untouched.
        if not all(isinstance(r, Response) for r in self.responses):
            object.__setattr__(self, "responses", tuple(Response(*r) for r in self.responses))


def reported_state(payload: JsonObject) -> JsonObject:
    """A state report's ``reportedState`` (an object: the contract checked it on receipt)."""
    state = payload.get("reportedState")
    return state if isinstance(state, dict) else {}


def _text(value: JsonValue) -> str:
    """A response's ``status`` or ``resultCode`` (a string: the contract checked it)."""
    return value if isinstance(value, str) else ""


def evidence_batch(
    rows: Sequence[ReconcileRow], *, reading_may_decide: Callable[[Evidence], bool]
) -> dict[int, Evidence]:
    """The evidence of every command of a locked read (``reconcile_sql.commands_lock_read``).
    Telemetry is read once, for the commands whose receipts leave a reading a say
    (``reading_may_decide``), and not at all when every command's receipts settle it."""
    evidence = {r.command.pk: _evidence(r.command, r.receipts, "") for r in rows}
    unsettled = [r.command for r in rows if reading_may_decide(evidence[r.command.pk])]
    for pk, reading in _telemetry_proofs(unsettled).items():
        evidence[pk] = replace(evidence[pk], telemetry_reading=reading)
    return evidence


def _evidence(
    command: DeviceCommand,
    receipts: Sequence[Receipt],
    telemetry_reading: str,
) -> Evidence:
    responses = [
        Response(attempt, _text(payload.get("status")), _text(payload.get("resultCode")), at)
        for kind, payload, attempt, at in receipts
        if kind in (ReceiptType.RPC_ACK, ReceiptType.RPC_RESULT)
    ]
    states = [
        reported_state(payload)
        for kind, payload, _, _ in receipts
        if kind == ReceiptType.STATE_REPORT
    ]
    return Evidence(
        status=command.status,
        attempt=command.attempt_count,
        deadline_at=command.deadline_at,
        acknowledged_at=command.acknowledged_at,
        param_key=next(iter(command.command_params), ""),
        target_value=command.target_value,
        responses=responses,
        states=states,
        telemetry_reading=telemetry_reading,
        endpoint_key=command.target_device_endpoint.profile_endpoint.key,
    )


def _published(command: DeviceCommand) -> datetime | None:
    """When the request first went out, if telemetry may prove it: a reading of the value
    the endpoint already reported before the command proves nothing about this command."""
    if command.prior_value_at is not None and values_equal(
        command.prior_value, command.target_value
    ):
        return None
    return command.first_dispatched_at or command.dispatched_at


def _telemetry_proofs(commands: Sequence[DeviceCommand]) -> dict[int, str]:
    """Per command, the first reading of its target received after the request was first
    published that equals the target, described (one read for the batch). The readings are
    the stored telemetry's (``devices.readings``): a relay no rule reads has no endpoint
    events, and its telemetry proves a command all the same."""
    published = {i.pk: at for i in commands if (at := _published(i)) is not None}
    if not published:
        return {}
    since = min(published.values())
    waiting = [i for i in commands if i.pk in published]
    types = {
        (i.target_device_id, i.target_device_endpoint.profile_endpoint.key): (
            i.target_device_endpoint.profile_endpoint.data_type
        )
        for i in waiting
    }
    # A reading received since ``since`` carries a device time no older than the oldest
    # that ingest accepts: the bound keeps the read on the (device, message_ts) key.
    readings: dict[tuple[int, str], list[Reading]] = defaultdict(list)
    for r in readings_received(
        device_ids=[i.target_device_id for i in waiting],
        types=types,
        start=since - timedelta(seconds=settings.TELEMETRY_MAX_AGE_S),
        end=timezone.now() + timedelta(seconds=settings.TELEMETRY_MAX_FUTURE_S),
        received_since=since,
    ):
        readings[r.device_id, r.key].append(r)
    proofs: dict[int, str] = {}
    for command in waiting:
        at = published[command.pk]
        where = (command.target_device_id, command.target_device_endpoint.profile_endpoint.key)
        for r in sorted(readings[where], key=lambda r: (r.received_at, r.telemetry_id)):
            if r.received_at >= at and values_equal(r.value, command.target_value):
                seen = f"({r.value!r}) received {r.received_at.isoformat()}"
                proofs[command.pk] = f"reading in telemetry {r.telemetry_id} {seen}"
                break
    return proofs
