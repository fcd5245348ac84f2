"""The due-work table (docs/spec.md §4): one row per piece of due work, claimed by lease and
version, and its audit rows (their tables keep the names they had when they lived in the
automation app); and the trace of executions, a thin copy no claim ever reads."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from devices.models import Farm
from scheduler.states import FinishOutcome, SchedulerReason, SchedulerStatus


class AutomationType(models.TextChoices):
    REMINDER = "reminder"
    REPORT_SUBSCRIPTION = "report_subscription"
    USER_MESSAGE = "user_message"
    RULE_SCHEDULE = "rule_schedule"
    WATCHDOG = "watchdog"  # a rule's silence: no reading of its trigger endpoint for N s
    RUN_LIMIT = "run_limit"  # a command's run-time limit: back to the safe value when due


class TriggerType(models.TextChoices):
    DATE_BASED = "date_based"
    THRESHOLD_CONDITION = "threshold_condition"
    RECURRING = "recurring"
    SCHEDULED_RUN = "scheduled_run"
    MANUAL_RUN = "manual_run"


class DueWork(models.Model):
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
    scheduler_key = models.CharField(max_length=400)
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
        verbose_name = verbose_name_plural = "due work"  # uncountable: no "due works"
        constraints = [
            # One index for the key's three reads: uniqueness (ON CONFLICT), equality and the
            # prefix matches of reminders, reports and rule schedules (``startswith``), which
            # outside the C collation only a pattern-ops index serves. ``unique=True`` would
            # build two indexes, a plain unique one and a pattern-ops copy.
            models.UniqueConstraint(
                fields=["scheduler_key"],
                name="scheduler_key_once",
                opclasses=["varchar_pattern_ops"],
            )
        ]
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


class DueWorkTransition(models.Model):
    """Audit row written in the same transaction as every outcome of a scheduler row (ensure,
    complete, fail, deactivate, stale release, hold). Claims are not audited row by row: a claim
    always ends in one of these outcomes, or in a stale release that names the lost lease."""

    scheduler = models.ForeignKey(DueWork, on_delete=models.CASCADE, related_name="transitions")
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


class TraceRecord(models.Model):
    """One execution of a claimed row (type, key, outcome, timings, where the delivery went),
    appended after the row's own transaction committed. A thin trace copy: workers never read
    it to find work, it may live in another database (``SCHEDULER_TRACE_DATABASE``), and it is
    pruned after ``SCHEDULER_TRACE_RETENTION_DAYS``. Plain ids, no foreign keys, so pruning
    either side never blocks the other and no join crosses databases."""

    scheduler_id = models.BigIntegerField()
    automation_type = models.CharField(max_length=24, choices=AutomationType.choices)
    scheduler_key = models.CharField(max_length=400)
    token = models.PositiveIntegerField()  # the claim's version: one claim, one execution
    attempt = models.PositiveIntegerField()  # 1 + the row's retry count when it was claimed
    outcome = models.CharField(max_length=16, choices=[(o.value, o.value) for o in FinishOutcome])
    reason = models.CharField(max_length=40, blank=True, default="")
    detail = models.CharField(max_length=500, blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    worker = models.CharField(max_length=120)  # host and process that ran it
    coordinates = models.JSONField(null=True, blank=True)  # the row's small dispatch result
    trace_blob_name = models.CharField(max_length=255, blank=True, default="")
    # Copied from the row when the record is written: the admin scopes records by
    # organisation without joining the coordination table (which may be another database).
    farm_id = models.BigIntegerField(null=True, blank=True)
    organization_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "scheduler_automationjob"  # named before the model was renamed
        constraints = [
            # A rewritten record (a retried write, a redelivered chunk) is absorbed; a second
            # delivery of the same claim that lost the race is a record of its own (lost).
            models.UniqueConstraint(
                fields=["scheduler_id", "token", "outcome"], name="scheduler_job_execution_uniq"
            ),
        ]
        indexes = [models.Index(fields=["finished_at"], name="scheduler_job_finished_idx")]

    def __str__(self) -> str:
        at = f"{self.started_at:%Y-%m-%d %H:%M:%S}"
        return f"scheduler #{self.scheduler_id} v{self.token} {self.outcome} @ {at}"
