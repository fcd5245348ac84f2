"""What a distributed run does, parsed from the command line: the processes to start (as
``deploy/Procfile.dev`` starts them unless told otherwise), the offered load steps and the
sizes of the ingest and scheduler phases. Pure: no database, no processes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devtools.bench.distributed.soak_plan import SoakPlan

PHASES = ("command", "ingest", "scheduler", "storage")
POOLS = ("prefork", "threads", "solo", "gevent", "eventlet")


@dataclass(frozen=True)
class WorkerSpec:
    """One stage worker's pool: ``celery worker --pool <pool> --concurrency <concurrency>``."""

    concurrency: int
    pool: str = "prefork"

    def describe(self) -> str:
        return f"{self.concurrency}:{self.pool}"


# deploy/Procfile.dev, stage by stage; a run changes only the stages it names.
PROCFILE_WORKERS: dict[str, WorkerSpec] = {
    "evaluate": WorkerSpec(2),
    "dispatch": WorkerSpec(8, "threads"),
    "reconcile": WorkerSpec(2),
    "scheduler": WorkerSpec(2),
    "events": WorkerSpec(2),
    "notify": WorkerSpec(8, "threads"),
}
STAGES = tuple(PROCFILE_WORKERS)


class PlanError(ValueError):
    """A malformed option; the message names it."""


def workers_parse(spec: str) -> dict[str, WorkerSpec]:
    """``ingest=2,dispatch=8:threads`` over the Procfile's defaults. A stage given without a
    pool keeps its default pool."""
    workers = dict(PROCFILE_WORKERS)
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        stage, sep, value = part.partition("=")
        stage = stage.strip()
        if not sep or stage not in workers:
            raise PlanError(f"--concurrency: {part!r} is not <stage>=<n>[:<pool>] with a stage "
                            f"of {','.join(STAGES)}")  # fmt: skip
        count, _, pool = value.partition(":")
        try:
            concurrency = int(count)
        except ValueError:
            raise PlanError(f"--concurrency: {count!r} of {stage} is not a number") from None
        pool = pool.strip() or workers[stage].pool
        if concurrency < 1 or pool not in POOLS:
            raise PlanError(f"--concurrency: {part!r} needs n >= 1 and a pool of {POOLS}")
        workers[stage] = WorkerSpec(concurrency, pool)
    return workers


def numbers_parse(option: str, spec: str, *, integer: bool = False) -> tuple[float, ...]:
    """A comma-separated list of positive numbers (``10,30,100,300``)."""
    try:
        values = tuple(
            (int(v) if integer else float(v)) for v in (p.strip() for p in spec.split(",")) if v
        )
    except ValueError:
        raise PlanError(f"{option}: {spec!r} is not a comma-separated list of numbers") from None
    if not values or min(values) <= 0:
        raise PlanError(f"{option}: {spec!r} needs at least one value, each above 0")
    return values


def phases_parse(spec: str) -> frozenset[str]:
    phases = frozenset(p.strip() for p in spec.split(",") if p.strip())
    if not phases or phases - set(PHASES):
        raise PlanError(f"--only takes a subset of {','.join(PHASES)}")
    return phases


@dataclass(frozen=True)
class DistributedPlan:
    farms: int = 300
    bridges: int = 1
    workers: dict[str, WorkerSpec] | None = None  # None: PROCFILE_WORKERS
    steps: tuple[float, ...] = (10, 30, 100, 300)  # crossings offered per second
    step_seconds: float = 20.0
    settle_s: float = 90.0  # after a step, the longest wait for its commands to end
    phases: frozenset[str] = frozenset(PHASES)
    messages: int = 20_000
    ingest_devices: int = 1000
    batch: int = 500  # bare INSERT rows per statement batch, as the bridge batches
    scheduler_rows: int = 5000
    scheduler_workers: tuple[int, ...] = (1, 2, 4)
    # The storage phase's fixed fleet: what a stored value costs does not grow with the run.
    storage_devices: int = 50
    storage_messages: int = 5000
    out_dir: Path = Path("var/bench-distributed")
    json_path: Path | None = None
    profile: bool = False
    profile_format: str = "svg"  # or speedscope
    soak: SoakPlan | None = None  # a long run at one rate instead of the phases

    @property
    def stage_workers(self) -> dict[str, WorkerSpec]:
        return self.workers if self.workers is not None else dict(PROCFILE_WORKERS)

    def command_line(self) -> str:
        """The command that repeats this run with every size spelled out."""
        workers = ",".join(f"{s}={w.describe()}" for s, w in self.stage_workers.items())
        if self.soak is not None:
            return (
                f"manage.py bench --distributed --farms {self.farms} --bridges {self.bridges}"
                f" --concurrency {workers}{self.soak.command_line()}"
            )
        return (
            f"manage.py bench --distributed --farms {self.farms} --bridges {self.bridges}"
            f" --concurrency {workers} --steps {','.join(f'{s:g}' for s in self.steps)}"
            f" --step-seconds {self.step_seconds:g} --messages {self.messages}"
            f" --devices {self.ingest_devices} --rows {self.scheduler_rows}"
            f" --workers {','.join(map(str, self.scheduler_workers))}"
            f" --only {','.join(p for p in PHASES if p in self.phases)}"
            + (" --profile" if self.profile else "")
        )
