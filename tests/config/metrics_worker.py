"""A separate worker process for the metrics test: load Django (which installs the counting
hooks), then fire the same signals a Celery worker and the reconcile service fire."""

from __future__ import annotations

import sys
from datetime import timedelta


def main(count: int) -> None:
    import django

    django.setup()
    from celery.signals import task_postrun
    from django.utils import timezone

    from automation.models import CommandTransition, DeviceCommand
    from config.celery import app

    app.loader.import_default_modules()
    task = app.tasks["automation.telemetry_ingest"]
    dispatched = timezone.now()
    intent = DeviceCommand(dispatched_at=dispatched)
    for _ in range(count):
        task_postrun.send(sender=task, task=task, state="SUCCESS", retval=5)
        transition = CommandTransition(
            command=intent,
            from_status="dispatched",
            to_status="acknowledged",
            reason_code="acknowledged",
            at=dispatched + timedelta(seconds=0.3),
        )
        from django.db.models.signals import post_save

        post_save.send(sender=CommandTransition, instance=transition, created=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
