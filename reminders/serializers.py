"""API shapes of reminder settings and report subscriptions. Writes go through the reminders
services (they publish the change events and re-derive scheduler rows), so the serializers
only check shapes and map a refused write to a 400 naming the field."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from rest_framework import serializers

from automation.serializers import SchedulerSerializer
from common.models import Organization
from common.serializers import (
    BoundedDateField,
    StrictIntegerField,
    StrictModelSerializer,
    StrictUUIDField,
)
from common.tenancy import OrgScope, scope_filter
from common.validators import DATE_MAX, DATE_MIN, time_zones_known
from devices.models import Farm
from devices.selectors import farms_visible
from notifications.states import Channel
from reminders.models import (
    OFFSET_DAYS_MAX,
    OFFSETS_MAX,
    ReminderSetting,
    ReminderTrigger,
    ReportSubscription,
)
from reminders.services.reports.subscriptions import (
    ReportSubscriptionInvalid,
    report_subscription_create,
    report_subscription_update,
)
from reminders.services.settings import (
    reminder_setting_create,
    reminder_setting_update,
    reminder_setting_validate,
)
from scheduler.keys import FiringPolicy

# A service's refusal names no field; these words in its message point at the one to blame.
_SETTING_ERROR_FIELDS = (
    ("farm or to an organisation", "farm"),
    ("sources use", "trigger_type"),
    ("channels", "channels"),
    ("template", "template_name"),
    ("offsets", "offsets_days"),
    ("send time", "send_time"),
    ("metric and a value", "threshold_value"),
)


def _field_error(message: str, table: tuple[tuple[str, str], ...]) -> serializers.ValidationError:
    for words, field in table:
        if words in message:
            return serializers.ValidationError({field: [message]})
    return serializers.ValidationError({"non_field_errors": [message]})


def organizations_visible(*, scope: OrgScope) -> QuerySet[Organization]:
    return scope_filter(Organization.objects.all(), scope, "pk").order_by("pk")


def farm_with_known_zone(farm: Farm | None) -> Farm | None:
    """A farm whose zone does not load (written before zones were validated) can carry no
    schedule: refused on the field, not a 500 when its first period is computed."""
    if farm is not None and farm.time_zone not in time_zones_known():
        raise serializers.ValidationError(
            f"the farm's time zone {farm.time_zone[:64]!r} is not an IANA time zone; "
            "correct the farm first"
        )
    return farm


class ReminderSettingSerializer(StrictModelSerializer[ReminderSetting]):
    """``farm``, ``organization`` and ``source_type`` fix what a setting is about: set on
    create, refused on update (the services re-key rows only for the editable fields)."""

    channels = serializers.ListField(
        child=serializers.ChoiceField(choices=Channel.choices), allow_empty=False
    )
    offsets_days = serializers.ListField(
        child=StrictIntegerField(min_value=0, max_value=OFFSET_DAYS_MAX),
        required=False,
        allow_empty=True,
        max_length=OFFSETS_MAX,
        help_text=f"days before the expiry: 0 (on the day) to {OFFSET_DAYS_MAX}",
    )

    class Meta:
        model = ReminderSetting
        fields = (
            "id",
            "guid",
            "organization",
            "farm",
            "name",
            "source_type",
            "trigger_type",
            "document_type",
            "offsets_days",
            "send_time",
            "threshold_metric",
            "threshold_operator",
            "threshold_value",
            "firing_policy",
            "recipients_policy",
            "template_name",
            "channels",
            "active",
            "revision",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("id", "guid", "active", "revision", "created_at", "updated_at")

    FIXED_FIELDS = ("organization", "farm", "source_type")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Farms and organisations resolve only inside the caller's scope: another
        organisation's farm "does not exist" (a 400 on the field, never a write)."""
        super().__init__(*args, **kwargs)
        if "scope" in self.context:
            scope = self.context["scope"]
            fields: Any = self.fields
            fields["farm"].queryset = farms_visible(scope=scope)
            fields["organization"].queryset = organizations_visible(scope=scope)

    def validate_farm(self, farm: Farm | None) -> Farm | None:
        return farm_with_known_zone(farm)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        errors: dict[str, str] = {}
        current = self.instance if isinstance(self.instance, ReminderSetting) else None
        if current is not None:
            for name in self.FIXED_FIELDS:
                if name in attrs and attrs[name] != getattr(current, name):
                    errors[name] = "cannot be changed; create a new setting instead"
        elif (attrs.get("farm") is None) == (attrs.get("organization") is None):
            errors["farm"] = "give exactly one of farm and organization"
        merged = {**self._current(current), **attrs}
        if merged.get("trigger_type") == ReminderTrigger.THRESHOLD_CONDITION:
            if not merged.get("threshold_metric"):
                errors["threshold_metric"] = "required for a threshold setting"
            if merged.get("threshold_value") is None:
                errors["threshold_value"] = "required for a threshold setting"
            if not merged.get("threshold_operator"):
                errors["threshold_operator"] = "required for a threshold setting"
            if merged.get("firing_policy") not in {p.value for p in FiringPolicy}:
                errors["firing_policy"] = "required for a threshold setting"
        elif merged.get("trigger_type") == ReminderTrigger.DATE_BASED:
            if not merged.get("offsets_days"):
                errors["offsets_days"] = "a date-based setting needs offsets in days"
            if merged.get("send_time") is None:
                errors["send_time"] = "a date-based setting needs a local send time"
        if errors:
            raise serializers.ValidationError(errors)
        self._service_check(merged)
        return attrs

    def _current(self, setting: ReminderSetting | None) -> dict[str, Any]:
        if setting is None:
            return {}
        names = [f for f in self.Meta.fields if f not in self.Meta.read_only_fields]
        return {name: getattr(setting, name) for name in names}

    def _service_check(self, merged: dict[str, Any]) -> None:
        """The service's own validation on an unsaved copy, so its refusal is a 400 before
        anything is written."""
        probe = ReminderSetting(
            **{k: v for k, v in merged.items() if k not in ("farm", "organization")},
            farm_id=getattr(merged.get("farm"), "pk", None),
            organization_id=getattr(merged.get("organization"), "pk", None),
        )
        try:
            reminder_setting_validate(probe)
        except ValueError as exc:
            raise _field_error(str(exc), _SETTING_ERROR_FIELDS) from None

    def create(self, validated_data: dict[str, Any]) -> ReminderSetting:
        data = dict(validated_data)
        farm, organization = data.pop("farm", None), data.pop("organization", None)
        try:
            return reminder_setting_create(
                farm_id=getattr(farm, "pk", None),
                organization_id=getattr(organization, "pk", None),
                now=timezone.now(),
                **data,
            )
        except ValueError as exc:
            raise _field_error(str(exc), _SETTING_ERROR_FIELDS) from None

    def update(self, instance: ReminderSetting, validated_data: dict[str, Any]) -> ReminderSetting:
        changes = {k: v for k, v in validated_data.items() if k not in self.FIXED_FIELDS}
        try:
            reminder_setting_update(setting_id=instance.pk, now=timezone.now(), **changes)
        except ValueError as exc:
            raise _field_error(str(exc), _SETTING_ERROR_FIELDS) from None
        return ReminderSetting.objects.get(pk=instance.pk)


