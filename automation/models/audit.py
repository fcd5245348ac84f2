"""The audit trail of commands: every status change, and the raw evidence devices sent."""

from __future__ import annotations

from django.db import models

from automation.models.ledger import DeviceCommand
from devices.models import Device


class CommandTransition(models.Model):
    """Audit row written in the same transaction as every status change of a command."""

    # The column keeps the name it had before the model was renamed (docs/architecture.md).
    command = models.ForeignKey(
        DeviceCommand, on_delete=models.CASCADE, related_name="transitions", db_column="intent_id"
    )
    from_status = models.CharField(max_length=20)
    to_status = models.CharField(max_length=20)
    reason_code = models.CharField(max_length=64)
    detail = models.CharField(max_length=500, blank=True, default="")
    attempt = models.PositiveIntegerField(default=0)
    at = models.DateTimeField()

    def __str__(self) -> str:
        moved = f"{self.from_status} → {self.to_status}"
        return (
            f"command #{self.command_id} {moved} ({self.reason_code}) @ {self.at:%Y-%m-%d %H:%M:%S}"
        )


class ReceiptType(models.TextChoices):
    RPC_ACK = "rpc_ack"
    RPC_RESULT = "rpc_result"
    STATE_REPORT = "state_report"
    TIMEOUT_MARK = "timeout_mark"
    RETRY_MARK = "retry_mark"


class DeviceCommandReceipt(models.Model):
    """Raw evidence from (or about) a device for a command, kept for postmortems."""

    command = models.ForeignKey(
        DeviceCommand,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="receipts",
        db_column="intent_id",  # its name before the model was renamed
    )
    device = models.ForeignKey(Device, on_delete=models.SET_NULL, null=True, blank=True)
    serial_number = models.CharField(max_length=64)
    receipt_type = models.CharField(max_length=16, choices=ReceiptType.choices)
    payload = models.JSONField()
    correlation_key = models.CharField(max_length=64, blank=True, default="")
    # sha256 over (topic serial, kind, payload, attempt): a redelivered MQTT message is one
    # receipt, while the same reply to a later attempt is new evidence.
    dedupe_key = models.CharField(max_length=64)
    attempt = models.PositiveIntegerField(default=0)
    mismatch = models.BooleanField(default=False)
    received_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["dedupe_key"], name="receipt_dedupe_once")]

    def __str__(self) -> str:
        return (
            f"{self.receipt_type} from {self.serial_number} for command #{self.command_id} "
            f"@ {self.received_at:%Y-%m-%d %H:%M:%S}"
        )
