"""The beat schedule, declared once in code. `manage.py sync_beat_schedule` writes it into
django-celery-beat's tables so operators can pause an entry in the admin; sweeps re-derive
pending work from SQL, so a lost Celery message only delays it."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class BeatEntry:
    task: str
    every_s: float


def beat_schedule() -> dict[str, BeatEntry]:
    """Read at call time, so intervals follow settings (tests run sweeps much faster)."""
    return {
        "endpoint-events-sweep-pending": BeatEntry(
            "automation.endpoint_events_sweep", float(settings.BEAT_SWEEP_INTERVAL_S)
        ),
        "command-intents-sweep": BeatEntry(
            "automation.command_intents_sweep", float(settings.COMMAND_SWEEP_INTERVAL_S)
        ),
    }
