"""Reads of alarms for the API, the admin and the notification sweep."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from alarms.models import Alarm, AlarmTransition
from alarms.states import AlarmStatus


def alarms_notify_due(*, now: datetime, batch: int) -> list[Alarm]:
    """Active alarms whose next notification is due, oldest due first: one read on the
    partial index ``alarm_notify_due`` (nothing due costs just that read)."""
    return list(
        Alarm.objects.filter(status=AlarmStatus.ACTIVE, next_notify_at__lte=now)
        .select_related("farm")
        .order_by("next_notify_at", "pk")[:batch]
    )


def alarm_transitions(alarm_id: int) -> QuerySet[AlarmTransition]:
    return AlarmTransition.objects.filter(alarm_id=alarm_id).order_by("at", "pk")
