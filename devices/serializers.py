"""API shapes of the devices domain (read-only: devices are provisioned by support)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from common.serializers import BoundedJSONField, StrictCharField
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    DeviceMessageRejectionReason,
    DeviceProfile,
    DeviceProfileEndpoint,
    Farm,
)


class FarmSerializer(serializers.ModelSerializer[Farm]):
    class Meta:
        model = Farm
        fields = ("id", "organization", "name", "time_zone", "created_at")
        read_only_fields = fields


class ProfileEndpointSerializer(serializers.ModelSerializer[DeviceProfileEndpoint]):
    class Meta:
        model = DeviceProfileEndpoint
        fields = (
            "id",
            "key",
            "data_type",
            "writable",
            "min_value",
            "max_value",
            "allowed_values",
            "rpc_method",
            "rpc_param_key",
        )
        read_only_fields = fields


class DeviceProfileSerializer(serializers.ModelSerializer[DeviceProfile]):
    endpoints = ProfileEndpointSerializer(many=True, read_only=True)

    class Meta:
        model = DeviceProfile
        fields = ("id", "name", "endpoints")
        read_only_fields = fields


class DeviceSerializer(serializers.ModelSerializer[Device]):
    class Meta:
        model = Device
        fields = ("id", "farm", "profile", "serial_number", "name", "status", "last_seen_at")
        read_only_fields = fields


class InstanceEndpointSerializer(serializers.ModelSerializer[DeviceInstanceEndpoint]):
    key = serializers.CharField(source="profile_endpoint.key", read_only=True)

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
        )
        read_only_fields = fields


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
    events = serializers.IntegerField()
    rejections = serializers.IntegerField()
    rejected = RejectedMessageSerializer(many=True)
