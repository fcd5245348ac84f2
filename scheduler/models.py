"""The due-work table (docs/spec.md §4): one row per piece of due work, claimed by lease and
version, and its audit rows. Its tables keep the names they had when it lived in the
automation app."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from devices.models import Farm
from scheduler.states import SchedulerReason, SchedulerStatus


class AutomationType(models.TextChoices):
    REMINDER = "reminder"
    REPORT_SUBSCRIPTION = "report_subscription"


class TriggerType(models.TextChoices):
    DATE_BASED = "date_based"
    THRESHOLD_CONDITION = "threshold_condition"
    RECURRING = "recurring"
    SCHEDULED_RUN = "scheduled_run"
    MANUAL_RUN = "manual_run"


class AutomationScheduler(models.Model):
    """One row of due work: the source of truth for "what is due". Workers poll only this table,
    claim a row by lease + version, and hand delivery off; the row stays small (large inputs and
    diagnostics live in file storage under ``trace_blob_name``)."""

    automation_type = models.CharField(max_length=24, choices=AutomationType.choices)
    # The farm the work is for, when its creator knows it: scopes support's admin and API to
    # the farm's organisation (rows without one are visible to superusers only).
    farm = models.ForeignKey(
        Farm, on_delete=models.SET_NULL, null=True, blank=True, db_index=True, related_name="+"
    )
    trigger_type = models.CharField(max_length=24, choices=TriggerType.choices)
    scheduler_key = models.CharField(max_length=400, unique=True)
    scheduled_on = models.DateTimeField()  # UTC
    scheduled_local_date = models.DateField(null=True, blank=True)
    time_zone_id = models.CharField(max_length=64, default="UTC")
    status = models.CharField(
        max_length=16, choices=SchedulerStatus.choices, default=SchedulerStatus.PENDING
    )
    # A crash guard, not a worker identity: past it, stale cleanup returns the row to Pending.
    processing_lease_expires_on = models.DateTimeField(null=True, blank=True)
    retry_count = models.PositiveIntegerField(default=0)
    next_retry_on = models.DateTimeField(null=True, blank=True)
    failure_reason_code = models.CharField(
        max_length=40, choices=SchedulerReason.choices, blank=True, default=""
    )
    is_on_support_hold = models.BooleanField(default=False)
    input_hash = models.CharField(max_length=64)  # sha256 of the normalised input
    dispatch_result_json = models.JSONField(null=True, blank=True)  # small coordinates only
    version = models.PositiveIntegerField(default=0)
    trace_blob_name = models.CharField(max_length=255, blank=True, default="")
    created_on = models.DateTimeField()
    updated_on = models.DateTimeField()
    completed_on = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "automation_automationscheduler"  # the table predates this app
        indexes = [
            # The due query (claim): an index scan over Pending, not-held rows in due order.
            models.Index(
                fields=["scheduled_on", "next_retry_on"],
                name="scheduler_due_idx",
                condition=Q(status=SchedulerStatus.PENDING, is_on_support_hold=False),
            ),
            # Stale cleanup: claimed rows by lease expiry. The lease is set only while
            # Processing; keyed on it (not on status) so a pk lookup "WHERE id AND status =
            # processing" never walks this index instead of the primary key.
            models.Index(
                fields=["processing_lease_expires_on"],
                name="scheduler_lease_idx",
                condition=Q(processing_lease_expires_on__isnull=False),
            ),
            # Support's queue of held rows.
            models.Index(
                fields=["updated_on"],
                name="scheduler_hold_idx",
                condition=Q(is_on_support_hold=True),
            ),
        ]

    def __str__(self) -> str:
        return self.scheduler_key


class AutomationSchedulerTransition(models.Model):
    """Audit row written in the same transaction as every outcome of a scheduler row (ensure,
    complete, fail, deactivate, stale release, hold). Claims are not audited row by row: a claim
    always ends in one of these outcomes, or in a stale release that names the lost lease."""

    scheduler = models.ForeignKey(
        AutomationScheduler, on_delete=models.CASCADE, related_name="transitions"
    )
    from_status = models.CharField(max_length=16, blank=True, default="")
    to_status = models.CharField(max_length=16)
    reason_code = models.CharField(max_length=40, blank=True, default="")
    version = models.PositiveIntegerField()  # the row's version after the change
    retry_count = models.PositiveIntegerField(default=0)
    detail = models.CharField(max_length=500, blank=True, default="")
    at = models.DateTimeField()

    class Meta:
        db_table = "automation_automationschedulertransition"

    def __str__(self) -> str:
        moved = f"{self.from_status or '∅'} → {self.to_status}"
        at = f"{self.at:%Y-%m-%d %H:%M:%S}"
        return f"scheduler #{self.scheduler_id} {moved} ({self.reason_code}) @ {at}"
