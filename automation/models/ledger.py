"""The execution-core ledger (docs/spec.md §3): endpoint events, rule executions and device
commands. Unique keys absorb every duplicate; status columns move only by compare-and-set in
services."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from automation.models.rules import AutomationRule
from automation.states import CommandOrigin, CommandStatus, EventStatus, ExecutionOutcome
from devices.models import Device, DeviceInstanceEndpoint, Telemetry
from scheduler.models import DueWork


class AutomationEndpointEvent(models.Model):
    """One normalised endpoint value from telemetry: the replay and dedupe boundary."""

    # What the event's endpoint already gives (its device, farm and organisation) is not
    # copied here: a read that needs one joins through the endpoint.
    device_instance_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, db_index=False
    )
    # The message as received stays on the telemetry row; the event keeps only what it adds
    # (the endpoint's normalised value at the device's time), never a copy of the payload.
    # Not a database constraint: both tables are partitioned by the same device time on
    # PostgreSQL, where a key must carry the partition key; the event's partition is dropped
    # no later than its telemetry's (``common.partitions``).
    source_telemetry = models.ForeignKey(
        Telemetry, on_delete=models.DO_NOTHING, db_constraint=False
    )
    event_timestamp = models.DateTimeField()
    normalized_value = models.JSONField()
    processing_status = models.CharField(
        max_length=16, choices=EventStatus.choices, default=EventStatus.PENDING
    )
    status_reason = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField()
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "endpoint event"
        # One event per (endpoint, telemetry row): the telemetry row is itself one per
        # message (``telemetry_once``), so this fixed-width key (24 bytes) absorbs every
        # duplicate a hashed text key did. ``event_timestamp`` (the partition key on
        # PostgreSQL, which a unique key must carry) sits second, so the same index serves
        # an endpoint's readings over a time window.
        constraints = [
            models.UniqueConstraint(
                fields=["device_instance_endpoint", "event_timestamp", "source_telemetry"],
                name="event_once",
            )
        ]
        indexes = [
            models.Index(
                fields=["created_at"],
                name="event_pending_idx",
                condition=Q(processing_status=EventStatus.PENDING),
            ),
            # The retention prune's oldest-first scan on the partition key (common.retention).
            models.Index(fields=["event_timestamp"], name="event_ts"),
        ]

    def __str__(self) -> str:
        value = self.normalized_value
        shown = str(value).lower() if isinstance(value, bool) else value
        return (
            f"event #{self.pk} {self.device_instance_endpoint} = {shown} "
            f"@ {self.event_timestamp:%Y-%m-%d %H:%M:%S} ({self.processing_status})"
        )


class AutomationRuleExecution(models.Model):
    """A rule decided on one of its target endpoints: what was decided and why. One per
    (reading, rule, target endpoint), or, for a scheduled rule, per (occurrence, rule, target
    endpoint): a rule with several actions has one execution per action."""

    # Kept 180 days, its reading 30 (docs/architecture.md, "Retention"): an execution outlives
    # its event, so the database does not enforce the reference; a timeline says "pruned".
    event = models.ForeignKey(
        AutomationEndpointEvent,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="executions",
    )
    # The scheduler row of a rule schedule's occurrence (``origin`` schedule), else none.
    occurrence = models.ForeignKey(
        DueWork,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
    )
    rule = models.ForeignKey(AutomationRule, on_delete=models.CASCADE, related_name="executions")
    target_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, related_name="+"
    )
    outcome = models.CharField(max_length=32, choices=ExecutionOutcome.choices)
    failure_reason = models.CharField(max_length=64, blank=True, default="")
    # For ``suppressed``: the failed or uncertain command whose cool-down held this decision,
    # or the manual command whose hold did (``manual_override``); for ``discarded``/
    # ``lower_priority``, the live command of a higher-priority rollout that outranked it.
    suppressed_by = models.ForeignKey(
        "DeviceCommand",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    # For ``discarded``/``lower_priority``: the decision that won the endpoint.
    won_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField()

    class Meta:
        verbose_name = "rule execution"
        constraints = [
            models.UniqueConstraint(
                fields=["event", "rule", "target_endpoint"],
                condition=Q(event__isnull=False),
                name="one_execution_per_event_rule_target",
            ),
            models.UniqueConstraint(
                fields=["occurrence", "rule", "target_endpoint"],
                condition=Q(occurrence__isnull=False),
                name="one_execution_per_occurrence_rule_target",
            ),
            models.CheckConstraint(
                condition=Q(event__isnull=False, occurrence__isnull=True)
                | Q(event__isnull=True, occurrence__isnull=False),
                name="execution_has_event_or_occurrence",
            ),
        ]
        indexes = [models.Index(fields=["created_at"], name="execution_created")]  # the prune

    def __str__(self) -> str:
        return f"execution #{self.pk} of rule {self.rule_id} → {self.outcome}"

    @property
    def command(self) -> DeviceCommand | None:
        """The command the rule decided on (the original); manual retries come after it."""
        return self.commands.filter(retry_of__isnull=True).order_by("pk").first()


class DeviceCommand(models.Model):
    """The durable command ledger: the correlation root of an MQTT RPC and its retries.

    A rule- or schedule-origin command belongs to a rule execution, which has one original
    command; support's manual retries of a terminal command are further commands of the same
    execution, each linked ``retry_of`` that original. A manual command has no rule:
    ``requested_by`` asked for it, for ``request_reason`` (``automation.services.manual``)."""

    origin = models.CharField(
        max_length=16, choices=CommandOrigin.choices, default=CommandOrigin.RULE
    )
    rule_execution = models.ForeignKey(
        AutomationRuleExecution,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="commands",
    )
    retry_of = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="retries"
    )
    rule = models.ForeignKey(
        AutomationRule, on_delete=models.CASCADE, null=True, blank=True, related_name="commands"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    request_reason = models.CharField(max_length=400, blank=True, default="")
    target_device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="commands")
    # Indexed by (target_device_endpoint, status) in Meta, which serves its lookups too.
    target_device_endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, db_index=False, related_name="commands"
    )
    target_serial_number = models.CharField(max_length=64)
    command_method = models.CharField(max_length=64)
    command_params = models.JSONField()
    target_value = models.JSONField()
    idempotency_key = models.CharField(max_length=64)
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
    device_command_id = models.CharField(max_length=40, null=True, blank=True)
    # Holds the target endpoint's id while the command may still reach the device; the unique
    # constraint is the serialisation lock of docs/spec.md §3.5 (one live command per device
    # endpoint).
    inflight_endpoint = models.OneToOneField(
        DeviceInstanceEndpoint,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="inflight_command",
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
    # The run-time limit it carries (``automation.services.run_limits``): once applied, a
    # command back to ``max_on_value`` (null: the endpoint's safe value) follows this late.
    max_on_s = models.PositiveIntegerField(null=True, blank=True)
    max_on_value = models.JSONField(null=True, blank=True)
    version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "automation_automationcommandintent"  # named before the model was renamed
        verbose_name = "command"
        # Index and constraint names are the database's and keep the model's earlier word.
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="intent_status_due_idx"),
            models.Index(fields=["status", "deadline_at"], name="intent_status_deadline_idx"),
            models.Index(fields=["target_device_endpoint", "status"]),
            models.Index(fields=["created_at"], name="intent_created"),  # the retention prune
        ]
        constraints = [
            models.UniqueConstraint(fields=["idempotency_key"], name="intent_idempotency_once"),
            # Unassigned (NULL) until the first dispatch; NULLs never collide.
            models.UniqueConstraint(fields=["device_command_id"], name="intent_command_id_once"),
            # What the OneToOne used to guarantee: one rule execution yields one original command.
            models.UniqueConstraint(
                fields=["rule_execution"],
                condition=Q(retry_of__isnull=True),
                name="one_original_intent_per_execution",
            ),
            # A rule's or a schedule's command always names its rule and execution; a manual
            # command, a rollout's or a run-time limit's follow-up has none.
            models.CheckConstraint(
                condition=Q(
                    origin__in=[
                        CommandOrigin.MANUAL,
                        CommandOrigin.ROLLOUT,
                        CommandOrigin.RUN_LIMIT,
                    ]
                )
                | Q(rule__isnull=False, rule_execution__isnull=False),
                name="rule_intent_has_rule_and_execution",
            ),
        ]

    def __str__(self) -> str:
        value = self.target_value
        shown = str(value).lower() if isinstance(value, bool) else value
        key = self.target_device_endpoint.profile_endpoint.key
        return f"command #{self.pk} {self.target_serial_number} · {key} → {shown} ({self.status})"
