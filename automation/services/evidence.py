"""What is known about commands, read for a batch under their row locks: the receipts of
each (acks, results, state reports) and the first reading of its target that may prove it.
``decide()`` in ``automation.services.reconcile`` ranks it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from automation.models import (
    AutomationEndpointEvent,
    DeviceCommand,
    DeviceCommandReceipt,
    ReceiptType,
)
from automation.operators import values_equal
from common.json_types import JsonObject, JsonValue

# A stored receipt: (receipt type, payload, attempt, received at).
Receipt = tuple[str, JsonObject, int, datetime]


@dataclass(frozen=True)
class Evidence:
    """What is known about one command, read under its row lock."""

    status: str
    attempt: int
    deadline_at: datetime | None
    acknowledged_at: datetime | None
    param_key: str
    target_value: JsonValue
    responses: Sequence[tuple[int, str, str, datetime]] = ()  # (attempt, status, code, at)
    states: Sequence[JsonObject] = ()  # reportedState of each state report
    # The reading that proves the command (received after the request was published, equal
    # to the target, unlike the value reported before it), described for the audit row.
    telemetry_reading: str = ""
    endpoint_key: str = ""  # the endpoint's own name, which a state report may use too


def reported_state(payload: JsonObject) -> JsonObject:
    """A state report's ``reportedState`` (an object: the contract checked it on receipt)."""
    state = payload.get("reportedState")
    return state if isinstance(state, dict) else {}


def _text(value: JsonValue) -> str:
    """A response's ``status`` or ``resultCode`` (a string: the contract checked it)."""
    return value if isinstance(value, str) else ""


def evidence_batch(intents: Sequence[DeviceCommand]) -> dict[int, Evidence]:
    """The evidence of every intent of a batch, in two reads (receipts, readings)."""
    by_intent: dict[int, list[Receipt]] = defaultdict(list)
    receipts = (
        DeviceCommandReceipt.objects.filter(intent_id__in=[i.pk for i in intents], mismatch=False)
        .order_by("received_at", "pk")
        .values_list("intent_id", "receipt_type", "payload", "attempt", "received_at")
    )
    for intent_id, kind, payload, attempt, at in receipts:
        by_intent[intent_id].append((kind, payload, attempt, at))
    proofs = _telemetry_proofs(intents)
    return {i.pk: _evidence(i, by_intent[i.pk], proofs.get(i.pk, "")) for i in intents}


def _evidence(
    intent: DeviceCommand,
    receipts: Sequence[Receipt],
    telemetry_reading: str,
) -> Evidence:
    responses = [
        (attempt, _text(payload.get("status")), _text(payload.get("resultCode")), at)
        for kind, payload, attempt, at in receipts
        if kind in (ReceiptType.RPC_ACK, ReceiptType.RPC_RESULT)
    ]
    states = [
        reported_state(payload)
        for kind, payload, _, _ in receipts
        if kind == ReceiptType.STATE_REPORT
    ]
    return Evidence(
        status=intent.status,
        attempt=intent.attempt_count,
        deadline_at=intent.deadline_at,
        acknowledged_at=intent.acknowledged_at,
        param_key=next(iter(intent.command_params), ""),
        target_value=intent.target_value,
        responses=responses,
        states=states,
        telemetry_reading=telemetry_reading,
        endpoint_key=intent.target_device_endpoint.profile_endpoint.key,
    )


def _published(intent: DeviceCommand) -> datetime | None:
    """When the request first went out, if telemetry may prove it: a reading of the value
    the endpoint already reported before the command proves nothing about this command."""
    if intent.prior_value_at is not None and values_equal(intent.prior_value, intent.target_value):
        return None
    return intent.first_dispatched_at or intent.dispatched_at


def _telemetry_proofs(intents: Sequence[DeviceCommand]) -> dict[int, str]:
    """Per intent, the first reading of its target received after the request was first
    published that equals the target, described (one read for the batch)."""
    published = {i.pk: at for i in intents if (at := _published(i)) is not None}
    if not published:
        return {}
    since = min(published.values())
    # Per endpoint: (event id, value, created at, received at).
    readings: dict[int, list[tuple[int, JsonValue, datetime, datetime]]] = defaultdict(list)
    rows = (
        AutomationEndpointEvent.objects.filter(
            device_instance_endpoint_id__in={
                i.target_device_endpoint_id for i in intents if i.pk in published
            },
            created_at__gte=since,
            source_telemetry__received_at__gte=since,
        )
        .order_by("pk")
        .values_list(
            "device_instance_endpoint_id",
            "pk",
            "normalized_value",
            "created_at",
            "source_telemetry__received_at",
        )
    )
    for endpoint_id, pk, value, created_at, received_at in rows:
        readings[endpoint_id].append((pk, value, created_at, received_at))
    proofs: dict[int, str] = {}
    for intent in intents:
        at = published.get(intent.pk)
        if at is None:
            continue
        for pk, value, created_at, received_at in readings[intent.target_device_endpoint_id]:
            if created_at >= at and received_at >= at and values_equal(value, intent.target_value):
                proofs[intent.pk] = f"reading {pk} ({value!r}) received {received_at.isoformat()}"
                break
    return proofs
