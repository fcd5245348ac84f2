"""The rollout driver's beat task: ticks the running rollouts, each tick bounded."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from config.celery import DB_RETRY, routed_to
from config.task_names import ROLLOUTS_DRIVE
from rollouts.services.drive import rollouts_drive


@shared_task(name=ROLLOUTS_DRIVE, **routed_to("scheduler"), **DB_RETRY)
def rollouts_drive_task() -> int:
    """Tick the rollouts due; the commands started."""
    return rollouts_drive(now=timezone.now())
