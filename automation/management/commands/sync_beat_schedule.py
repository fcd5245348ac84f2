"""Write the code-declared beat schedule into django-celery-beat's tables (idempotent)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from config.beat import beat_schedule


class Command(BaseCommand):
    help = "Sync config.beat.beat_schedule() into django-celery-beat (keeps operators' pauses)."

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            for name, entry in beat_schedule().items():
                interval, _ = IntervalSchedule.objects.get_or_create(
                    every=entry.every_whole_s, period=IntervalSchedule.SECONDS
                )
                expires = entry.expires_whole_s
                task, created = PeriodicTask.objects.get_or_create(
                    name=name,
                    defaults={"task": entry.task, "interval": interval, "expire_seconds": expires},
                )
                if not created and (
                    task.task != entry.task
                    or task.interval_id != interval.pk
                    or task.expire_seconds != expires
                ):
                    task.task, task.interval, task.expire_seconds = entry.task, interval, expires
                    task.save(update_fields=["task", "interval", "expire_seconds"])
                self.stdout.write(f"{'created' if created else 'kept   '} {name} -> {entry.task}")
            stale = PeriodicTask.objects.exclude(name__in=list(beat_schedule())).exclude(
                name__startswith="celery."
            )
            for task in stale:
                self.stdout.write(f"removed {task.name}")
            stale.delete()
