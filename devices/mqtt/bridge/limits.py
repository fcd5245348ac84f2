"""The bridge's flood bounds: a token bucket per device and a payload size cap. A message over
either bound is acknowledged and never stored as telemetry or a receipt; it is counted into
one summary rejection per (device, kind, reason), written every ``drop_flush_s``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import close_old_connections

from devices.models import DeviceMessageRejectionReason as Reason
from devices.mqtt.bridge.stats import BridgeStats
from devices.mqtt.contract import TopicKind
from devices.mqtt.messages import decode_payload
from devices.services import DroppedMessages, dropped_messages_record

logger = logging.getLogger("devices.mqtt.bridge")

MAX_DROP_SUMMARIES = 10_000  # pending (device, kind, reason) summaries; beyond: counted only
DROP_SAMPLE_BYTES = 1024

DropRecorder = Callable[[list[DroppedMessages]], None]


def database_drop_recorder(drops: list[DroppedMessages]) -> None:
    """Write drop summaries from the bridge's thread: a connection the database closed (or
    that failed before) is replaced first, as a long-running process must."""
    close_old_connections()
    try:
        dropped_messages_record(drops=drops)
    finally:
        close_old_connections()


@dataclass(slots=True)
class _Bucket:
    """A device's token bucket: ``tokens`` as of monotonic time ``at``."""

    tokens: float
    at: float


class DeviceLimits:
    """One device cannot take the pipeline's capacity from the others: the token buckets,
    the size cap and the pending drop summaries of one bridge."""

    def __init__(
        self,
        *,
        client_id: str,
        stats: BridgeStats,
        max_payload: int,
        rate: float | None,
        burst: float,
        drop_flush_s: float,
        drop_recorder: DropRecorder,
    ) -> None:
        self._client_id = client_id
        self._stats = stats
        self._max_payload = max_payload
        self._rate: float = settings.BRIDGE_DEVICE_RATE_PER_S if rate is None else rate
        self._burst = burst
        self._buckets: dict[str, _Bucket] = {}
        self._drops: dict[tuple[str, str, Reason], DroppedMessages] = {}
        self._drop_flush_s = drop_flush_s
        self._drop_recorder = drop_recorder
        self._next_drop_flush = 0.0

    def refuse(self, serial: str, kind: TopicKind, payload: bytes, received_at: datetime) -> bool:
        """True when the message is dropped (over its device's rate, or over the size cap);
        the caller then only acknowledges it."""
        if not self._allow(serial):
            self._stats.rate_limited += 1
            detail = f"over {self._rate:g}/s (burst {self._burst:g})"
            self._drop(serial, kind, Reason.RATE_LIMITED, payload, received_at, detail)
            return True
        if len(payload) > self._max_payload:
            self._stats.oversized += 1
            logger.warning(
                "bridge: %d-byte %s payload from %s exceeds %d bytes; dropped",
                len(payload),
                kind,
                serial,
                self._max_payload,
                extra={"serialNumber": serial},
            )
            detail = f"{len(payload)} bytes > {self._max_payload}"
            self._drop(serial, kind, Reason.PAYLOAD_TOO_LARGE, payload, received_at, detail)
            return True
        return False

    def _allow(self, serial: str) -> bool:
        """Take a token from the device's bucket (refilled at the configured rate)."""
        if self._rate <= 0:
            return True
        now = time.monotonic()
        bucket = self._buckets.get(serial)
        if bucket is None:
            bucket = self._buckets[serial] = _Bucket(self._burst, now)
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.at) * self._rate)
        bucket.at = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def _drop(
        self,
        serial: str,
        kind: TopicKind,
        reason: Reason,
        payload: bytes,
        received_at: datetime,
        detail: str,
    ) -> None:
        """Count a dropped message into its device's summary for the next record flush."""
        key = (serial, kind.value, reason)
        drops = self._drops.get(key)
        if drops is not None:
            drops.count += 1
            drops.last_received_at = received_at
            return
        if len(self._drops) >= MAX_DROP_SUMMARIES:
            logger.warning("bridge: too many devices dropping messages; %s not recorded", serial)
            return
        sample = decode_payload(payload[:DROP_SAMPLE_BYTES])[0]
        self._drops[key] = DroppedMessages(
            serial, kind.value, reason, 1, received_at, received_at, sample, detail
        )

    def maintain(self) -> None:
        """Every ``drop_flush_s``: record the drop summaries and forget full buckets (a
        device that sent nothing for a while), so memory follows active devices only."""
        now = time.monotonic()
        if now < self._next_drop_flush:
            return
        self._next_drop_flush = now + self._drop_flush_s
        self.record_drops()
        if self._rate > 0:
            full = [
                serial
                for serial, b in self._buckets.items()
                if b.tokens + (now - b.at) * self._rate >= self._burst
            ]
            for serial in full:
                del self._buckets[serial]

    def record_drops(self) -> None:
        """Write the pending summaries; a database error is logged and counted, and the
        summaries are kept for the next attempt (bounded by ``MAX_DROP_SUMMARIES``)."""
        if not self._drops:
            return
        drops = list(self._drops.values())
        try:
            self._drop_recorder(drops)
        except Exception as exc:  # the loop must outlive the database
            self._stats.drop_record_failures += 1
            logger.warning(
                "bridge %s: recording %d drop summary(ies) failed: %s; retrying",
                self._client_id,
                len(drops),
                exc,
                extra={"bridgeClientId": self._client_id, "reason": str(exc)},
            )
            return
        self._drops.clear()
