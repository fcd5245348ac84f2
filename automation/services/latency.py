"""Where a command's time went, from timestamps the pipeline records anyway: the bridge's
receive time on the telemetry row, the event's insert (ingest), the intent's insert
(evaluate), the start of its first publish (``first_dispatched_at``: telemetry received
after it may prove the command), the device's ack and the applied move. The same figures
feed ``manage.py timeline``, the ``farm_command_stage_seconds`` histogram and the bench."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from automation.models import DeviceCommand

# (hop name, from field, to field) in pipeline order.
HOPS: tuple[tuple[str, str, str], ...] = (
    ("bridge→ingest", "received_at", "ingested_at"),
    ("ingest→evaluate", "ingested_at", "decided_at"),
    ("evaluate→publish", "decided_at", "published_at"),
    ("publish→ack", "published_at", "acknowledged_at"),
    ("ack→applied", "acknowledged_at", "applied_at"),
)
# The whole way, from the reading's arrival.
TOTALS: tuple[tuple[str, str, str], ...] = (
    ("reading→publish", "received_at", "published_at"),
    ("reading→applied", "received_at", "applied_at"),
)


@dataclass(frozen=True)
class StageTimes:
    intent_id: int
    received_at: datetime | None  # the triggering reading reached the bridge
    ingested_at: datetime | None  # its endpoint event committed
    decided_at: datetime | None  # the intent committed
    published_at: datetime | None  # the first request's batch began to go out
    acknowledged_at: datetime | None
    applied_at: datetime | None

    def hops(self, which: Sequence[tuple[str, str, str]] = HOPS) -> list[tuple[str, float]]:
        """(hop, seconds) for each hop whose two ends are known."""
        out: list[tuple[str, float]] = []
        for name, start, end in which:
            a, b = getattr(self, start), getattr(self, end)
            if a is not None and b is not None:
                out.append((name, (b - a).total_seconds()))
        return out


def command_stage_times(*, intent_ids: Sequence[int]) -> dict[int, StageTimes]:
    """Stage times of these commands, in one read."""
    rows = DeviceCommand.objects.filter(pk__in=list(intent_ids)).values_list(
        "pk",
        "rule_execution__event__source_telemetry__received_at",
        "rule_execution__event__created_at",
        "created_at",
        "first_dispatched_at",
        "acknowledged_at",
        "applied_at",
    )
    return {row[0]: StageTimes(*row) for row in rows}
