"""Event bus fixtures: a scoped registry (test-only types vanish after each test, so the
committed catalogue never sees them), a recording transport, and handlers whose effects are
real rows (an Organization per run), so "once" is counted in the database."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypedDict

import pytest
from celery import Celery

from common.models import Organization
from events.envelope import Envelope
from events.registry import EventRegistry, EventType, registry
from events.services import DeliveryResult, EventTransport, event_deliver
from tests.common.factories import OrganizationFactory
from tests.events.transport import celery_transport, event_transport

UNREACHABLE_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1


class PingPayload(TypedDict):
    farm: str
    level: int


@pytest.fixture
def event_registry() -> Iterator[EventRegistry]:
    with registry.scope() as scoped:
        yield scoped


@pytest.fixture
def ping(event_registry: EventRegistry) -> EventType[PingPayload]:
    return event_registry.declare("test.Ping", schema=PingPayload, description="A test event.")


@pytest.fixture
def sent() -> Iterator[list[dict[str, Any]]]:
    """Every envelope the bus sends in the test, instead of the broker."""
    messages: list[dict[str, Any]] = []
    with event_transport(messages.append):
        yield messages


@pytest.fixture
def dead_broker(monkeypatch: pytest.MonkeyPatch) -> EventTransport:
    """A real Celery app whose Redis broker refuses connections: sends raise kombu's
    OperationalError. Celery lets ``CELERY_BROKER_URL`` override an app's own broker, so the
    variable is hidden for the test."""
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.delenv("CELERY_BROKER_WRITE_URL", raising=False)
    return celery_transport(Celery("dead-broker", broker=UNREACHABLE_BROKER))


@pytest.fixture
def deliver(django_capture_on_commit_callbacks: Any) -> Callable[[object], DeliveryResult]:
    """The consumer service, with its after-commit work (alerts) run as in a worker."""

    def run(message: object) -> DeliveryResult:
        with django_capture_on_commit_callbacks(execute=True):
            return event_deliver(message=message)

    return run


def effects(handler: str, key: str) -> int:
    return Organization.objects.filter(name__startswith=f"{handler}|{key}|").count()


@dataclass
class Switchable:
    """A handler whose effect is a row; ``broken`` makes it fail after writing it (a crash
    mid-handler), ``reject`` makes it refuse the event for good."""

    name: str
    broken: bool = False
    calls: int = 0
    seen: list[Envelope] = field(default_factory=list)

    def __call__(self, event: Envelope) -> None:
        self.calls += 1
        self.seen.append(event)
        OrganizationFactory(name=f"{self.name}|{event.idempotency_key}|{uuid.uuid4().hex}")
        if self.broken:
            raise RuntimeError(f"{self.name} is broken")


@pytest.fixture
def make_handler(event_registry: EventRegistry) -> Callable[..., Switchable]:
    def make(event_type: EventType[Any] | str, name: str, **kw: Any) -> Switchable:
        handler = Switchable(name)
        event_registry.handler(event_type, name=name, **kw)(handler)
        return handler

    return make


def dead_letter_lines(caplog: pytest.LogCaptureFixture, key: str = "") -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("EVENT_DEAD_LETTERED") and key in r.getMessage()
    ]
