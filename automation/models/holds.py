"""What holds an endpoint against rules: an operator's manual hold, and the cool-down of a
target whose last command failed on the device."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from automation.models.ledger import DeviceCommand
from devices.models import DeviceInstanceEndpoint


class EndpointManualHold(models.Model):
    """An operator's manual command holds its endpoint against rules until ``until``: rule
    decisions for it end ``suppressed``/``manual_override`` and send nothing. One row per
    endpoint, moved by the next manual command (a new ``command``, a new ``until``) or ended
    early by ``cancelled_at`` (``automation.services.manual``)."""

    endpoint = models.OneToOneField(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, related_name="manual_hold"
    )
    # The column keeps the name it had before the model was renamed (docs/architecture.md).
    command = models.ForeignKey(
        DeviceCommand, on_delete=models.CASCADE, related_name="+", db_column="intent_id"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    until = models.DateTimeField()
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    cancel_reason = models.CharField(max_length=400, blank=True, default="")
    version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        state = "cancelled" if self.cancelled_at else f"until {self.until:%Y-%m-%d %H:%M:%S}"
        return f"{self.endpoint} held by command #{self.command_id} ({state})"


class CommandCooldown(models.Model):
    """A target (endpoint, value) whose last command failed on the device or stayed
    uncertain: decisions asking for it again are suppressed until ``until``, so a device that
    cannot obey gets no command storm. One row per pair; ``failures`` counts the consecutive
    failures that set the length. An applied command for the pair deletes the row; a change of
    the reported value, an edit of the rule or the target endpoint, or a support retry lifts
    it (see ``automation.services.cooldown``)."""

    target_device_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, related_name="+"
    )
    value_key = models.CharField(max_length=64)  # canonical fingerprint of target_value
    target_value = models.JSONField()
    failures = models.PositiveIntegerField(default=1)
    until = models.DateTimeField()
    command = models.ForeignKey("DeviceCommand", on_delete=models.CASCADE, related_name="+")
    reason_code = models.CharField(max_length=64)
    # What the endpoint reported when the chain last failed: a different report lifts it.
    reported_value = models.JSONField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["target_device_endpoint", "value_key"], name="one_cooldown_per_target"
            )
        ]
        indexes = [models.Index(fields=["until"])]

    def __str__(self) -> str:
        value = self.target_value
        shown = str(value).lower() if isinstance(value, bool) else value
        return (
            f"{self.target_device_endpoint} → {shown} cooling until {self.until:%Y-%m-%d %H:%M:%S}"
        )
