"""Where a command's time went, from timestamps the pipeline records anyway: the bridge's
receive time on the telemetry row, the event's insert (ingest), the command's insert
(evaluate), the start of its first publish (``first_dispatched_at``: telemetry received
after it may prove the command), the device's ack and the applied move. The same figures
feed ``manage.py timeline``, the ``farm_command_stage_seconds`` histogram and the bench."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from automation.models import AutomationEndpointEvent, AutomationRuleExecution, DeviceCommand
from common.hot_models import column_time
from common.hot_sql import hot_rows, in_list
from devices.models import Telemetry

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
    command_id: int
    received_at: datetime | None  # the triggering reading reached the bridge
    ingested_at: datetime | None  # its endpoint event committed
    decided_at: datetime | None  # the command committed
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


def command_stage_times(*, command_ids: Sequence[int]) -> dict[int, StageTimes]:
    """Stage times of these commands, in one hand-written statement: reconcile reads them
    after every batch that applies a command (the latency histogram), ``timeline`` for one."""
    ids_sql, params = in_list(sorted(set(command_ids)))
    rows = hot_rows(
        "SELECT c.id, t.received_at, ev.created_at, c.created_at, c.first_dispatched_at, "
        "c.acknowledged_at, c.applied_at "
        f"FROM {DeviceCommand._meta.db_table} c "
        f"LEFT JOIN {AutomationRuleExecution._meta.db_table} x ON x.id = c.rule_execution_id "
        f"LEFT JOIN {AutomationEndpointEvent._meta.db_table} ev ON ev.id = x.event_id "
        f"LEFT JOIN {Telemetry._meta.db_table} t ON t.id = ev.source_telemetry_id "
        f"WHERE c.id IN {ids_sql}",
        params,
    )
    return {
        pk: StageTimes(
            pk,
            column_time(Telemetry, "received_at", received),
            column_time(AutomationEndpointEvent, "created_at", ingested),
            column_time(DeviceCommand, "created_at", decided),
            column_time(DeviceCommand, "first_dispatched_at", published),
            column_time(DeviceCommand, "acknowledged_at", acknowledged),
            column_time(DeviceCommand, "applied_at", applied),
        )
        for pk, received, ingested, decided, published, acknowledged, applied in rows
    }
