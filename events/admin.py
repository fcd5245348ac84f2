"""Operators' admin for the event bus: dead letters (with "replay" through
``events.services.dead_letter_replay``) and the handler inbox. Envelopes carry no
organisation column, so only superusers see these rows."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from common.admin import ReadOnlyAdmin
from events.models import EventDeadLetter, EventInbox
from events.services import DeadLetterNotReplayable, dead_letter_replay


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
