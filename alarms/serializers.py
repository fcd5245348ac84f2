"""API shapes of alarms: the alarm as read, its audit trail, and the comment an
acknowledgement or a clear carries."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from alarms.models import Alarm, AlarmTransition
from alarms.states import COMMENT_MAX_CHARS
from common.serializers import StrictCharField


class AlarmSerializer(serializers.ModelSerializer[Alarm]):
    """An alarm: what raised it (``source``, ``source_id``, ``type``), how bad (``severity``),
    where it is (``status``), how often and when it was raised, and who acknowledged or
    cleared it (a person's user name, or a cause such as ``device back``)."""

    farm_id = serializers.IntegerField(read_only=True)
    organization_id = serializers.IntegerField(read_only=True)

    class Meta:
        model = Alarm
        fields = (
            "id",
            "organization_id",
            "farm_id",
            "source",
            "source_id",
            "type",
            "severity",
            "status",
            "detail",
            "first_raised_at",
            "last_raised_at",
            "count",
            "acknowledged_by",
            "acknowledged_at",
            "acknowledge_comment",
            "cleared_by",
            "cleared_at",
            "clear_comment",
            "notify_count",
            "next_notify_at",
        )
        read_only_fields = fields


class AlarmTransitionSerializer(serializers.ModelSerializer[AlarmTransition]):
    class Meta:
        model = AlarmTransition
        fields = ("from_status", "to_status", "reason", "actor", "comment", "at")
        read_only_fields = fields


class AlarmActRequestSerializer(serializers.Serializer[Any]):
    """Why the alarm is acknowledged or cleared: kept with the user name in its audit trail."""

    comment = StrictCharField(max_length=COMMENT_MAX_CHARS, allow_blank=False, trim_whitespace=True)
