"""API shapes of the execution core. A rule is created and changed through
``automation.services.rules`` (the safety gates' configuration checks); failures are 400s
naming the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rest_framework import serializers

from automation.models import (
    AutomationCommandIntent,
    AutomationRule,
    AutomationRuleExecution,
    EndpointManualHold,
)
from automation.services.rules import (
    RULE_FIELDS,
    RuleInvalid,
    rule_create,
    rule_errors,
    rule_update,
)
from common.serializers import BoundedJSONField, StrictCharField, StrictModelSerializer
from devices.selectors import farms_visible, instance_endpoints_visible
from scheduler.models import AutomationScheduler


class RuleSerializer(StrictModelSerializer[AutomationRule]):
    class Meta:
        model = AutomationRule
        fields = ("id", *RULE_FIELDS, "created_at", "updated_at")
        read_only_fields = ("id", "created_at", "updated_at")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Related rows resolve only inside the caller's organisations (``scope`` in context):
        another organisation's farm or endpoint "does not exist"."""
        super().__init__(*args, **kwargs)
        if "scope" in self.context:
            scope = self.context["scope"]
            fields: Any = self.fields
            fields["farm"].queryset = farms_visible(scope=scope)
            fields["trigger_endpoint"].queryset = instance_endpoints_visible(scope=scope)
            fields["target_endpoint"].queryset = instance_endpoints_visible(scope=scope)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        errors = rule_errors({**self._current(), **attrs})
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    def create(self, validated_data: dict[str, Any]) -> AutomationRule:
        return self._saved(lambda: rule_create(**validated_data))

    def update(self, instance: AutomationRule, validated_data: dict[str, Any]) -> AutomationRule:
        return self._saved(lambda: rule_update(instance, **validated_data))

    @staticmethod
    def _saved(save: Callable[[], AutomationRule]) -> AutomationRule:
        try:
            return save()
        except RuleInvalid as exc:
            raise serializers.ValidationError(exc.errors) from None

    def _current(self) -> dict[str, Any]:
        rule = self.instance
        if not isinstance(rule, AutomationRule):
            return {}
        return {
            "farm": rule.farm,
            "trigger_endpoint": rule.trigger_endpoint,
            "target_endpoint": rule.target_endpoint,
            "target_value": rule.target_value,
            "threshold_value": rule.threshold_value,
            "threshold_value_high": rule.threshold_value_high,
            "operator": rule.operator,
        }


class CommandIntentSerializer(serializers.ModelSerializer[AutomationCommandIntent]):
    """A command as the ledger holds it; a manual one names who asked (``requested_by``, a
    user name) and why, and has no rule or execution."""

    requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = AutomationCommandIntent
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
            "created_at",
            "updated_at",
        )
        read_only_fields = fields


class CommandRetryRequestSerializer(serializers.Serializer[Any]):
    """Why support retries: kept with the user name in the original command's audit trail."""

    reason = StrictCharField(max_length=400, allow_blank=False, trim_whitespace=True)


class ManualCommandRequestSerializer(serializers.Serializer[Any]):
    """An operator's value for an endpoint, checked like a rule's target value (the endpoint's
    type and constraints, by the service); the reason is kept with the user name."""

    value = BoundedJSONField(help_text="the value to set: a boolean, number or string")
    reason = StrictCharField(max_length=400, allow_blank=False, trim_whitespace=True)

    def validate_value(self, value: Any) -> Any:
        if value is None or isinstance(value, dict | list):
            raise serializers.ValidationError("must be a boolean, a number or a string")
        return value


class ManualCommandSerializer(serializers.Serializer[Any]):
    command = CommandIntentSerializer()
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
    class Meta:
        model = AutomationRuleExecution
        fields = ("id", "event", "rule", "outcome", "failure_reason", "created_at")
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


class SchedulerSerializer(serializers.ModelSerializer[AutomationScheduler]):
    class Meta:
        model = AutomationScheduler
        exclude = ("input_hash",)
        read_only_fields = [f.name for f in AutomationScheduler._meta.fields]


class DeviceTimeoutsSerializer(serializers.Serializer[Any]):
    device_id = serializers.IntegerField(allow_null=True)
    serial_number = serializers.CharField()
    timeouts = serializers.IntegerField()
    commands = serializers.IntegerField()
    last_at = serializers.DateTimeField()


class DiagnosticsSerializer(serializers.Serializer[Any]):
    retrying = CommandIntentSerializer(many=True)
    uncertain = CommandIntentSerializer(many=True)
    top_timeouts = DeviceTimeoutsSerializer(many=True)
