"""Every beat entry expires: a sweep not started within its period is dropped, so a worker
that was down does not come back to a pile of one-second sweeps."""

from __future__ import annotations

import os

import pytest
from django.core.management import call_command
from django_celery_beat.models import PeriodicTask

from config.beat import beat_schedule
from config.celery import app as celery_app
from config.celery import configure_beat_schedule


def test_every_beat_entry_expires_within_its_period() -> None:
    configure_beat_schedule()
    for name, entry in celery_app.conf.beat_schedule.items():
        assert 0 < entry["options"]["expires"] <= entry["schedule"], name


@pytest.mark.django_db
def test_sync_writes_each_entrys_expiry_into_the_database_scheduler() -> None:
    call_command("sync_beat_schedule", stdout=open(os.devnull, "w"))  # noqa: SIM115
    PeriodicTask.objects.filter(name__in=list(beat_schedule())).update(expire_seconds=None)
    call_command("sync_beat_schedule", stdout=open(os.devnull, "w"))  # noqa: SIM115
    rows = PeriodicTask.objects.filter(name__in=list(beat_schedule()))
    assert rows.count() == len(beat_schedule())
    assert all(row.expire_seconds and row.expire_seconds >= 1 for row in rows)
