"""Rejections: every device message (or part of one) that is dropped leaves a
DeviceMessageRejection row with its reason code, written in one INSERT per batch and counted
in ``farm_device_message_rejections_total`` once committed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from common.handoff import after_commit
from config.metrics import metrics_rejections_recorded
from devices.models import DeviceMessageKind, DeviceMessageRejection
from devices.models import DeviceMessageRejectionReason as Reason

DROP_SAMPLE_CHARS = 1024


def printable(text: str) -> str:
    """Text columns (PostgreSQL) cannot hold NUL, and no database driver can encode a lone
    surrogate; keep both visible instead of failing the batch."""
    if not is_utf8(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def device_message_rejections_record(*, rejections: Sequence[DeviceMessageRejection]) -> int:
    """Insert the rows in one statement (inside the caller's transaction, if any) and count
    them by (kind, reason code) after commit, so a rolled-back batch is not counted."""
    if not rejections:
        return 0
    DeviceMessageRejection.objects.bulk_create(rejections)
    _count_on_commit(Counter((r.kind, r.reason_code) for r in rejections))
    return len(rejections)


def _count_on_commit(counts: Counter[tuple[str, str]]) -> None:
    after_commit(lambda: metrics_rejections_recorded(counts=counts))


@dataclass
class DroppedMessages:
    """Messages of one device the bridge dropped for one reason within one flush interval:
    recorded as one rejection, so a flood costs one row per device, not one per message.
    The bridge counts into it (``count``, ``last_received_at``) until the flush."""

    serial: str
    kind: str  # DeviceMessageKind value
    reason: Reason
    count: int
    first_received_at: datetime
    last_received_at: datetime
    sample: str  # the start of the first dropped payload
    detail: str = ""


def dropped_messages_record(*, drops: Sequence[DroppedMessages]) -> int:
    """Write one rejection per summary in one INSERT; ``detail`` starts with the count, and
    the metric counts every message summed. Independent of the Celery hand-off, so the
    bridge records even while Celery is down."""
    kinds = set(DeviceMessageKind.values)
    drops = [d for d in drops if d.count > 0]
    rows = [
        DeviceMessageRejection(
            serial_number=printable(d.serial[:200]),
            kind=d.kind if d.kind in kinds else DeviceMessageKind.TELEMETRY,
            raw_payload=printable(d.sample[:DROP_SAMPLE_CHARS]),
            reason_code=d.reason,
            detail=printable(
                f"{d.count} message(s) dropped by the bridge between "
                f"{d.first_received_at.isoformat()} and {d.last_received_at.isoformat()}"
                + (f": {d.detail}" if d.detail else "")
            )[:500],
            received_at=d.first_received_at,
        )
        for d in drops
    ]
    DeviceMessageRejection.objects.bulk_create(rows)
    dropped: Counter[tuple[str, str]] = Counter()
    for row, d in zip(rows, drops, strict=True):
        dropped[(row.kind, row.reason_code)] += d.count
    _count_on_commit(dropped)
    return len(rows)
