"""What the API docs say of each operation of the execution core's views (``automation.api``,
``automation.manual_api``): a one-line summary and a description of its own, and realistic
example bodies. Kept apart from the views so that each view reads as code; a view names its
entry here (``@schema_docs.RULES``)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view

_VENT_RULE = {
    "farm": 1,
    "name": "Vent greenhouse 2 above 30 °C",
    "trigger_endpoint": 12,
    "operator": "gt",
    "threshold_value": 30,
    "threshold_value_high": None,
    "target_endpoint": 14,
    "target_value": True,
    "priority": 10,
    "condition_window_s": 600,
    "is_active": True,
    "conditions": [
        {"endpoint": 13, "operator": "lt", "threshold_value": 85, "threshold_value_high": None}
    ],
    "actions": [{"target_endpoint": 15, "target_value": True}],
    "schedules": [],
}
_MORNING_RULE = {
    "farm": 1,
    "name": "Irrigate the seedlings at 06:00 on weekdays",
    "trigger_endpoint": None,
    "operator": None,
    "threshold_value": None,
    "threshold_value_high": None,
    "target_endpoint": 21,
    "target_value": True,
    "priority": 0,
    "condition_window_s": 600,
    "is_active": True,
    "conditions": [],
    "actions": [],
    "schedules": [
        {
            "local_time": "06:00:00",
            "weekdays": ["mon", "tue", "wed", "thu", "fri"],
            "max_lateness_s": 900,
            "is_active": True,
        }
    ],
}
_WATCHDOG_RULE = {
    "farm": 1,
    "name": "Heater off when its temperature sensor is silent for 10 minutes",
    "trigger_endpoint": 12,
    "operator": "silent_for",
    "threshold_value": 600,
    "target_endpoint": 16,
    "target_value": False,
    "alarm_severity": "critical",
}
RULE_EXAMPLES = [
    OpenApiExample(
        "Vent on a reading",
        summary="Open the vents above 30 °C while the humidity is under 85 %",
        value=_VENT_RULE,
        request_only=True,
    ),
    OpenApiExample(
        "Irrigate on a schedule",
        summary="A schedule-only rule: no trigger endpoint, operator or threshold",
        value=_MORNING_RULE,
        request_only=True,
    ),
    OpenApiExample(
        "Watchdog",
        summary="No reading for 600 s: switch the heater off, raise a critical alarm",
        value=_WATCHDOG_RULE,
        request_only=True,
    ),
    OpenApiExample(
        "A rule as stored",
        value={
            "id": 7,
            **_VENT_RULE,
            "created_at": "2026-03-02T08:15:00Z",
            "updated_at": "2026-03-02T08:15:00Z",
        },
        response_only=True,
    ),
]
MANUAL_COMMAND_EXAMPLES = [
    OpenApiExample(
        "Close a vent",
        value={"value": False, "reason": "storm warning: closing the vents by hand"},
        request_only=True,
    ),
    OpenApiExample(
        "Set a heater's target",
        value={"value": 18.5, "reason": "frost tonight"},
        request_only=True,
    ),
]

RULES = extend_schema_view(
    list=extend_schema(
        summary="List rules",
        description="The caller's rules that are not deleted, by id, each with its "
        "conditions, actions and schedules; `farm` narrows the list to one farm.",
    ),
    create=extend_schema(
        summary="Create a rule",
        description="A rule on one of the caller's farms (admin role). It fires on a reading "
        "of its trigger endpoint (an operator and a threshold of the endpoint's data type), "
        "on its schedules, or both, or, a watchdog (`silent_for`), when its trigger endpoint "
        "has had no reading for `threshold_value` seconds; it drives its target endpoint and "
        "each further action "
        "while every further condition holds. Checked like the safety gates: a refused field "
        "is a 400 naming it, nested lists included.",
    ),
    retrieve=extend_schema(
        summary="Get a rule",
        description="One rule with its conditions, actions and schedules. A deleted rule, or "
        "one of another organisation, is a 404.",
    ),
    update=extend_schema(
        summary="Replace a rule",
        description="Every field of the rule at once (admin role), checked as on create. Each "
        "nested list named replaces the rule's list; one left out is kept as it is.",
    ),
    partial_update=extend_schema(
        summary="Change some of a rule's fields",
        description="Only the fields named change (admin role); the rule as a whole is "
        "checked again. A nested list named replaces the rule's whole list.",
    ),
    destroy=extend_schema(
        summary="Delete a rule",
        description="The rule stops deciding at once and is not found afterwards: a 204, then "
        "404s (a second DELETE included). Its executions and commands stay listed, naming it.",
    ),
)

COMMANDS = extend_schema_view(
    list=extend_schema(
        summary="List commands",
        description="Commands sent to the caller's devices, newest first, paged by cursor "
        "(`next`/`previous`, no count). Filter by status, origin (rule, schedule, manual, "
        "rollout), target device or rule.",
    ),
    retrieve=extend_schema(
        summary="Get a command",
        description="One command as the ledger holds it: what it sets on which endpoint, who "
        "or what decided it, its status with the reason, its attempts, and when each stage "
        "happened.",
    ),
    timeline=extend_schema(
        summary="Get a command's timeline",
        description="Everything that happened to the command, oldest first: its decision, each "
        "dispatch and attempt, the device's acknowledgement and evidence, and its end.",
    ),
    retry=extend_schema(summary="Retry an ended command"),
    mark_failed=extend_schema(summary="Mark a live command failed"),
)

EXECUTIONS = extend_schema_view(
    list=extend_schema(
        summary="List rule executions",
        description="Every decision a rule made, newest first, paged by cursor: what caused it "
        "(a reading or a schedule's occurrence), its target endpoint and its outcome; "
        "`rule` narrows the list to one rule.",
    ),
    retrieve=extend_schema(
        summary="Get a rule execution",
        description="One decision of a rule, with the decision that outranked it (`won_by`) "
        "or the command that held its endpoint (`suppressed_by`).",
    ),
    timeline=extend_schema(
        summary="Get a rule execution's timeline",
        description="From the reading or occurrence that caused the decision to the end of "
        "each command it made, oldest first.",
    ),
)

SCHEDULER = extend_schema_view(
    list=extend_schema(
        summary="List due work",
        description="The scheduler's rows (reminders, reports, user messages, rule "
        "schedules), newest first, paged by cursor; filter by farm, status, automation type "
        "or trigger type. Rows without a farm are listed to superusers only.",
    ),
    retrieve=extend_schema(
        summary="Get a due-work row",
        description="One scheduler row: when it is due, its status, its attempts and the "
        "result or failure of its last run.",
    ),
)

DIAGNOSTICS = extend_schema_view(
    get=extend_schema(
        summary="Diagnose commands and devices",
        description="The commands retrying now, those left uncertain within the window, and "
        "the devices with the most acknowledgement timeouts in it (`window_hours`, 24 by "
        "default, at most 90 days).",
    ),
)

TELEMETRY = extend_schema_view(
    post=extend_schema(
        summary="Send a batch of telemetry",
        description="For HTTP gateways (gateway or admin role): readings of the caller's "
        "devices, taken by the same ingest as MQTT, so they fire rules the same way. 202 when "
        "at least one message was kept, 422 when every message was rejected; either lists "
        "each rejection with its index and reason code. A serial number that names no "
        "device of the caller's organisations is a 404, and nothing of the batch is taken.",
    ),
)

ENDPOINT_COMMAND = extend_schema_view(
    post=extend_schema(
        summary="Set an endpoint's value by hand",
        examples=MANUAL_COMMAND_EXAMPLES,
    ),
)

ENDPOINT_HOLD_CANCEL = extend_schema_view(
    post=extend_schema(summary="End an endpoint's manual hold"),
)
