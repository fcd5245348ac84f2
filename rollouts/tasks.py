"""The rollout driver's beat task: ticks the running rollouts, each tick bounded."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from config.celery import DB_RETRY, routed_to
from config.task_names import ROLLOUTS_DRIVE
from rollouts.services.drive import rollout_tick, rollouts_due


@shared_task(name=ROLLOUTS_DRIVE, **routed_to("scheduler"), **DB_RETRY)
def rollouts_drive_task() -> int:
    """Tick each rollout due (its lease free); a rollout another driver holds is skipped, so
    two beats or a redelivered task start nothing twice. Returns the commands started."""
    now = timezone.now()
    started = 0
    for rollout_id in rollouts_due(now=now, limit=settings.ROLLOUTS.tick_batch):
        tick = rollout_tick(rollout_id, now=now)
        started += len(tick.commands) if tick else 0
    return started
