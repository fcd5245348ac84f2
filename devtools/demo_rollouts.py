"""The demo's rollout lane, run after the command path settled: one value set on the relays
in waves, driven by the beat's ``rollouts.drive`` like every other periodic task, once to
completion and once with one relay answering ``hardware_fault`` in the canary, where a
"failed" abort criterion trips on that failure alone. Its tables and invariants join the
demo's summary."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from automation.models import DeviceCommand
from automation.states import CommandOrigin, CommandStatus, ReasonCode
from config.tables import format_table
from devices.mqtt.contract import ResultCode
from devtools.demo import demo_endpoint
from devtools.demo_lanes import LaneSummary
from devtools.simulator import DeviceSimulator, FaultMode
from rollouts.models import Rollout, RolloutTarget
from rollouts.services.counts import TARGET_STATES, Counts, rollout_count
from rollouts.services.lifecycle import rollout_act
from rollouts.services.plan import RolloutSpec, rollout_create
from rollouts.states import ROLLOUT_ENDED, RolloutStatus, TargetStep

CANARY = 2
# The fault relay fails, the canary's other relay ends applied: 1 failed of 2 finished.
ABORT_CRITERION: dict[str, Any] = {"outcome": "failed", "min_finished": CANARY, "threshold_pct": 50}
RATE_PER_MINUTE = 1200.0  # a few targets a tick: the demo waits on devices, not on the rate
NAME_PREFIX = "Demo rollout"
# Configured faults after which a relay still ends ``applied``: the abort run's relays.
RECOVERING = {FaultMode.NONE, FaultMode.DUPLICATE_ACK, FaultMode.DELAY_ACK}

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RolloutRun:
    rollout: Rollout  # as it ended
    counts: Counts
    skips: Counter[str]  # skipped targets by reason


def rollouts_demo(
    sim: DeviceSimulator,
    relays: Sequence[tuple[str, dict[str, Any]]],
    *,
    held: str,
    timeout_s: float,
    progress: Progress,
) -> tuple[RolloutRun, RolloutRun | None, str]:
    """Both runs over the simulated ``relays`` (serial, configured fault); ``held`` is the
    relay an operator holds (the completed run skips it). Returns the completed run, the
    aborted one (None when too few relays recover from their fault to make a canary of two
    with one clean relay) and the fault relay's serial."""
    operator, _ = get_user_model()._default_manager.get_or_create(username="demo-operator")
    _earlier_rollouts_cancel(operator)
    serials = _by_endpoint([serial for serial, _ in relays])
    completed = _run(
        operator, serials, value=False, name="vents closed", progress=progress, timeout=timeout_s
    )
    faults = dict(relays)
    clean = [s for s in serials if s != held and _recovers(faults[s])]
    if len(clean) < CANARY:
        return completed, None, ""
    fault = clean[0]  # the first target by endpoint: the canary's first
    sim.set_fault(fault, FaultMode.REJECT, reject_code=ResultCode.HARDWARE_FAULT)
    aborted = _run(
        operator,
        clean,
        value=True,
        name="vents open, one relay faulty",
        progress=progress,
        timeout=timeout_s,
        abort_criteria=[ABORT_CRITERION],
    )
    return completed, aborted, fault


def _recovers(fault: dict[str, Any]) -> bool:
    return fault.get("fault", FaultMode.NONE) in RECOVERING or fault.get("fault_times") is not None


def _by_endpoint(serials: list[str]) -> list[str]:
    """Relays in their io1 endpoint's order: the order a wave takes its targets in."""
    return sorted(serials, key=lambda serial: demo_endpoint(serial, "io1").pk)


def _earlier_rollouts_cancel(operator: Any) -> None:
    """A demo rollout an interrupted run left live would hold its relays: no new rollout could
    target them."""
    live = Rollout.objects.filter(name__startswith=NAME_PREFIX).exclude(status__in=ROLLOUT_ENDED)
    for pk in live.values_list("pk", flat=True):
        rollout_act(rollout_id=pk, action="cancel", actor=operator, reason="demo: a new run")


