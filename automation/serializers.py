"""API shapes of the execution core. A rule is created and changed through
``automation.services.rules`` (the safety gates' configuration checks); failures are 400s
naming the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from alarms.models import AlarmSeverity
from automation.models import (
    AutomationRule,
    AutomationRuleAction,
    AutomationRuleCondition,
    AutomationRuleExecution,
    AutomationRuleSchedule,
    DeviceCommand,
    EndpointManualHold,
    Operator,
)
from automation.schema_docs import RULE_EXAMPLES
from automation.services.rules import RULE_FIELDS, RuleInvalid, rule_create, rule_update
from automation.services.run_limits import MAX_ON_MAX_S
from automation.states import ExecutionOutcome
from common.serializers import (
    EndpointValueField,
    StrictCharField,
    StrictIntegerField,
    StrictModelSerializer,
)
from devices.selectors import farms_visible, instance_endpoints_visible
from scheduler.models import DueWork

NESTED = ("conditions", "actions", "schedules")
NESTED_MAX = 50  # items per nested list of a rule: far above any real rule, a bound on work


WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # bit 0 is Monday


def _errors_as_drf(errors: Any) -> Any:
    """The rule services' errors in DRF's shape: each message in a list, nested as the input."""
    if isinstance(errors, dict):
        return {name: _errors_as_drf(value) for name, value in errors.items()}
    if isinstance(errors, list):
        return [_errors_as_drf(item) for item in errors]
    return [errors]


class WeekdaysField(serializers.ListField):
    """Weekday names on the wire, a bit per day (Monday first) in the table."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            child=serializers.ChoiceField(choices=WEEKDAY_NAMES),
            allow_empty=False,
            **kwargs,
        )

    def to_internal_value(self, data: Any) -> int:  # type: ignore[override]
        if isinstance(data, list) and len(data) > len(WEEKDAY_NAMES):
            raise serializers.ValidationError("names each weekday at most once")
        names = super().to_internal_value(data)
        return sum(1 << WEEKDAY_NAMES.index(name) for name in set(names))

    def to_representation(self, data: Any) -> list[str]:  # type: ignore[override]
        return [name for bit, name in enumerate(WEEKDAY_NAMES) if int(data) >> bit & 1]


_THRESHOLD_HELP = "compared with the endpoint's reading: of its data type (30 for a number)"
_HIGH_HELP = "between/outside only: the upper bound of the range"
_MAX_ON_HELP = "with max_on_s: the value to return to; null or left out: the endpoint's safe value"


class RuleConditionSerializer(StrictModelSerializer[AutomationRuleCondition]):
    """A further condition: it must hold, on a reading of ``endpoint`` at most the rule's
    ``condition_window_s`` old."""

    threshold_value = EndpointValueField(help_text=_THRESHOLD_HELP)
    threshold_value_high = EndpointValueField(required=False, allow_null=True, help_text=_HIGH_HELP)

    class Meta:
        model = AutomationRuleCondition
        fields = ("endpoint", "operator", "threshold_value", "threshold_value_high")


class RuleActionSerializer(StrictModelSerializer[AutomationRuleAction]):
    """A further endpoint the rule drives, with the same gates as its target."""

    target_value = EndpointValueField(help_text="the value to drive the endpoint to")

    max_on_value = EndpointValueField(required=False, allow_null=True, help_text=_MAX_ON_HELP)

    class Meta:
        model = AutomationRuleAction
        fields = ("target_endpoint", "target_value", "max_on_s", "max_on_value")


class RuleScheduleSerializer(StrictModelSerializer[AutomationRuleSchedule]):
    """A local time in the farm's zone at which the rule fires, on some weekdays."""

    weekdays = WeekdaysField(required=False, help_text="the days it fires on; left out: every day")

    class Meta:
        model = AutomationRuleSchedule
        fields = ("local_time", "weekdays", "max_lateness_s", "is_active")


def _nested(child: serializers.Serializer[Any]) -> serializers.ListSerializer[Any]:
    return serializers.ListSerializer(child=child, required=False, max_length=NESTED_MAX)


