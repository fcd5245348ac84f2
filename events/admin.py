"""Operators' admin for the event bus: dead letters (with "replay" through
``events.services.dead_letter_replay``) and the handler inbox. Envelopes carry no
organisation column, so only superusers see these rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from devices.admin import DeviceAdmin, ReadOnlyAdmin
from devices.models import DeviceStatus
from events.models import EventDeadLetter, EventInbox
from events.services import DeadLetterNotReplayable, dead_letter_replay, device_status_change

DeviceAction = Callable[[Any, HttpRequest, QuerySet[Any]], None]


def _device_status_action(status: str, title: str) -> DeviceAction:
    """Support moves a device through the status service, which publishes
    ``DeviceStatusChanged`` (added to the devices admin here, where the service lives)."""

    def action(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        actor = request.user.get_username()
        ids = list(queryset.values_list("pk", flat=True))
        done = sum(device_status_change(device_id=pk, status=status, actor=actor) for pk in ids)
        modeladmin.message_user(
            request, f"{title}: {done} changed, {len(ids) - done} already so", messages.SUCCESS
        )

    action.__name__ = f"device_status_{status}"
    action.short_description = title  # type: ignore[attr-defined]
    action.allowed_permissions = ("change",)  # type: ignore[attr-defined]
    return action


DeviceAdmin.actions = (  # type: ignore[misc]  # the devices admin class, extended once at load
    *(DeviceAdmin.actions or ()),  # type: ignore[misc]
    _device_status_action(DeviceStatus.ACTIVE, "Set active"),
    _device_status_action(DeviceStatus.MAINTENANCE, "Put in maintenance"),
    _device_status_action(DeviceStatus.RETIRED, "Retire"),
)


@admin.register(EventDeadLetter)
class EventDeadLetterAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "status",
        "event_type",
        "handler",
        "reason",
        "attempts",
        "created_at",
        "replayed_by",
    )
    list_filter = ("status", "reason", "event_type", "handler")
    search_fields = ("idempotency_key",)
    actions = ("replay",)

    @admin.action(
        description="Replay (re-publish with the same idempotency key)", permissions=["change"]
    )
    def replay(self, request: HttpRequest, queryset: QuerySet[EventDeadLetter]) -> None:
        actor = request.user.get_username()
        done = skipped = 0
        for dead in queryset:
            try:
                replayed = dead_letter_replay(dead_letter_id=dead.pk, actor=actor)
            except DeadLetterNotReplayable:
                replayed = None
            if replayed is None:
                skipped += 1
            else:
                done += 1
        level = messages.SUCCESS if not skipped else messages.WARNING
        self.message_user(request, f"replayed {done}, skipped {skipped}", level)


@admin.register(EventInbox)
class EventInboxAdmin(ReadOnlyAdmin):
    list_display = ("id", "handler", "event_type", "idempotency_key", "processed_at")
    list_filter = ("handler", "event_type")
    search_fields = ("idempotency_key",)
