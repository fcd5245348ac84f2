"""The execution-core ledger (seed 001 §6): endpoint events, rule executions, command intents
and device receipts. Unique keys absorb every duplicate; status columns move only by
compare-and-set in services."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from automation.states import CommandStatus, EventStatus, ExecutionOutcome
from devices.models import Device, DeviceInstanceEndpoint, Farm, Organization, Telemetry


class Operator(models.TextChoices):
    GT = "gt"
    GTE = "gte"
    LT = "lt"
    LTE = "lte"
    EQ = "eq"
    NEQ = "neq"
    BETWEEN = "between"
    OUTSIDE = "outside"


class AutomationRule(models.Model):
    """When the trigger endpoint's value satisfies the operator, drive the target endpoint."""

    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="rules")
    name = models.CharField(max_length=200)
    trigger_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.PROTECT, related_name="triggering_rules"
    )
    operator = models.CharField(max_length=8, choices=Operator.choices)
    threshold_value = models.JSONField()
    threshold_value_high = models.JSONField(null=True, blank=True)
    target_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.PROTECT, related_name="targeting_rules"
    )
    target_value = models.JSONField()
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["trigger_endpoint", "is_active"])]

    def __str__(self) -> str:
        return self.name


class AutomationEndpointEvent(models.Model):
    """One normalised endpoint value from telemetry: the replay and dedupe boundary."""

    # organization/farm/device are copies of the endpoint's owners, kept for filtering; the
    # endpoint and telemetry keys carry the integrity. Fewer indexes keep ingest set-based fast.
    organization = models.ForeignKey(
        Organization, on_delete=models.DO_NOTHING, db_index=False, db_constraint=False
    )
    farm = models.ForeignKey(Farm, on_delete=models.DO_NOTHING, db_index=False, db_constraint=False)
    device = models.ForeignKey(
        Device, on_delete=models.DO_NOTHING, db_index=False, db_constraint=False
    )
    device_instance_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, db_index=False
    )
    source_telemetry = models.ForeignKey(Telemetry, on_delete=models.CASCADE)
    event_timestamp = models.DateTimeField()
    normalized_value = models.JSONField()
    raw_payload_snapshot = models.JSONField()
    dedupe_key = models.CharField(max_length=64, unique=True)
    processing_status = models.CharField(
        max_length=16, choices=EventStatus.choices, default=EventStatus.PENDING
    )
    status_reason = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField()
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["created_at"],
                name="event_pending_idx",
                condition=Q(processing_status=EventStatus.PENDING),
            ),
            models.Index(fields=["device_instance_endpoint", "event_timestamp"]),
        ]


class AutomationRuleExecution(models.Model):
    """A rule matched an event: what was decided and why. One per (event, rule)."""

    event = models.ForeignKey(
        AutomationEndpointEvent, on_delete=models.CASCADE, related_name="executions"
    )
    rule = models.ForeignKey(AutomationRule, on_delete=models.CASCADE, related_name="executions")
    outcome = models.CharField(max_length=32, choices=ExecutionOutcome.choices)
    failure_reason = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event", "rule"], name="one_execution_per_event_rule")
        ]


class AutomationCommandIntent(models.Model):
    """The durable command ledger: the correlation root of an MQTT RPC and its retries."""

    rule_execution = models.OneToOneField(
        AutomationRuleExecution, on_delete=models.CASCADE, related_name="intent"
    )
    rule = models.ForeignKey(AutomationRule, on_delete=models.CASCADE, related_name="intents")
    target_device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="intents")
    target_device_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, related_name="intents"
    )
    target_serial_number = models.CharField(max_length=64)
    command_method = models.CharField(max_length=64)
    command_params = models.JSONField()
    target_value = models.JSONField()
    idempotency_key = models.CharField(max_length=64, unique=True)
    desired_state_fingerprint = models.CharField(max_length=64)
    status = models.CharField(
        max_length=20, choices=CommandStatus.choices, default=CommandStatus.PENDING_DISPATCH
    )
    status_reason = models.CharField(max_length=64, blank=True, default="")
    attempt_count = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=3)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    mqtt_request_id = models.CharField(max_length=64, blank=True, default="")
    device_command_id = models.CharField(max_length=40, null=True, blank=True, unique=True)
    # Holds the target endpoint's id while the command may still reach the device; the unique
    # constraint is the serialisation lock of SPEC §3.5 (one live command per device endpoint).
    inflight_endpoint = models.OneToOneField(
        DeviceInstanceEndpoint,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="inflight_intent",
    )
    dispatched_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="intent_status_due_idx"),
            models.Index(fields=["status", "deadline_at"], name="intent_status_deadline_idx"),
            models.Index(fields=["target_device_endpoint", "status"]),
        ]


class CommandTransition(models.Model):
    """Audit row written in the same transaction as every status change of an intent."""

    intent = models.ForeignKey(
        AutomationCommandIntent, on_delete=models.CASCADE, related_name="transitions"
    )
    from_status = models.CharField(max_length=20)
    to_status = models.CharField(max_length=20)
    reason_code = models.CharField(max_length=64)
    detail = models.CharField(max_length=500, blank=True, default="")
    attempt = models.PositiveIntegerField(default=0)
    at = models.DateTimeField()


class ReceiptType(models.TextChoices):
    RPC_ACK = "rpc_ack"
    RPC_RESULT = "rpc_result"
    STATE_REPORT = "state_report"
    TIMEOUT_MARK = "timeout_mark"
    RETRY_MARK = "retry_mark"


class DeviceCommandReceipt(models.Model):
    """Raw evidence from (or about) a device for a command, kept for postmortems."""

    intent = models.ForeignKey(
        AutomationCommandIntent,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="receipts",
    )
    device = models.ForeignKey(Device, on_delete=models.SET_NULL, null=True, blank=True)
    serial_number = models.CharField(max_length=64)
    receipt_type = models.CharField(max_length=16, choices=ReceiptType.choices)
    payload = models.JSONField()
    correlation_key = models.CharField(max_length=64, blank=True, default="")
    # sha256 over (topic serial, kind, payload, attempt): a redelivered MQTT message is one
    # receipt, while the same reply to a later attempt is new evidence.
    dedupe_key = models.CharField(max_length=64, unique=True)
    attempt = models.PositiveIntegerField(default=0)
    mismatch = models.BooleanField(default=False)
    received_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["correlation_key"])]
