"""Status vocabularies and allowed transitions, as plain constants (no database).

Services move a row only along an edge listed here, with a compare-and-set on status and
version; anything else is a no-op, so duplicates and late workers cannot move a row back.
"""

from __future__ import annotations

from django.db.models import TextChoices


class EventStatus(TextChoices):
    PENDING = "pending"
    PROCESSED = "processed"
    DISCARDED = "discarded"
    FAILED = "failed"


EVENT_TRANSITIONS: dict[str, frozenset[str]] = {
    EventStatus.PENDING: frozenset(
        {EventStatus.PROCESSED, EventStatus.DISCARDED, EventStatus.FAILED}
    ),
}


class CommandStatus(TextChoices):
    PENDING_DISPATCH = "pending_dispatch"
    DISPATCHED = "dispatched"
    ACKNOWLEDGED = "acknowledged"
    APPLIED = "applied"
    RETRYING = "retrying"
    FAILED = "failed"
    EXPIRED = "expired"
    UNCERTAIN = "uncertain"


S = CommandStatus
# The edges of docs/spec.md §3.3, plus those that evidence forces: a late ack or state report for a
# command already waiting to be retried is still proof (retrying -> acknowledged / applied /
# uncertain), and a command whose claims crashed past the budget expires unsent.
COMMAND_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING_DISPATCH: frozenset({S.DISPATCHED, S.RETRYING, S.FAILED, S.EXPIRED}),
    S.DISPATCHED: frozenset({S.ACKNOWLEDGED, S.APPLIED, S.RETRYING, S.FAILED, S.UNCERTAIN}),
    S.ACKNOWLEDGED: frozenset({S.APPLIED, S.UNCERTAIN, S.FAILED}),
    S.RETRYING: frozenset(
        {S.DISPATCHED, S.EXPIRED, S.FAILED, S.ACKNOWLEDGED, S.APPLIED, S.UNCERTAIN}
    ),
}
COMMAND_TERMINAL: frozenset[str] = frozenset({S.APPLIED, S.FAILED, S.EXPIRED, S.UNCERTAIN})
# States in which a command may still reach the device: at most one per device endpoint.
COMMAND_LIVE: frozenset[str] = frozenset(set(CommandStatus.values) - COMMAND_TERMINAL)
# States the dispatcher may claim from.
COMMAND_DISPATCHABLE: frozenset[str] = frozenset({S.PENDING_DISPATCH, S.RETRYING})
# States waiting on the device, which reconciliation decides.
COMMAND_AWAITING_DEVICE: frozenset[str] = frozenset({S.DISPATCHED, S.ACKNOWLEDGED, S.RETRYING})


def command_can_move(from_status: str, to_status: str) -> bool:
    return to_status in COMMAND_TRANSITIONS.get(from_status, frozenset())


class ExecutionOutcome(TextChoices):
    # The value is stored in every execution row since before the rename, and kept.
    COMMAND_CREATED = "intent_created", "Command created"
    ALREADY_IN_STATE = "already_in_state"
    ALREADY_PENDING = "already_pending"
    BLOCKED = "blocked"
    # Held, nothing sent: the same (endpoint, value) failed on the device moments ago
    # (``cooldown``), or an operator's manual command holds the endpoint (``manual_override``).
    SUPPRESSED = "suppressed"
    # Another decision for the same endpoint at the same time outranked this one
    # (``lower_priority``, ``won_by`` names the winner).
    DISCARDED = "discarded"
    # A schedule's occurrence that ran later than its lateness allows (``too_late``).
    SKIPPED = "skipped"


class CommandOrigin(TextChoices):
    """Who decided a command: a rule's execution on a reading, a rule's schedule, or an
    operator by hand (``requested_by``)."""

    RULE = "rule"
    MANUAL = "manual"
    SCHEDULE = "schedule"  # a rule's schedule occurrence (a scheduler row)
    ROLLOUT = "rollout"  # one target of a fleet rollout (``rollouts``), ``requested_by`` its actor
    WATCHDOG = "watchdog"  # a watchdog rule's silence (a scheduler row), like a schedule's
    RUN_LIMIT = "run_limit"  # the follow-up of a command's run-time limit (a scheduler row)


class ReasonCode(TextChoices):
    """Why an event, execution or command ended where it did."""

    NO_MATCHING_RULE = "no_matching_rule"
    RULE_MATCHED = "rule_matched"
    RULE_INACTIVE = "rule_inactive"
    TARGET_DISABLED = "target_disabled"
    TARGET_NOT_WRITABLE = "target_not_writable"
    TARGET_OTHER_FARM = "target_other_farm"
    TARGET_MAINTENANCE = "target_maintenance"
    TARGET_RETIRED = "target_retired"
    TARGET_OFFLINE = "target_offline"
    VALUE_OUT_OF_RANGE = "value_out_of_range"
    VALUE_NOT_ALLOWED = "value_not_allowed"
    VALUE_WRONG_TYPE = "value_wrong_type"
    BINDING_INVALID = "binding_invalid"
    EVALUATION_ERROR = "evaluation_error"
    PUBLISH_ERROR = "publish_error"
    ACK_TIMEOUT = "ack_timeout"
    DEVICE_BUSY = "device_busy"
    INVALID_PARAM = "invalid_param"
    NOT_SUPPORTED = "not_supported"
    HARDWARE_FAULT = "hardware_fault"
    ACKNOWLEDGED = "acknowledged"
    STATE_REPORTED = "state_reported"
    TELEMETRY_MATCHED = "telemetry_matched"
    STATE_MISMATCH = "state_mismatch"
    NO_APPLIED_EVIDENCE = "no_applied_evidence"
    RETRY_BUDGET_EXHAUSTED = "retry_budget_exhausted"
    # A newer reading of the trigger endpoint was already ingested: it decides, not this one;
    # or the same rule decided the endpoint from a newer reading of the same batch.
    NEWER_READING = "newer_reading"
    # A newer decision for the same endpoint replaced this command before it was ever sent.
    SUPERSEDED = "superseded"
    DISPATCHED = "dispatched"
    MANUAL = "manual"
    # A decision for an (endpoint, value) whose last command failed or stayed uncertain.
    COOLDOWN = "cooldown"
    # The broker stayed unreachable until the command was older than COMMAND_MAX_AGE_S.
    BROKER_UNREACHABLE = "broker_unreachable"
    # An operator's manual command holds the endpoint: rule decisions for it send nothing.
    MANUAL_OVERRIDE = "manual_override"
    # An operator ended a manual hold before its time: the audit rows of earlier releases
    # (a cancel is now on the hold and in its audit-log entry: it moves no command).
    HOLD_CANCELLED = "hold_cancelled"
    # A decision of a higher-priority rule (or a newer reading) won the same endpoint.
    LOWER_PRIORITY = "lower_priority"
    # A schedule's occurrence ran later than its lateness allows: it acts never, not late.
    TOO_LATE = "too_late"
    # A rule's schedule occurrence fired (``origin`` schedule).
    SCHEDULE_FIRED = "schedule_fired"
    # A fleet rollout's wave started this target's command (``origin`` rollout).
    ROLLOUT = "rollout"
    # The rollout was aborted or cancelled before this command was ever sent.
    ROLLOUT_STOPPED = "rollout_stopped"
    # A watchdog rule's silence fired (``origin`` watchdog).
    WATCHDOG_FIRED = "watchdog_fired"
    # A watchdog of higher priority holds the endpoint while its trigger endpoint is silent.
    WATCHDOG = "watchdog"
    # A command's run-time limit ended: its follow-up back to the safe value (origin run_limit).
    RUN_LIMIT = "run_limit"