def _run(
    operator: Any,
    serials: list[str],
    *,
    value: bool,
    name: str,
    progress: Progress,
    timeout: float,
    abort_criteria: list[dict[str, Any]] | None = None,
) -> RolloutRun:
    """Create the rollout, then wait (with a deadline) until beat's driver ended it and none
    of its commands is still live."""
    first = demo_endpoint(serials[0], "io1")
    farm = first.device.farm
    spec = RolloutSpec(
        name=f"{NAME_PREFIX}: {name}",
        farm_ids=[farm.pk],
        profile_id=first.device.profile_id,
        endpoint_key="io1",
        value=value,
        reason=f"demo: {name}",
        device_ids=[demo_endpoint(s, "io1").device_id for s in serials],
        canary_size=CANARY,
        base_rate_per_minute=RATE_PER_MINUTE,
        max_rate_per_minute=RATE_PER_MINUTE,
        abort_criteria=abort_criteria or [],
    )
    rollout = rollout_create(organization=farm.organization, actor=operator, spec=spec)
    deadline = time.monotonic() + timeout
    while True:
        rollout.refresh_from_db()
        counts = rollout_count(rollout.pk)
        shown = ", ".join(f"{s} {n}" for s, n in counts.as_dict().items() if n)
        progress(f"rollout #{rollout.pk} ({name}) {rollout.status}: {shown}")
        if rollout.status in ROLLOUT_ENDED and not counts.live:
            break
        if time.monotonic() > deadline:
            raise CommandError(f"rollout #{rollout.pk} did not end within {timeout:.0f}s")
        time.sleep(0.25)
    skips = Counter(
        RolloutTarget.objects.filter(rollout=rollout, step=TargetStep.SKIPPED).values_list(
            "reason", flat=True
        )
    )
    return RolloutRun(rollout, counts, skips)


def rollouts_summary(completed: RolloutRun, aborted: RolloutRun | None, fault: str) -> LaneSummary:
    """The runs' counters per target state side by side, why each ended, and invariants."""
    runs = [completed, *([aborted] if aborted else [])]
    headers = ["state", *(f"#{r.rollout.pk} {r.rollout.status}" for r in runs)]
    rows = [(state, *(r.counts[state] for r in runs)) for state in TARGET_STATES]
    lines = [
        f"#{r.rollout.pk} {r.rollout.name}: {r.counts.total} targets in {r.rollout.waves} "
        f"wave(s); skipped: {_reasons(r.skips)}"
        for r in runs
    ]
    if aborted is not None:
        lines.append(_tripped_line(aborted, fault))
    tables = [
        (
            "Rollouts over the relays' io1 (each target one command of origin rollout; "
            f"canary {CANARY}, counters per target state)",
            format_table(headers, rows) + "\n" + "\n".join(lines),
        )
    ]
    checks = [
        ("the rollout completed with every target final", _completed_clean(completed)),
        (
            "the abort criterion tripped on the canary's hardware fault alone",
            aborted is not None and _aborted_on_fault(aborted, fault),
        ),
    ]
    return LaneSummary(tables, checks)


def _reasons(skips: Counter[str]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(skips.items())) or "none"


def _tripped_line(run: RolloutRun, fault: str) -> str:
    tripped = run.rollout.tripped
    if not isinstance(tripped, dict):
        return f"#{run.rollout.pk}: no criterion tripped"
    c = tripped["criterion"]
    return (
        f"#{run.rollout.pk} aborted by criterion {c['outcome']} ≥ {c['threshold_pct']}% of "
        f"≥ {c['min_finished']} finished: {tripped['count']} of {tripped['finished']} "
        f"finished ({tripped['pct']}%); {fault} answered {ResultCode.HARDWARE_FAULT}"
    )


def _commands(rollout: Rollout) -> list[DeviceCommand]:
    return list(DeviceCommand.objects.filter(rollout_target__rollout=rollout))


def _completed_clean(run: RolloutRun) -> bool:
    commands = _commands(run.rollout)
    return (
        run.rollout.status == RolloutStatus.COMPLETED
        and run.counts[TargetStep.PENDING] == 0
        and run.counts.live == 0
        and bool(commands)
        and all(c.origin == CommandOrigin.ROLLOUT for c in commands)
        and run.counts.finished + run.counts[TargetStep.SKIPPED] == run.counts.total
    )


def _aborted_on_fault(run: RolloutRun, fault: str) -> bool:
    """Aborted by the one criterion, with the canary as the only wave sent: the fault relay's
    command failed with ``hardware_fault``, every other sent one applied."""
    tripped = run.rollout.tripped
    commands = _commands(run.rollout)
    failed = [c for c in commands if c.status == CommandStatus.FAILED]
    return (
        run.rollout.status == RolloutStatus.ABORTED
        and isinstance(tripped, dict)
        and tripped["criterion"] == ABORT_CRITERION
        and tripped["count"] == 1
        and len(commands) == CANARY
        and [(c.target_serial_number, c.status_reason) for c in failed]
        == [(fault, ReasonCode.HARDWARE_FAULT)]
        and run.counts[CommandStatus.APPLIED] == CANARY - 1
        and run.counts[TargetStep.PENDING] == 0
    )
