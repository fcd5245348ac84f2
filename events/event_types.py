"""The product's domain event types. Payloads carry ids and the facts a consumer needs to
decide, never whole rows: a handler reloads what it acts on. A field's meaning goes in its
``Annotated`` note, which the catalogue (docs/events.md) shows."""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from events.registry import event_type_declare


class DeviceStatusChangedPayload(TypedDict):
    device_id: int
    serial_number: str
    farm_id: int
    old_status: Annotated[str, "active, maintenance or retired"]
    new_status: Annotated[str, "active, maintenance or retired"]
    actor: Annotated[str, "who changed it: a user name or a process"]


DEVICE_STATUS_CHANGED = event_type_declare(
    "DeviceStatusChanged",
    schema=DeviceStatusChangedPayload,
    description="A device moved between active, maintenance and retired.",
)


class DeviceHealthPayload(TypedDict):
    device_id: int
    serial_number: str
    farm_id: int
    last_seen_at: Annotated[
        str | None, "ISO time of its last message (coming back: the message that brought it)"
    ]
    at: Annotated[str, "ISO time the change was recorded"]


DEVICE_WENT_OFFLINE = event_type_declare(
    "DeviceWentOffline",
    schema=DeviceHealthPayload,
    description="A device sent no message for its offline window (offline_after_s, by "
    "default three of its profile's expected intervals). Once per silence.",
)

DEVICE_CAME_BACK = event_type_declare(
    "DeviceCameBack",
    schema=DeviceHealthPayload,
    description="A device that was not online sent a message (its last_seen_at is that "
    "message's arrival). Once per return.",
)


class DocumentChangedPayload(TypedDict):
    document_id: Annotated[str, "the document's guid (the reminder source)"]
    farm_id: int
    document_type: Annotated[str, "licence, certificate, inspection, ..."]
    expires_on: Annotated[str | None, "ISO date in the farm's calendar; None when it never expires"]
    change: Literal["created", "updated", "deleted"]


DOCUMENT_CHANGED = event_type_declare(
    "DocumentChanged",
    schema=DocumentChangedPayload,
    description="A farm document was created, updated or deleted. Its expiry date drives "
    "date-based reminders, which follow every change.",
)