class ReportSubscriptionSerializer(StrictModelSerializer[ReportSubscription]):
    """``farm`` is set on create only; every other field goes through the services, which
    re-ensure the scheduler rows a recurrence or send-time change affects."""

    channels = serializers.ListField(
        child=serializers.ChoiceField(choices=Channel.choices), allow_empty=False
    )

    class Meta:
        model = ReportSubscription
        fields = (
            "id",
            "guid",
            "farm",
            "name",
            "recurrence",
            "send_time",
            "recipients_policy",
            "template_name",
            "channels",
            "active",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("id", "guid", "created_at", "updated_at")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "scope" in self.context:
            fields: Any = self.fields
            fields["farm"].queryset = farms_visible(scope=self.context["scope"])

    def validate_farm(self, farm: Farm) -> Farm | None:
        return farm_with_known_zone(farm)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        current = self.instance if isinstance(self.instance, ReportSubscription) else None
        if current is not None and "farm" in attrs and attrs["farm"] != current.farm:
            raise serializers.ValidationError({"farm": "cannot be changed"})
        if "template_name" in attrs and not attrs["template_name"].strip():
            raise serializers.ValidationError({"template_name": "a subscription needs a template"})
        return attrs

    def create(self, validated_data: dict[str, Any]) -> ReportSubscription:
        data = dict(validated_data)
        farm, active = data.pop("farm"), data.pop("active", True)
        now = timezone.now()
        try:
            sub = report_subscription_create(farm_id=farm.pk, now=now, **data)
            if not active:
                report_subscription_update(subscription_id=sub.pk, now=now, active=False)
        except ValueError as exc:
            raise serializers.ValidationError({"non_field_errors": [str(exc)]}) from None
        return ReportSubscription.objects.get(pk=sub.pk)

    def update(
        self, instance: ReportSubscription, validated_data: dict[str, Any]
    ) -> ReportSubscription:
        changes = {k: v for k, v in validated_data.items() if k != "farm"}
        try:
            report_subscription_update(subscription_id=instance.pk, now=timezone.now(), **changes)
        except (ReportSubscriptionInvalid, ValueError) as exc:
            raise serializers.ValidationError({"non_field_errors": [str(exc)]}) from None
        return ReportSubscription.objects.get(pk=instance.pk)


class ReportRunRequestSerializer(serializers.Serializer[Any]):
    """The caller may generate ``run_id`` before asking, so a retried request (same id) lands
    on the same run and scheduler row; without one the server generates it."""

    run_id = StrictUUIDField(required=False, default=uuid.uuid4)
    period_start = BoundedDateField(
        required=False,
        allow_null=True,
        default=None,
        help_text=f"local date in the period, from {DATE_MIN} to {DATE_MAX}",
    )


class ReportRunResultSerializer(serializers.Serializer[Any]):
    """The run id to ask again with, what the ensure did, and the scheduler row itself."""

    run_id = serializers.UUIDField()
    outcome = serializers.CharField()
    scheduler = SchedulerSerializer()
