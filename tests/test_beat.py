"""Every beat entry expires: a sweep not started within its period is dropped, so a worker
that was down does not come back to a pile of one-second sweeps."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from django.core.management import call_command
from django_celery_beat.models import PeriodicTask

from config.beat import beat_schedule
from config.celery import app as celery_app
from config.celery import configure_beat_schedule


def test_every_beat_entry_expires_within_its_period() -> None:
    configure_beat_schedule()
    for name, entry in celery_app.conf.beat_schedule.items():
        assert 0 < entry["options"]["expire_seconds"] <= entry["schedule"], name


@pytest.mark.django_db
def test_sync_writes_each_entrys_expiry_into_the_database_scheduler() -> None:
    call_command("sync_beat_schedule", stdout=open(os.devnull, "w"))  # noqa: SIM115
    PeriodicTask.objects.filter(name__in=list(beat_schedule())).update(expire_seconds=None)
    call_command("sync_beat_schedule", stdout=open(os.devnull, "w"))  # noqa: SIM115
    rows = PeriodicTask.objects.filter(name__in=list(beat_schedule()))
    assert rows.count() == len(beat_schedule())
    assert all(row.expire_seconds and row.expire_seconds >= 1 for row in rows)


@pytest.mark.django_db
def test_starting_beat_keeps_the_intervals_and_expiries_the_sync_wrote(settings) -> None:
    """The database scheduler writes ``app.conf.beat_schedule`` into its tables at start: a
    sub-second interval used to land as ``every=0`` (a send storm) and every expiry as
    none (a worker back from an outage got the pile of sweeps the expiry is there to drop)."""
    from django_celery_beat.schedulers import DatabaseScheduler

    settings.ROLLOUTS = replace(settings.ROLLOUTS, tick_interval_s=0.25)
    call_command("sync_beat_schedule", stdout=open(os.devnull, "w"))  # noqa: SIM115
    names = list(beat_schedule())

    def written() -> dict[str, tuple[int, int | None]]:
        rows = PeriodicTask.objects.filter(name__in=names).select_related("interval")
        return {row.name: (row.interval.every, row.expire_seconds) for row in rows}

    synced = written()
    assert synced["rollouts-drive"] == (1, 1)
    configure_beat_schedule()
    # What DatabaseScheduler.setup_schedule does with the mapping at start (without the
    # scheduler's connection handling, which a test transaction cannot take).
    for name, fields in celery_app.conf.beat_schedule.items():
        DatabaseScheduler.Entry.from_entry(name, app=celery_app, **fields)
    assert written() == synced