@extend_schema_serializer(examples=RULE_EXAMPLES)
class RuleSerializer(StrictModelSerializer[AutomationRule]):
    """A write replaces each nested list it names; one left out is kept."""

    operator = serializers.ChoiceField(
        choices=Operator.choices,
        allow_blank=True,
        allow_null=True,
        required=False,
        help_text="with a trigger endpoint; null or left out for a schedule-only rule",
    )
    threshold_value = EndpointValueField(required=False, allow_null=True, help_text=_THRESHOLD_HELP)
    threshold_value_high = EndpointValueField(required=False, allow_null=True, help_text=_HIGH_HELP)
    target_value = EndpointValueField(help_text="the value to drive the target endpoint to")
    alarm_severity = serializers.ChoiceField(
        choices=AlarmSeverity.choices,
        allow_blank=True,
        required=False,
        help_text="raise an alarm of this severity when the rule fires, cleared when its "
        "condition is false again; a watchdog's alarm is major when blank",
    )
    max_on_value = EndpointValueField(required=False, allow_null=True, help_text=_MAX_ON_HELP)
    conditions = _nested(RuleConditionSerializer())
    actions = _nested(RuleActionSerializer())
    schedules = _nested(RuleScheduleSerializer())

    class Meta:
        model = AutomationRule
        fields = ("id", *RULE_FIELDS, *NESTED, "created_at", "updated_at")
        read_only_fields = ("id", "created_at", "updated_at")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Related rows resolve only inside the caller's organisations (``scope`` in context):
        another organisation's farm or endpoint "does not exist"."""
        super().__init__(*args, **kwargs)
        if "scope" in self.context:
            endpoints = instance_endpoints_visible(scope=self.context["scope"]).select_related(
                "device", "profile_endpoint"
            )
            fields: Any = self.fields
            fields["farm"].queryset = farms_visible(scope=self.context["scope"])
            fields["trigger_endpoint"].queryset = endpoints
            fields["target_endpoint"].queryset = endpoints
            fields["conditions"].child.fields["endpoint"].queryset = endpoints
            fields["actions"].child.fields["target_endpoint"].queryset = endpoints

    def create(self, validated_data: dict[str, Any]) -> AutomationRule:
        return self._saved(lambda nested: rule_create(**nested, **validated_data), validated_data)

    def update(self, instance: AutomationRule, validated_data: dict[str, Any]) -> AutomationRule:
        return self._saved(
            lambda nested: rule_update(instance, **nested, **validated_data), validated_data
        )

    @staticmethod
    def _saved(
        save: Callable[[dict[str, Any]], AutomationRule], validated_data: dict[str, Any]
    ) -> AutomationRule:
        nested = {name: validated_data.pop(name) for name in NESTED if name in validated_data}
        if "operator" in validated_data and validated_data["operator"] is None:
            validated_data["operator"] = ""  # the table's "none"
        try:
            return save(nested)
        except RuleInvalid as exc:
            raise serializers.ValidationError(_errors_as_drf(exc.errors)) from None


class CommandSerializer(serializers.ModelSerializer[DeviceCommand]):
    """A command as the ledger holds it; a manual one names who asked (``requested_by``, a
    user name) and why, and has no rule or execution."""

    requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    target_value = EndpointValueField(read_only=True, help_text="the value the command sets")
    max_on_value = EndpointValueField(
        read_only=True,
        allow_null=True,
        help_text="the value its run-time limit returns to (null: the endpoint's safe value)",
    )

    class Meta:
        model = DeviceCommand
        fields = (
            "id",
            "origin",
            "requested_by",
            "request_reason",
            "rule_execution",
            "retry_of",
            "rule",
            "target_device",
            "target_device_endpoint",
            "target_serial_number",
            "command_method",
            "command_params",
            "target_value",
            "status",
            "status_reason",
            "attempt_count",
            "max_attempts",
            "next_attempt_at",
            "device_command_id",
            "dispatched_at",
            "deadline_at",
            "acknowledged_at",
            "applied_at",
            "finished_at",
            "max_on_s",
            "max_on_value",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields
        extra_kwargs = {"max_on_s": {"help_text": "its run-time limit in seconds (null: none)"}}


class CommandRetryRequestSerializer(serializers.Serializer[Any]):
    """Why support retries: kept with the user name in the original command's audit trail."""

    reason = StrictCharField(max_length=400, allow_blank=False, trim_whitespace=True)


class ManualCommandRequestSerializer(serializers.Serializer[Any]):
    """An operator's value for an endpoint, checked like a rule's target value (the endpoint's
    type and constraints, by the service); the reason is kept with the user name."""

    value = EndpointValueField(help_text="the value to set, of the endpoint's data type")
    reason = StrictCharField(max_length=400, allow_blank=False, trim_whitespace=True)
    max_on_s = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_ON_MAX_S,
        help_text="a run-time limit: this many seconds after the command applied, one back to "
        "max_on_value (or the endpoint's safe value) follows",
    )
    max_on_value = EndpointValueField(
        required=False,
        allow_null=True,
        help_text="with max_on_s: the value to return to; left out: the endpoint's safe value",
    )

    def validate_value(self, value: Any) -> Any:
        if value is None or isinstance(value, dict | list):
            raise serializers.ValidationError("must be a boolean, a number or a string")
        return value


