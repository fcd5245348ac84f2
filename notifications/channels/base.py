"""The one channel interface and its registry: delivery looks a channel up by name, so adding
a channel is a class and a ``channel_register`` call, never a new branch in a switch."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from notifications.states import AttemptOutcome, NotificationReason


@dataclass(frozen=True)
class Attachment:
    """A file sent with a notification (the report CSV); email attaches it."""

    filename: str
    content_type: str  # e.g. "text/csv"
    content: str


@dataclass(frozen=True)
class Recipient:
    """Someone resolved at hand-off time: a farm member (``user:<id>``) or an external contact
    (``contact:<id>``), with the addresses each channel needs."""

    key: str
    name: str = ""
    user_id: int | None = None
    contact_id: int | None = None
    email: str = ""
    webhook_url: str = ""
    has_webhook_secret: bool = False


@dataclass(frozen=True)
class Delivery:
    """What a channel sends: one notification, already rendered."""

    notification_id: int
    source_key: str
    recipient_key: str
    channel: str
    address: str
    user_id: int | None
    contact_id: int | None
    farm_id: int | None
    template_name: str
    subject: str
    body: str
    body_html: str
    context: dict[str, Any]  # plain JSON (datetimes as ISO strings)
    attempt: int
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class SendResult:
    """A channel's answer. ``transient`` results are retried on the backoff ladder (no sooner
    than ``retry_after_s`` when the receiver asked for it); permanent ones fail at once."""

    outcome: AttemptOutcome
    status_code: int | None = None
    error: str = ""
    retry_after_s: float | None = None
    reason: NotificationReason | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def sent(cls, status_code: int | None = None) -> SendResult:
        return cls(AttemptOutcome.SENT, status_code)

    @classmethod
    def transient(
        cls, error: str, *, status_code: int | None = None, retry_after_s: float | None = None
    ) -> SendResult:
        return cls(AttemptOutcome.TRANSIENT_ERROR, status_code, error, retry_after_s)

    @classmethod
    def permanent(
        cls,
        error: str,
        *,
        status_code: int | None = None,
        reason: NotificationReason | None = None,
    ) -> SendResult:
        return cls(AttemptOutcome.PERMANENT_ERROR, status_code, error, reason=reason)


class NotificationChannel(ABC):
    """How a notification reaches a recipient. ``send`` runs outside any transaction and must
    not raise for delivery errors: it says whether retrying could help."""

    name: ClassVar[str]
    # Whether rows of this channel keep the attachments (only email sends them).
    carries_attachments: ClassVar[bool] = False

    @abstractmethod
    def unreachable(self, recipient: Recipient) -> tuple[NotificationReason, str] | None:
        """Why ``recipient`` cannot get this channel (the row is created ``skipped``), or
        None when they can."""

    def address(self, recipient: Recipient) -> str:
        """The address stored on the row at hand-off time (so config changes later do not
        redirect a pending message)."""
        return ""

    @abstractmethod
    def send(self, delivery: Delivery) -> SendResult:
        """Deliver once; idempotent where the channel allows (inbox rows, Message-ID)."""


_channels: dict[str, NotificationChannel] = {}
_lock = threading.Lock()


def channel_register(channel: NotificationChannel, *, replace: bool = False) -> None:
    with _lock:
        if channel.name in _channels and not replace:
            existing = _channels[channel.name]
            if type(existing).__qualname__ == type(channel).__qualname__:
                return  # the same module imported twice
            raise ValueError(f"a notification channel {channel.name!r} is already registered")
        _channels[channel.name] = channel


def channel_get(name: str) -> NotificationChannel:
    """The channel registered as ``name``; ValueError naming it when there is none."""
    try:
        return _channels[name]
    except KeyError:
        known = ", ".join(sorted(_channels))
        raise ValueError(f"unknown notification channel {name!r} (known: {known})") from None


def channel_names() -> list[str]:
    return sorted(_channels)


@contextmanager
def channel_override(channel: NotificationChannel) -> Iterator[NotificationChannel]:
    """Swap a channel for the duration of a block (tests)."""
    with _lock:
        previous = _channels.get(channel.name)
        _channels[channel.name] = channel
    try:
        yield channel
    finally:
        with _lock:
            if previous is None:
                _channels.pop(channel.name, None)
            else:
                _channels[channel.name] = previous
