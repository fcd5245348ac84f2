"""The bridge's counters, shared by its loop, batcher and limits."""

from __future__ import annotations

from dataclasses import dataclass, field

from devices.mqtt.contract import TopicKind

BRIDGED_KINDS = (TopicKind.TELEMETRY, TopicKind.RPC_RESPONSE, TopicKind.STATE)


@dataclass
class BridgeStats:
    """Counters for progress lines and tests; a snapshot is a copy, safe to keep."""

    received: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BRIDGED_KINDS, 0))
    stored: int = 0  # committed to the database, then acknowledged
    commits: int = 0  # stored / commits is the mean batch
    acked: int = 0
    duplicates_dropped: int = 0
    unknown_topic: int = 0
    oversized: int = 0
    rate_limited: int = 0
    drop_record_failures: int = 0
    store_failures: int = 0
    reconnects: int = 0

    def summary(self) -> str:
        kinds = " ".join(f"{kind}={count}" for kind, count in self.received.items())
        return (
            f"received[{kinds}] stored={self.stored} in {self.commits} commit(s) "
            f"acked={self.acked} "
            f"duplicates={self.duplicates_dropped} unknown_topic={self.unknown_topic} "
            f"oversized={self.oversized} rate_limited={self.rate_limited} "
            f"drop_record_failures={self.drop_record_failures} "
            f"store_failures={self.store_failures} reconnects={self.reconnects}"
        )
