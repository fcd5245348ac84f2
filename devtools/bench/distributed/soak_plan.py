"""What a soak (``bench --distributed --soak SECONDS``) does, parsed from the command line:
how long, at what rate, how often it samples, and the shortened retention every process
runs with, so that partitions roll and prunes run while it is measured. Pure: no database,
no processes.

The retention settings are derived from the run's length unless given: every table keeps
its rows a sixth of the run (at least ``RETENTION_FLOOR_S``), so six retention periods pass
in the run and the last two thirds, where the trends are fitted, hold a steady state."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from devtools.bench.distributed.plan import PlanError

# What the 2-core development machine keeps with its queues near empty (docs/benchmarks.md,
# "A long run"): at 75/s, half the ~150 commands/s of large batches, the ingest and
# reconcile queues grow.
DEFAULT_RATE = 50.0
DEFAULT_INTERVAL_S = 300.0
MIN_INTERVAL_S = 5.0
# Each fitted window holds at least four samples: the run is six intervals or more.
MIN_INTERVALS = 6
RETENTION_PERIODS = 6  # retention periods in a run when --soak-retention is not given
# A crossing is accounted 30 s after it went out (soak.ACCOUNT_AFTER_S), its rows must still
# be there: a retention shorter than this would let the prune race the accounting.
RETENTION_FLOOR_S = 120.0
DAY_S = 86_400.0
# Shortened for the run; RETENTION_ROLLUPS_DAYS stays (rollups are hourly).
RETENTION_SETTINGS = (
    "RETENTION_TELEMETRY_DAYS",
    "RETENTION_ENDPOINT_EVENTS_DAYS",
    "RETENTION_REJECTIONS_DAYS",
    "RETENTION_EXECUTIONS_DAYS",
    "RETENTION_COMMANDS_DAYS",
    "RETENTION_NOTIFICATIONS_DAYS",
    "RETENTION_EVENT_INBOX_DAYS",
)


def _clamp(value: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, value))


@dataclass(frozen=True)
class SoakPlan:
    seconds: float
    rate: float  # crossings offered per second
    interval_s: float = DEFAULT_INTERVAL_S
    retention_s: float = RETENTION_FLOOR_S  # every shortened table alike

    @property
    def partition_span_s(self) -> int:
        """Two partitions per retention period: each is dropped while the run goes on."""
        return max(60, round(self.retention_s / 2))

    @property
    def prune_interval_s(self) -> int:
        return round(_clamp(self.retention_s / 20, 15, 60))

    @property
    def rollup_interval_s(self) -> int:
        """Raw telemetry stays until the rollups fold it in: they run several times a period."""
        return round(_clamp(self.retention_s / 4, 10, 60))

    @property
    def retention_days(self) -> float:
        return self.retention_s / DAY_S

    def settings(self) -> dict[str, Any]:
        """The settings the run changes, typed as the settings module holds them."""
        days = dict.fromkeys(RETENTION_SETTINGS, self.retention_days)
        return days | {
            "RETENTION_PRUNE_INTERVAL_S": float(self.prune_interval_s),
            "TELEMETRY_PARTITION_SPAN_S": self.partition_span_s,
            "TELEMETRY_ROLLUP_INTERVAL_S": float(self.rollup_interval_s),
        }

    def migrate_settings(self) -> dict[str, Any]:
        """The settings the bench's own migrate runs with: a migration that partitions a
        table makes ranges back to the oldest device time ingest accepts (seven days by
        default), which at the soak's span would be thousands in one transaction; the
        bench's readings are fresh, so a retention's worth is enough."""
        return self.settings() | {"TELEMETRY_MAX_AGE_S": self.retention_s}

    def env(self) -> dict[str, str]:
        """The same settings as environment variables, for every process the run starts."""
        return {
            name: f"{value:.6g}" if isinstance(value, float) else str(value)
            for name, value in self.settings().items()
        }

    def command_line(self) -> str:
        return (
            f" --soak {self.seconds:g} --rate {self.rate:g} --soak-interval {self.interval_s:g}"
            f" --soak-retention {self.retention_s:g}"
        )


def _positive(option: str, value: Any) -> float:
    if value is None:
        raise PlanError(f"{option} needs a value")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanError(f"{option}: {value!r} is not a number") from None
    if not math.isfinite(number) or number <= 0:
        raise PlanError(f"{option}: {value!r} must be a number above 0")
    return number


def soak_from_options(opts: dict[str, Any]) -> SoakPlan | None:
    """The soak plan, None without ``--soak``, or PlanError naming the option at fault."""
    if opts.get("soak") is None:
        for option in ("soak_interval", "soak_retention"):
            if opts.get(option) is not None:
                raise PlanError(f"--{option.replace('_', '-')} needs --soak SECONDS")
        return None
    seconds = _positive("--soak", opts["soak"])
    rate = _positive("--rate", DEFAULT_RATE if opts.get("rate") is None else opts["rate"])
    interval = _positive(
        "--soak-interval",
        DEFAULT_INTERVAL_S if opts.get("soak_interval") is None else opts["soak_interval"],
    )
    if interval < MIN_INTERVAL_S:
        raise PlanError(f"--soak-interval: {interval:g} s is below {MIN_INTERVAL_S:g} s")
    if seconds < MIN_INTERVALS * interval:
        raise PlanError(
            f"--soak {seconds:g} is shorter than {MIN_INTERVALS} × --soak-interval "
            f"({MIN_INTERVALS * interval:g} s): the fitted window would hold too few samples"
        )
    if rate * interval < 1:
        raise PlanError(f"--rate {rate:g} offers no crossing per --soak-interval {interval:g}")
    derived = max(RETENTION_FLOOR_S, seconds / RETENTION_PERIODS)
    given = opts.get("soak_retention")
    retention = derived if given is None else _positive("--soak-retention", given)
    if retention < RETENTION_FLOOR_S:
        raise PlanError(
            f"--soak-retention: {retention:g} s is below {RETENTION_FLOOR_S:g} s (the prune "
            "would race the accounting of each crossing)"
        )
    if retention > seconds / 2:
        raise PlanError(
            f"--soak-retention {retention:g} s: fewer than two retention periods in --soak "
            f"{seconds:g} (nothing would roll while the trends are fitted)"
        )
    return SoakPlan(seconds=seconds, rate=rate, interval_s=interval, retention_s=retention)
