"""Where a command's time goes, hop by hop, from the timestamps the pipeline records.

``TIMELINE`` is the path of one crossing in order, one name per moment. Each moment either
has a source (a column the pipeline writes, or the device's receive time) or has none yet;
a hop ends at a moment, and starts at the nearest earlier moment that is recorded. A hop
whose end nobody records prints "–", so the table shows where time is unaccounted for.
Recording a new moment means giving it a source in ``devtools.bench.distributed.accounting``:
this module then splits the hop around it by itself."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from devtools.bench.report import percentile

# (name, what the moment is); the names are the keys of each sample's mapping.
TIMELINE: tuple[tuple[str, str], ...] = (
    ("reading", "the reading's own timestamp (its publish time)"),
    ("bridge_received", "the bridge took it off MQTT (Telemetry.received_at)"),
    ("bridge_handed_off", "the bridge's batch went to Celery (not recorded)"),
    ("ingest_started", "the ingest task began (AutomationEndpointEvent.created_at)"),
    ("ingest_committed", "ingest committed the event (not recorded)"),
    ("evaluate_started", "the evaluate task began (not recorded)"),
    ("command_created", "evaluation decided (DeviceCommand.created_at)"),
    ("event_processed", "the event was marked processed (processed_at)"),
    ("dispatch_started", "the dispatch task began (first_dispatched_at)"),
    ("device_received", "the RPC request reached the device (device side)"),
    ("puback", "the broker acknowledged the request (not recorded)"),
    ("ack_received", "the bridge took the device's ack (acknowledged_at)"),
    ("state_received", "the bridge took the state report (its receipt's received_at)"),
    ("ack_reconciled", "reconcile recorded the ack (CommandTransition.at)"),
    ("applied", "reconcile recorded applied (applied_at)"),
)
NAMES = tuple(name for name, _ in TIMELINE)
MISSING = "–"

Sample = Mapping[str, datetime | None]


@dataclass(frozen=True)
class Hop:
    start: str | None  # None: the end is not recorded
    end: str
    ms: tuple[float, ...]

    @property
    def label(self) -> str:
        if self.start is None:
            return f"{self.end} (not recorded)"
        return f"{self.start} → {self.end}"

    def p(self, q: float) -> float:
        return percentile(self.ms, q)

    def cells(self) -> tuple[object, ...]:
        if self.start is None or not self.ms:
            return (self.label, 0, MISSING, MISSING)
        return (self.label, len(self.ms), self.p(0.5), self.p(0.99))

    def as_json(self) -> dict[str, object]:
        recorded = self.start is not None and bool(self.ms)
        return {
            "from": self.start,
            "to": self.end,
            "samples": len(self.ms),
            "p50_ms": _finite(self.p(0.5)) if recorded else None,
            "p99_ms": _finite(self.p(0.99)) if recorded else None,
        }


def stage_breakdown(samples: Sequence[Sample], timeline: Sequence[str] = NAMES) -> list[Hop]:
    """One hop per moment of ``timeline`` after the first: from the nearest earlier moment
    that any sample records to this one, over the samples that have both. A moment no
    sample records makes a hop with no start (printed "–")."""
    recorded = [name for name in timeline if any(s.get(name) is not None for s in samples)]
    hops: list[Hop] = []
    for position, end in enumerate(timeline[1:], 1):
        if end not in recorded:
            hops.append(Hop(None, end, ()))
            continue
        start = next((n for n in reversed(timeline[:position]) if n in recorded), None)
        ms = tuple(
            (b - a).total_seconds() * 1000
            for s in samples
            if start is not None
            and (a := s.get(start)) is not None
            and (b := s.get(end)) is not None
        )
        hops.append(Hop(start, end, ms))
    return hops


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 2)
