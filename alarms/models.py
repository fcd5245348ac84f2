"""Alarm tables: the alarm (one open per source, source id and type), its audit trail, and
each farm's alarm policy (defaults when a farm has none)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from alarms.states import (
    ACTOR_MAX_CHARS,
    COMMENT_MAX_CHARS,
    DEFAULT_RAISE_ON,
    DEFAULT_RECIPIENTS,
    DEFAULT_REPEAT_EVERY_S,
    DETAIL_MAX_CHARS,
    RECIPIENT_POLICY_NAMES,
    AlarmReason,
    AlarmSeverity,
    AlarmSource,
    AlarmStatus,
    AlarmType,
)
from common.models import Organization
from devices.models import Farm

__all__ = [
    "Alarm",
    "AlarmPolicy",
    "AlarmReason",
    "AlarmSeverity",
    "AlarmSource",
    "AlarmStatus",
    "AlarmTransition",
    "AlarmType",
]


class Alarm(models.Model):
    """A condition a person must see. (source, source_id, type) is unique among open alarms
    (not cleared): a repeated raise finds the open one and bumps its count, two concurrent
    raisers end with one alarm. Status moves are compare-and-sets on (status, version)."""

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    farm = models.ForeignKey(Farm, on_delete=models.PROTECT, related_name="alarms")
    source = models.CharField(max_length=16, choices=AlarmSource.choices)
    source_id = models.BigIntegerField()
    type = models.CharField(max_length=32, choices=AlarmType.choices)
    severity = models.CharField(max_length=16, choices=AlarmSeverity.choices)
    status = models.CharField(
        max_length=16, choices=AlarmStatus.choices, default=AlarmStatus.ACTIVE
    )
    detail = models.CharField(max_length=DETAIL_MAX_CHARS, blank=True, default="")
    first_raised_at = models.DateTimeField()
    last_raised_at = models.DateTimeField()
    count = models.PositiveIntegerField(default=1)
    acknowledged_by = models.CharField(max_length=ACTOR_MAX_CHARS, blank=True, default="")
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledge_comment = models.CharField(max_length=COMMENT_MAX_CHARS, blank=True, default="")
    # A person (their user name) or a cause ("device back").
    cleared_by = models.CharField(max_length=ACTOR_MAX_CHARS, blank=True, default="")
    cleared_at = models.DateTimeField(null=True, blank=True)
    clear_comment = models.CharField(max_length=COMMENT_MAX_CHARS, blank=True, default="")
    # Notifications sent so far (repeat n has source key alarm:{id}:{n}) and when the next
    # is due; None once acknowledged or cleared.
    notify_count = models.PositiveIntegerField(default=0)
    next_notify_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "source_id", "type"],
                condition=~Q(status=AlarmStatus.CLEARED),
                name="alarm_open_once",
            ),
        ]
        indexes = [
            # The notify sweep: due active alarms, nothing else.
            models.Index(
                fields=["next_notify_at"],
                condition=Q(status=AlarmStatus.ACTIVE),
                name="alarm_notify_due",
            ),
            # Retention: cleared alarms by their clear time.
            models.Index(
                fields=["cleared_at"],
                condition=Q(status=AlarmStatus.CLEARED),
                name="alarm_cleared_at",
            ),
            models.Index(fields=["farm", "status", "-id"], name="alarm_farm_status"),
        ]

    def __str__(self) -> str:
        return f"alarm #{self.pk} {self.type} {self.source}:{self.source_id} ({self.status})"


class AlarmTransition(models.Model):
    """The alarm's audit trail: every status move with who (a person or a cause) and why."""

    alarm = models.ForeignKey(Alarm, on_delete=models.CASCADE, related_name="transitions")
    from_status = models.CharField(max_length=16, blank=True)
    to_status = models.CharField(max_length=16)
    reason = models.CharField(max_length=32, choices=AlarmReason.choices)
    actor = models.CharField(max_length=ACTOR_MAX_CHARS)
    comment = models.CharField(max_length=COMMENT_MAX_CHARS, blank=True, default="")
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["alarm", "at"], name="alarm_transition_at")]

    def __str__(self) -> str:
        return f"alarm #{self.alarm_id} {self.from_status or '∅'} → {self.to_status}"


def _default_raise_on() -> list[str]:
    return list(DEFAULT_RAISE_ON)


def _default_recipients() -> dict[str, str]:
    return {str(k): v for k, v in DEFAULT_RECIPIENTS.items()}


class AlarmPolicy(models.Model):
    """A farm's alarm settings; a farm without a row gets the defaults (``alarm_policy_get``):
    which command statuses raise an alarm, how often an unacknowledged alarm is repeated, and
    which recipient policy each severity notifies."""

    farm = models.OneToOneField(Farm, on_delete=models.CASCADE, related_name="alarm_policy")
    # Command statuses that raise command_<status>: a subset of failed, expired, uncertain.
    command_statuses = models.JSONField(default=_default_raise_on)
    repeat_every_s = models.PositiveIntegerField(default=DEFAULT_REPEAT_EVERY_S)
    # severity -> recipient policy name (notifications.services.recipients); "" tells no one.
    recipients = models.JSONField(default=_default_recipients)

    class Meta:
        verbose_name_plural = "alarm policies"
        constraints = [
            models.CheckConstraint(
                condition=Q(repeat_every_s__gt=0), name="alarm_policy_repeat_positive"
            )
        ]

    def __str__(self) -> str:
        return f"farm:{self.farm_id} alarm policy"

    def clean(self) -> None:
        """The admin's form check: known command statuses, severities and policy names."""
        errors: dict[str, str] = {}
        statuses = self.command_statuses
        if not isinstance(statuses, list) or not set(statuses) <= set(DEFAULT_RAISE_ON):
            errors["command_statuses"] = f"a list of some of {', '.join(DEFAULT_RAISE_ON)}"
        recipients = self.recipients
        if not isinstance(recipients, dict) or not all(
            key in AlarmSeverity.values and value in RECIPIENT_POLICY_NAMES
            for key, value in recipients.items()
        ):
            names = ", ".join(repr(n) for n in RECIPIENT_POLICY_NAMES)
            errors["recipients"] = f'severity -> one of {names} ("": nobody)'
        if errors:
            raise ValidationError(errors)
