"""What alarms keep (``common.retention``): a cleared alarm, by its clear time, with its audit
trail; an open one is never pruned."""

from __future__ import annotations

from django.db.models import Q

from alarms.states import AlarmStatus
from common.retention import Retention, retention_register


def alarms_retention_register() -> None:
    retention_register(
        Retention(
            "alarms.Alarm",
            "RETENTION_ALARMS_DAYS",
            "cleared_at",
            prunable=Q(status=AlarmStatus.CLEARED),
            children=("alarms.AlarmTransition",),
        )
    )
