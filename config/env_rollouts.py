"""Fleet rollouts' settings from the environment (docs/rollouts.md), validated at start like
every other setting: ``settings.ROLLOUTS``."""

from __future__ import annotations

from dataclasses import dataclass

from config.env import env_float, env_int


@dataclass(frozen=True)
class RolloutSettings:
    canary_size: int  # the canary a rollout starts with unless it names its own size
    tick_interval_s: float  # how often beat ticks the driver
    tick_batch: int  # rollouts one tick takes at most
    lease_s: float  # a driver's claim on one rollout: a killed worker's is free after this
    # The rate's budget never holds more than this many seconds' worth of targets.
    burst_s: float
    start_grace_s: float  # a start time this far in the past is still accepted (starts now)
    pick_up_batch: int  # new endpoints a continuous rollout takes in per tick


def rollouts_from_env() -> RolloutSettings:
    return RolloutSettings(
        canary_size=env_int("ROLLOUT_CANARY_SIZE", 5, minimum=1),
        tick_interval_s=env_float("ROLLOUT_TICK_INTERVAL_S", 5.0, minimum=0.1),
        tick_batch=env_int("ROLLOUT_TICK_BATCH", 20, minimum=1),
        lease_s=env_float("ROLLOUT_LEASE_S", 30.0, minimum=1.0),
        burst_s=env_float("ROLLOUT_BURST_S", 10.0, minimum=1.0),
        start_grace_s=env_float("ROLLOUT_START_GRACE_S", 300.0, minimum=0.0),
        pick_up_batch=env_int("ROLLOUT_PICK_UP_BATCH", 500, minimum=1),
    )
