"""API shapes of the devices domain: the rows as read, and the input of each write (farms,
profiles with their catalogue, devices, a device's endpoints). Input serializers check types
and shapes; uniqueness and the catalogue rules are the services' (``devices.services``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.members.selectors import organizations_visible
from common.serializers import (
    BoundedJSONField,
    EndpointValueField,
    FixedFieldsMixin,
    StrictCharField,
    StrictModelSerializer,
)
from common.tenancy import OrgScope
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceMessageRejectionReason,
    DeviceProfile,
    DeviceProfileEndpoint,
    DeviceStatus,
    Farm,
)
from devices.selectors import farms_visible, profiles_visible
from devices.services import EndpointSpec, endpoint_spec_problems

MAX_ENDPOINTS_PER_REQUEST = 200


class FarmSerializer(serializers.ModelSerializer[Farm]):
    class Meta:
        model = Farm
        fields = (
            "id",
            "organization",
            "name",
            "time_zone",
            "manual_override_minutes",
            "created_at",
            "archived_at",
            "archived_by",
        )
        read_only_fields = fields
        extra_kwargs = {
            "archived_at": {"help_text": "when the farm was archived (null: it is not)"},
            "archived_by": {"help_text": "who archived it"},
        }


# What a profile's catalogue entry says, read and written alike.
ENDPOINT_CATALOGUE_FIELDS = (
    "key",
    "data_type",
    "writable",
    "min_value",
    "max_value",
    "allowed_values",
    "rpc_method",
    "rpc_param_key",
    "unit",
    "safe_value",
)


class ProfileEndpointSerializer(serializers.ModelSerializer[DeviceProfileEndpoint]):
    class Meta:
        model = DeviceProfileEndpoint
        fields = ("id", *ENDPOINT_CATALOGUE_FIELDS)
        read_only_fields = fields


class DeviceProfileSerializer(serializers.ModelSerializer[DeviceProfile]):
    endpoints = ProfileEndpointSerializer(many=True, read_only=True)

    class Meta:
        model = DeviceProfile
        fields = ("id", "organization", "name", "expected_interval_s", "endpoints")
        read_only_fields = fields


class DeviceSerializer(serializers.ModelSerializer[Device]):
    class Meta:
        model = Device
        fields: tuple[str, ...] = (
            "id",
            "farm",
            "profile",
            "serial_number",
            "name",
            "status",
            "last_seen_at",
            "online",
            "offline_after_s",
        )
        read_only_fields = fields
        extra_kwargs = {
            "last_seen_at": {"help_text": "when its last message arrived (null: never)"},
            "online": {
                "help_text": "false once it sent nothing for its offline window, or never did; "
                "true again with its next message"
            },
        }


def manual_holds_until(endpoint_ids: list[int]) -> dict[int, datetime]:
    """When each held endpoint's manual hold ends (the automation app's hold, read through its
    reverse relation ``manual_hold`` so this app imports nothing of automation); one query."""
    rows = DeviceInstanceEndpoint.objects.filter(
        pk__in=endpoint_ids,
        manual_hold__cancelled_at__isnull=True,
        manual_hold__until__gt=timezone.now(),
    ).values_list("pk", "manual_hold__until")
    return dict(rows)


class _InstanceEndpointListSerializer(serializers.ListSerializer[DeviceInstanceEndpoint]):
    """A page of endpoints reads their holds in one query, not one per endpoint."""

    manual_holds: dict[int, datetime] | None = None

    def to_representation(self, data: Any) -> list[Any]:
        rows = list(data.all() if hasattr(data, "all") else data)
        self.manual_holds = manual_holds_until([e.pk for e in rows])
        return super().to_representation(rows)


class InstanceEndpointSerializer(serializers.ModelSerializer[DeviceInstanceEndpoint]):
    key = serializers.CharField(source="profile_endpoint.key", read_only=True)
    manual_hold_until = serializers.SerializerMethodField(
        help_text="an operator's manual command holds the endpoint against rules until then "
        "(null: rules act on it)"
    )
    last_value = EndpointValueField(
        read_only=True, allow_null=True, help_text="the latest reading (null: none yet)"
    )

    class Meta:
        model = DeviceInstanceEndpoint
        fields = (
            "id",
            "device",
            "profile_endpoint",
            "key",
            "is_enabled",
            "rpc_method_override",
            "rpc_param_key_override",
            "last_value",
            "last_value_at",
            "manual_hold_until",
        )
        read_only_fields = fields
        list_serializer_class = _InstanceEndpointListSerializer

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_manual_hold_until(self, obj: DeviceInstanceEndpoint) -> str | None:
        holds = getattr(self.parent, "manual_holds", None)
        if holds is None:
            holds = manual_holds_until([obj.pk])
        until = holds.get(obj.pk)
        return None if until is None else serializers.DateTimeField().to_representation(until)


def _limit(fields: dict[str, Any], name: str, rows: Any) -> None:
    """Only rows of the caller's scope resolve: another organisation's id does not exist."""
    fields[name].queryset = rows


def _scope(serializer: serializers.BaseSerializer[Any]) -> OrgScope:
    scope: OrgScope = serializer.context.get("scope", frozenset())  # none: nothing resolves
    return scope


class FarmCreateSerializer(StrictModelSerializer[Farm]):
    class Meta:
        model = Farm
        fields = ("organization", "name", "time_zone")
        validators: list[Any] = []  # a taken name is the service's field error on ``name``

    def get_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = super().get_fields()
        _limit(fields, "organization", organizations_visible(scope=_scope(self)))
        return fields


class FarmUpdateSerializer(FixedFieldsMixin, StrictModelSerializer[Farm]):
    fixed_fields = {
        "organization": "a farm stays in its organisation; create a new farm",
        "archived_at": "archive with POST .../archive/",
        "archived_by": "archive with POST .../archive/",
    }

    class Meta:
        model = Farm
        fields = ("name", "time_zone")
        validators: list[Any] = []


class ProfileEndpointInputSerializer(StrictModelSerializer[DeviceProfileEndpoint]):
    class Meta:
        model = DeviceProfileEndpoint
        fields = ENDPOINT_CATALOGUE_FIELDS
        validators: list[Any] = []

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        problems = endpoint_spec_problems(EndpointSpec(**attrs))
        if problems:
            raise serializers.ValidationError({k: [v] for k, v in problems.items()})
        return attrs


def _endpoint_specs(items: list[dict[str, Any]]) -> list[EndpointSpec]:
    """The entries as specs; a key given twice is an error on each entry that has it, keyed
    by position as DRF reports a list's item errors."""
    keys = [item["key"] for item in items]
    repeats = {
        str(i): {"key": ["given twice"]} for i, key in enumerate(keys) if keys.count(key) > 1
    }
    if repeats:
        raise serializers.ValidationError(repeats)
    return [EndpointSpec(**item) for item in items]