class ManualCommandSerializer(serializers.Serializer[Any]):
    command = CommandSerializer()
    manual_hold_until = serializers.DateTimeField(
        allow_null=True, help_text="rules act on the endpoint again after this (null: not held)"
    )


class HoldCancelRequestSerializer(serializers.Serializer[Any]):
    """Why the hold ends early: kept with the user name on the hold and in the audit trail."""

    reason = StrictCharField(max_length=400, allow_blank=False, trim_whitespace=True)


class EndpointHoldSerializer(serializers.ModelSerializer[EndpointManualHold]):
    """An endpoint's manual hold: rules act on it again after ``until``, or since
    ``cancelled_at``."""

    requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    cancelled_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    # The key API v1 has always answered with: a contract with its clients, kept
    # (docs/architecture.md, "Names kept from before the rename").
    intent: serializers.PrimaryKeyRelatedField[Any] = serializers.PrimaryKeyRelatedField(
        source="command", read_only=True, help_text="the manual command that holds the endpoint"
    )

    class Meta:
        model = EndpointManualHold
        fields = (
            "endpoint",
            "intent",
            "requested_by",
            "until",
            "cancelled_at",
            "cancelled_by",
            "cancel_reason",
        )
        read_only_fields = fields


class RuleExecutionSerializer(serializers.ModelSerializer[AutomationRuleExecution]):
    """One decision: caused by a reading (``event``) or a schedule's occurrence (its scheduler
    row), on one target endpoint; ``won_by`` names the decision that outranked a
    ``discarded`` one, ``suppressed_by`` the command that held a ``suppressed`` one."""

    outcome = serializers.ChoiceField(choices=ExecutionOutcome.choices, read_only=True)

    class Meta:
        model = AutomationRuleExecution
        fields = (
            "id",
            "event",
            "occurrence",
            "rule",
            "target_endpoint",
            "outcome",
            "failure_reason",
            "suppressed_by",
            "won_by",
            "created_at",
        )
        read_only_fields = fields


class TimelineEntrySerializer(serializers.Serializer[Any]):
    at = serializers.DateTimeField()
    stage = serializers.CharField()
    what = serializers.CharField()
    reason = serializers.CharField()
    attempt = serializers.IntegerField(allow_null=True)
    detail = serializers.CharField()
    ref = serializers.CharField()


class TimelineSerializer(serializers.Serializer[Any]):
    subject = serializers.CharField()
    ids = serializers.DictField()
    entries = TimelineEntrySerializer(many=True)


class SchedulerSerializer(serializers.ModelSerializer[DueWork]):
    class Meta:
        model = DueWork
        exclude = ("input_hash",)
        read_only_fields = [f.name for f in DueWork._meta.fields]


class DeviceTimeoutsSerializer(serializers.Serializer[Any]):
    device_id = serializers.IntegerField(allow_null=True)
    serial_number = serializers.CharField()
    timeouts = serializers.IntegerField()
    commands = serializers.IntegerField()
    last_at = serializers.DateTimeField()


class DiagnosticsSerializer(serializers.Serializer[Any]):
    retrying = CommandSerializer(many=True)
    uncertain = CommandSerializer(many=True)
    top_timeouts = DeviceTimeoutsSerializer(many=True)
