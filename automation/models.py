"""The execution-core ledger (docs/spec.md §3): endpoint events, rule executions, command intents
and device receipts. Unique keys absorb every duplicate; status columns move only by
compare-and-set in services."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from automation.states import CommandOrigin, CommandStatus, EventStatus, ExecutionOutcome
from common.models import Organization
from common.validators import validate_json_bounds
from devices.models import Device, DeviceInstanceEndpoint, Farm, Telemetry


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
    threshold_value = models.JSONField(validators=[validate_json_bounds])
    threshold_value_high = models.JSONField(
        null=True, blank=True, validators=[validate_json_bounds]
    )
    target_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.PROTECT, related_name="targeting_rules"
    )
    target_value = models.JSONField(validators=[validate_json_bounds])
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

    def __str__(self) -> str:
        value = self.normalized_value
        shown = str(value).lower() if isinstance(value, bool) else value
        return (
            f"event #{self.pk} {self.device_instance_endpoint} = {shown} "
            f"@ {self.event_timestamp:%Y-%m-%d %H:%M:%S} ({self.processing_status})"
        )


class AutomationRuleExecution(models.Model):
    """A rule matched an event: what was decided and why. One per (event, rule)."""

    event = models.ForeignKey(
        AutomationEndpointEvent, on_delete=models.CASCADE, related_name="executions"
    )
    rule = models.ForeignKey(AutomationRule, on_delete=models.CASCADE, related_name="executions")
    outcome = models.CharField(max_length=32, choices=ExecutionOutcome.choices)
    failure_reason = models.CharField(max_length=64, blank=True, default="")
    # For ``suppressed``: the failed or uncertain command whose cool-down held this decision,
    # or the manual command whose hold did (``manual_override``).
    suppressed_by = models.ForeignKey(
        "AutomationCommandIntent",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event", "rule"], name="one_execution_per_event_rule")
        ]

    def __str__(self) -> str:
        return f"execution #{self.pk} of rule {self.rule_id} → {self.outcome}"

    @property
    def intent(self) -> AutomationCommandIntent | None:
        """The command the rule decided on (the first intent); manual retries come after it."""
        return self.intents.filter(retry_of__isnull=True).order_by("pk").first()


class AutomationCommandIntent(models.Model):
    """The durable command ledger: the correlation root of an MQTT RPC and its retries.

    A rule-origin intent belongs to a rule execution, which has one original intent; support's
    manual retries of a terminal intent are further intents of the same execution, each linked
    ``retry_of`` that original. A manual intent has no rule: ``requested_by`` asked for it,
    for ``request_reason`` (``automation.services.manual``)."""

    origin = models.CharField(
        max_length=16, choices=CommandOrigin.choices, default=CommandOrigin.RULE
    )
    rule_execution = models.ForeignKey(
        AutomationRuleExecution,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="intents",
    )
    retry_of = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="retries"
    )
    rule = models.ForeignKey(
        AutomationRule, on_delete=models.CASCADE, null=True, blank=True, related_name="intents"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    request_reason = models.CharField(max_length=400, blank=True, default="")
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
    # constraint is the serialisation lock of docs/spec.md §3.5 (one live command per device
    # endpoint).
    inflight_endpoint = models.OneToOneField(
        DeviceInstanceEndpoint,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="inflight_intent",
    )
    dispatched_at = models.DateTimeField(null=True, blank=True)
    # Set once, at the first publish: telemetry proves this command only when received after
    # it and different from the value the endpoint reported then (``prior_value``).
    first_dispatched_at = models.DateTimeField(null=True, blank=True)
    prior_value = models.JSONField(null=True, blank=True)
    prior_value_at = models.DateTimeField(null=True, blank=True)
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
        constraints = [
            # What the OneToOne used to guarantee: one rule execution yields one original command.
            models.UniqueConstraint(
                fields=["rule_execution"],
                condition=Q(retry_of__isnull=True),
                name="one_original_intent_per_execution",
            ),
            # A rule's command always names its rule and execution; only a manual one has none.
            models.CheckConstraint(
                condition=~Q(origin=CommandOrigin.RULE)
                | Q(rule__isnull=False, rule_execution__isnull=False),
                name="rule_intent_has_rule_and_execution",
            ),
        ]

    def __str__(self) -> str:
        value = self.target_value
        shown = str(value).lower() if isinstance(value, bool) else value
        key = self.target_device_endpoint.profile_endpoint.key
        return f"command #{self.pk} {self.target_serial_number} · {key} → {shown} ({self.status})"


class EndpointManualHold(models.Model):
    """An operator's manual command holds its endpoint against rules until ``until``: rule
    decisions for it end ``suppressed``/``manual_override`` and send nothing. One row per
    endpoint, moved by the next manual command (a new ``intent``, a new ``until``) or ended
    early by ``cancelled_at`` (``automation.services.manual``)."""

    endpoint = models.OneToOneField(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, related_name="manual_hold"
    )
    intent = models.ForeignKey(AutomationCommandIntent, on_delete=models.CASCADE, related_name="+")
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
        return f"{self.endpoint} held by command #{self.intent_id} ({state})"


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
    command = models.ForeignKey(
        "AutomationCommandIntent", on_delete=models.CASCADE, related_name="+"
    )
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

    def __str__(self) -> str:
        moved = f"{self.from_status} → {self.to_status}"
        return (
            f"command #{self.intent_id} {moved} ({self.reason_code}) @ {self.at:%Y-%m-%d %H:%M:%S}"
        )


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

    def __str__(self) -> str:
        return (
            f"{self.receipt_type} from {self.serial_number} for command #{self.intent_id} "
            f"@ {self.received_at:%Y-%m-%d %H:%M:%S}"
        )
