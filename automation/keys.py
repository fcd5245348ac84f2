"""Deterministic keys (docs/spec.md §3.2). Every path that can create a row builds its key
here, so a redelivery, a retry and a sweep all land on the same unique key."""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces, so equal values hash equally."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sha256(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()


TELEMETRY_FINGERPRINT_BYTES = 16


def telemetry_fingerprint(raw_payload: str) -> bytes:
    """The payload's SHA-256, first 16 bytes: the telemetry key is fixed-width, 17 bytes in a
    row where 64 hex digits took 65; 2^-64 odds of two payloads of one device sharing one
    device time and fingerprint are no risk to the dedupe."""
    digest = hashlib.sha256(raw_payload.encode("utf-8", "surrogatepass")).digest()
    return digest[:TELEMETRY_FINGERPRINT_BYTES]


def event_command_idempotency_key(
    *, rule_id: int, target_endpoint_id: int, target_value: Any, event_id: int
) -> str:
    return _sha256(rule_id, target_endpoint_id, canonical_json(target_value), event_id)


def schedule_command_idempotency_key(
    *, rule_id: int, target_endpoint_id: int, target_value: Any, occurrence_id: int
) -> str:
    """A rule schedule's occurrence (its scheduler row): a re-run of the row finds its command."""
    return _sha256(
        "schedule", rule_id, target_endpoint_id, canonical_json(target_value), occurrence_id
    )


def watchdog_command_idempotency_key(
    *, rule_id: int, target_endpoint_id: int, target_value: Any, occurrence_id: int
) -> str:
    """A watchdog's silence (its scheduler row): a re-run of the row finds its command."""
    return _sha256(
        "watchdog", rule_id, target_endpoint_id, canonical_json(target_value), occurrence_id
    )


def manual_command_idempotency_key(
    *, endpoint_id: int, target_value: Any, user_id: int | None, request_key: str
) -> str:
    """An operator's manual command: the same request (the API's ``Idempotency-Key``, or the
    key the admin form carries) for the same endpoint and value lands on one command."""
    return _sha256("manual", endpoint_id, canonical_json(target_value), user_id, request_key)


def rollout_command_idempotency_key(*, rollout_id: int, endpoint_id: int) -> str:
    """A rollout's target: one command per (rollout, endpoint) whatever re-runs a wave, kept
    readable so the ledger shows which rollout sent it."""
    return f"rollout:{rollout_id}:{endpoint_id}"


def retry_command_idempotency_key(*, original_key: str, retry_number: int) -> str:
    """Manual retry ``retry_number`` (1-based) of a command: two clicks that read the same
    number of earlier retries build the same key, so they create one new command."""
    return hashlib.sha256(f"{original_key}retry:{retry_number}".encode()).hexdigest()


def desired_state_fingerprint(params: dict[str, Any]) -> str:
    return _sha256(canonical_json(params))


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_device_command_id() -> str:
    """``cmd_<ULID>``: time-ordered and unique; assigned once per command, reused on retries."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = [_CROCKFORD[(value >> shift) & 31] for shift in range(125, -5, -5)]
    return "cmd_" + "".join(chars)


def receipt_dedupe_key(*, serial: str, kind: str, payload: str, attempt: int) -> str:
    """A redelivered device message is one receipt; the same words on a later attempt are new."""
    return _sha256(serial, kind, payload, attempt)


def target_value_key(value: Any) -> str:
    """One key per target value (1 and 1.0 alike, True apart from 1): the cool-down's key."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return _sha256("target-value", canonical_json(value))