class ProfileCreateSerializer(StrictModelSerializer[DeviceProfile]):
    """``organization`` is one of the caller's organisations, or null for a global profile
    (a superuser's, the view decides)."""

    endpoints = ProfileEndpointInputSerializer(  # type: ignore[call-arg]
        many=True, max_length=MAX_ENDPOINTS_PER_REQUEST, required=False, default=list
    )

    class Meta:
        model = DeviceProfile
        fields = ("organization", "name", "expected_interval_s", "endpoints")
        extra_kwargs = {"organization": {"required": True, "allow_null": True}}
        validators: list[Any] = []  # a taken name is the service's field error on ``name``

    def get_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = super().get_fields()
        _limit(fields, "organization", organizations_visible(scope=_scope(self)))
        return fields

    def validate_endpoints(self, items: list[dict[str, Any]]) -> list[EndpointSpec]:
        return _endpoint_specs(items)


class ProfileUpdateSerializer(FixedFieldsMixin, StrictModelSerializer[DeviceProfile]):
    fixed_fields = {
        "endpoints": "add endpoints with POST .../endpoints/",
        "organization": "a profile stays in its organisation (its devices are there)",
    }

    class Meta:
        model = DeviceProfile
        fields = ("name", "expected_interval_s")
        validators: list[Any] = []


