"""Reminder fixtures: a farm in Berlin with an external contact (so notifications have a
recipient), the event bus delivering each published envelope through the real consumer once
the business transaction commits, a frozen clock, and readers of the scheduler rows a source
or a subscription owns."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

import pytest
import time_machine

from devices.models import Farm
from events.services import DeliveryResult, event_deliver
from notifications.models import Notification
from reminders.models import Document, ReminderOccurrence, ReminderSetting, SourceType
from reminders.services.settings import reminder_setting_create
from reminders.services.sources import document_create
from scheduler.models import DueWork
from scheduler.services import scheduler_process_due
from tests.devices.factories import FarmFactory, FarmKit, make_farm
from tests.events.transport import event_transport
from tests.notifications.factories import ExternalContactFactory

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday


@pytest.fixture(autouse=True)
def _trace_storage(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = str(tmp_path / "media")


@pytest.fixture
def farm(db: None) -> Farm:
    farm = FarmFactory(time_zone="Europe/Berlin")
    ExternalContactFactory(farm=farm, name="Vet", email="vet@example.org")
    return farm


@pytest.fixture
def kit(farm: Farm) -> FarmKit:
    return make_farm(farm=farm)


@dataclass
class Bus:
    """Runs a block, commits it (for the test) and delivers its events through the
    consumer, as the ``events`` worker would; remembers every delivery."""

    capture: Callable[..., AbstractContextManager[Any]]
    delivered: list[DeliveryResult]
    messages: list[dict[str, Any]]

    def _send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.delivered.append(event_deliver(message=message))

    @contextmanager
    def commit(self, at: datetime = NOW) -> Iterator[None]:
        with (
            time_machine.travel(at, tick=False),
            event_transport(self._send),
            self.capture(execute=True),
        ):
            yield


@pytest.fixture
def bus(django_capture_on_commit_callbacks: Any) -> Bus:
    return Bus(django_capture_on_commit_callbacks, [], [])


def date_setting(farm: Farm, **overrides: Any) -> ReminderSetting:
    fields: dict[str, Any] = {
        "name": "Expiry",
        "farm_id": farm.pk,
        "source_type": SourceType.DOCUMENT,
        "trigger_type": "date_based",
        "offsets_days": [30, 7],
        "send_time": time(9, 0),
        "recipients_policy": "external_contacts",
        "template_name": "document_expiry",
        "channels": ["email"],
        "now": NOW,
    }
    fields.update(overrides)
    return reminder_setting_create(**fields)


def document(farm: Farm, expires_on: date, **overrides: Any) -> Document:
    fields: dict[str, Any] = {
        "farm_id": farm.pk,
        "subject_kind": "farm",
        "document_type": "insurance",
        "title": "Farm liability",
        "expires_on": expires_on,
        "now": NOW,
    }
    fields.update(overrides)
    return document_create(**fields)


@dataclass(frozen=True)
class Row:
    tail: str  # the key after the source guid, e.g. "expiry:2026-06-30:30"
    status: str
    scheduled_on: datetime
    reason: str


def rows_of(source_guid: Any) -> list[Row]:
    """Every scheduler row the source ever wanted, in key order."""
    keys = ReminderOccurrence.objects.filter(source_guid=source_guid).values("scheduler_key")
    found = DueWork.objects.filter(scheduler_key__in=keys).order_by("scheduler_key")
    return [
        Row(
            r.scheduler_key.split(f":{source_guid}:", 1)[1],
            r.status,
            r.scheduled_on,
            r.failure_reason_code,
        )
        for r in found
    ]


def statuses(source_guid: Any) -> dict[str, str]:
    return {r.tail: r.status for r in rows_of(source_guid)}


def run_due(at: datetime) -> dict[str, int]:
    """The scheduler's worker loop at ``at`` (handlers are the app's, registered at ready)."""
    return dict(scheduler_process_due(clock=lambda: at))


def notifications_for(key: str) -> list[Notification]:
    return list(Notification.objects.filter(source_key=key).order_by("pk"))