class ProfileEndpointsAddSerializer(serializers.Serializer[Any]):
    endpoints = ProfileEndpointInputSerializer(  # type: ignore[call-arg]
        many=True, allow_empty=False, max_length=MAX_ENDPOINTS_PER_REQUEST
    )

    def validate_endpoints(self, items: list[dict[str, Any]]) -> list[EndpointSpec]:
        return _endpoint_specs(items)


class DeviceCreateSerializer(StrictModelSerializer[Device]):
    class Meta:
        model = Device
        fields = ("farm", "profile", "serial_number", "name")

    def get_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = super().get_fields()
        _limit(fields, "farm", farms_visible(scope=_scope(self)))
        _limit(fields, "profile", profiles_visible(scope=_scope(self)))
        return fields


class DeviceUpdateSerializer(FixedFieldsMixin, StrictModelSerializer[Device]):
    fixed_fields = {
        "serial_number": "the serial is the device's MQTT identity; provision a new device",
        "farm": "a device stays on its farm (rules and events point at its endpoints)",
        "profile": "a device keeps its profile; provision a new device for another",
        "status": "change the status with POST .../status/",
        "online": "moved by its messages and its silence",
        "last_seen_at": "set by its messages",
    }

    class Meta:
        model = Device
        fields = ("name", "offline_after_s")


@extend_schema_field({"$ref": "#/components/schemas/DeviceStatusEnum"})
class DeviceStatusField(serializers.ChoiceField):
    """A device status, documented as the one enum the Device component names (several
    components with a ``status`` of their own choices would otherwise collide)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=DeviceStatus.choices, **kwargs)


class DeviceStatusRequestSerializer(serializers.Serializer[Any]):
    status = DeviceStatusField()


class MqttCredentialsSerializer(serializers.Serializer[Any]):
    username = serializers.CharField(help_text="The device's serial number.")
    password = serializers.CharField(
        allow_null=True,
        help_text=(
            "Shown in this answer only, never stored in clear; null in a replay of the "
            "request by its Idempotency-Key: rotate with POST .../credentials/ for a new one."
        ),
    )


class ProvisionedDeviceSerializer(DeviceSerializer):
    status = DeviceStatusField(read_only=True)
    mqtt_credentials = MqttCredentialsSerializer(
        allow_null=True,
        read_only=True,
        help_text="The device's MQTT login, once; null when the broker's logins are managed "
        "outside the product (no DEVICE_CREDENTIALS_BACKEND).",
    )

    class Meta(DeviceSerializer.Meta):
        fields = (*DeviceSerializer.Meta.fields, "mqtt_credentials")
        read_only_fields: tuple[str, ...] = fields


class InstanceEndpointUpdateSerializer(
    FixedFieldsMixin, StrictModelSerializer[DeviceInstanceEndpoint]
):
    fixed_fields = {
        name: "set by the device's profile or its readings"
        for name in ("device", "profile_endpoint", "key", "last_value", "last_value_at")
    }

    class Meta:
        model = DeviceInstanceEndpoint
        fields = ("is_enabled", "rpc_method_override", "rpc_param_key_override")


class TelemetryMessageSerializer(serializers.Serializer[Any]):
    """One device message as an HTTP gateway forwards it: the MQTT payload, verbatim."""

    serial = StrictCharField(max_length=64)
    payload = BoundedJSONField(help_text='The device payload: {"ts": …, "values": {…}}')
    received_at = serializers.DateTimeField(required=False)


class TelemetryBatchSerializer(serializers.Serializer[Any]):
    # many=True makes a ListSerializer, which takes max_length (the stubs type the child).
    messages = TelemetryMessageSerializer(many=True, allow_empty=False, max_length=500)  # type: ignore[call-arg]


class RejectedMessageSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField(help_text="The message's position in the batch.")
    serial = serializers.CharField()
    reason = serializers.ChoiceField(choices=DeviceMessageRejectionReason.choices)
    detail = serializers.CharField()
    message_dropped = serializers.BooleanField(
        help_text="False: the message was kept and only the values named in detail refused."
    )


class IngestResultSerializer(serializers.Serializer[Any]):
    telemetry = serializers.IntegerField(help_text="Messages stored for the first time.")
    events = serializers.IntegerField(
        help_text="Endpoint values accepted from the messages stored for the first time."
    )
    rejections = serializers.IntegerField()
    rejected = RejectedMessageSerializer(many=True)
