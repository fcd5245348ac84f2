"""Writes take a JSON value only of the type a field names: ``farm: 1.5`` is not farm 1,
``name: 123`` is not "123", ``true`` is not 1, and an id beyond what the column holds is a 400,
not a driver overflow. Every serializer the API reads a request body with uses the strict
fields (checked from the OpenAPI schema, so a new one cannot slip past). A client's body is
JSON only (a form is a 415); the browsable API's own forms, which have no types, still work."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import serializers

from alarms.serializers import AlarmActRequestSerializer
from automation.models import AutomationRule
from automation.serializers import (
    CommandRetryRequestSerializer,
    HoldCancelRequestSerializer,
    ManualCommandRequestSerializer,
    RuleSerializer,
)
from common import serializers as strict
from common.members.serializers import (
    MemberCreateSerializer,
    MemberUpdateSerializer,
    OrganizationSerializer,
)
from devices.serializers import (
    DeviceCreateSerializer,
    DeviceStatusRequestSerializer,
    DeviceUpdateSerializer,
    FarmCreateSerializer,
    FarmUpdateSerializer,
    InstanceEndpointUpdateSerializer,
    ProfileCreateSerializer,
    ProfileEndpointsAddSerializer,
    ProfileUpdateSerializer,
    TelemetryBatchSerializer,
)
from notifications.serializers import (
    ChannelPreferenceSetSerializer,
    ChannelPreferenceUpdateSerializer,
    ContactCreateSerializer,
    ContactUpdateSerializer,
    NotificationActionSerializer,
)
from reminders.models import ReportSubscription
from reminders.serializers import (
    ReminderSettingSerializer,
    ReportRunRequestSerializer,
    ReportSubscriptionSerializer,
)
from reminders.user_messages_api import UserMessageSerializer, UserMessageUpdateSerializer
from rollouts.serializers import RolloutActRequestSerializer, RolloutCreateRequestSerializer
from tests.automation.conftest import make_intent
from tests.automation.test_api import _client, _rule
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]

WRITABLE = (
    RuleSerializer,
    RolloutCreateRequestSerializer,
    RolloutActRequestSerializer,
    CommandRetryRequestSerializer,
    ManualCommandRequestSerializer,
    HoldCancelRequestSerializer,
    TelemetryBatchSerializer,
    ReminderSettingSerializer,
    ReportSubscriptionSerializer,
    ReportRunRequestSerializer,
    NotificationActionSerializer,
    ContactCreateSerializer,
    ContactUpdateSerializer,
    ChannelPreferenceSetSerializer,
    ChannelPreferenceUpdateSerializer,
    OrganizationSerializer,
    MemberCreateSerializer,
    MemberUpdateSerializer,
    FarmCreateSerializer,
    FarmUpdateSerializer,
    ProfileCreateSerializer,
    ProfileUpdateSerializer,
    ProfileEndpointsAddSerializer,
    DeviceCreateSerializer,
    DeviceUpdateSerializer,
    DeviceStatusRequestSerializer,
    InstanceEndpointUpdateSerializer,
    UserMessageSerializer,
    UserMessageUpdateSerializer,
    AlarmActRequestSerializer,
)
# Fields whose DRF class does not coerce across JSON types, or checks what it takes.
STRICT_ENOUGH = (
    strict.StrictCharField,
    strict.StrictSlugField,
    strict.StrictIntegerField,
    strict.StrictFloatField,
    strict.StrictBooleanField,
    strict.StrictUUIDField,
    strict.StrictPrimaryKeyRelatedField,
    strict.BoundedJSONField,
    strict.BoundedDateField,
    strict.LocalTimeField,
    serializers.ChoiceField,  # a value outside the choices is refused, whatever its type
    serializers.DecimalField,  # a number or its text (DRF renders decimals as text)
    serializers.DateTimeField,  # text only; overflowing offsets are refused by DRF
)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"farm": 1.5}, "farm"),
        ({"farm": True}, "farm"),
        ({"farm": "1"}, "farm"),  # JSON has numbers: text is no id
        ({"farm": 10**30}, "farm"),  # beyond a 64-bit column: no such row, not a 500
        ({"trigger_endpoint": -1}, "trigger_endpoint"),
        ({"name": 123}, "name"),
        ({"name": ["cool"]}, "name"),
        ({"is_active": "yes"}, "is_active"),
        ({"is_active": 1}, "is_active"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(
    tenants: tuple[Tenant, Tenant], overrides: dict[str, Any], field: str
) -> None:
    alpha, _ = tenants
    response = _client(alpha.user).post("/api/v1/rules/", _rule(alpha, **overrides), format="json")
    assert response.status_code == 400, response.json()
    assert list(response.json()["fields"]) == [field]
    assert not AutomationRule.objects.exists()


def test_other_writable_fields_are_strict_too(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    setting = {
        "name": "Certificates",
        "farm": alpha.kit.farm.pk,
        "source_type": "document",
        "trigger_type": "date_based",
        "offsets_days": [30, 7.0],
        "send_time": "09:00",
        "template_name": "document_expiry",
        "channels": ["email"],
    }
    refused = client.post("/api/v1/reminder-settings/", setting, format="json")
    assert refused.status_code == 400 and "offsets_days" in refused.json()["fields"]
    alpha.kit.rule()
    command = make_intent(alpha.kit)
    retry = client.post(f"/api/v1/commands/{command.pk}/retry/", {"reason": 7}, format="json")
    assert retry.status_code == 400 and list(retry.json()["fields"]) == ["reason"]
    ingest = {"messages": [{"serial": 12345, "payload": {"values": {"temp": 1}}}]}
    telemetry = client.post("/api/v1/telemetry/", ingest, format="json")
    assert telemetry.status_code == 400 and "messages" in telemetry.json()["fields"]


def test_only_the_browsable_apis_forms_give_numbers_as_text(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    body = {
        "farm": str(alpha.kit.farm.pk),
        "name": "Monthly",
        "recurrence": "monthly",
        "send_time": "07:30",
        "channels": ["email"],
        "active": "true",
    }
    client = _client(alpha.user)
    refused = client.post("/api/v1/report-subscriptions/", body, format="multipart")
    assert refused.status_code == 415 and refused.json()["code"] == "unsupported_media_type"
    created = client.post(  # the browsable API's form, which asks for HTML back
        "/api/v1/report-subscriptions/", body, format="multipart", HTTP_ACCEPT="text/html"
    )
    assert created.status_code == 201, created.content[:300]
    assert ReportSubscription.objects.get().farm_id == alpha.kit.farm.pk


def _request_components(schema: dict[str, Any]) -> set[str]:
    names = set()
    for operations in schema["paths"].values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {})
            for media in content.values():
                ref = media.get("schema", {}).get("$ref", "")
                if ref:
                    name = ref.rsplit("/", 1)[-1].removeprefix("Patched")
                    names.add(name.removesuffix("Request"))  # COMPONENT_SPLIT_REQUEST
    return names


def _loose_fields(serializer: serializers.BaseSerializer[Any], path: str) -> list[str]:
    loose = []
    for name, field in serializer.fields.items():
        if field.read_only:
            continue
        where = f"{path}.{name}"
        if isinstance(field, serializers.ListSerializer):
            loose += _loose_fields(field.child, where)
        elif isinstance(field, serializers.BaseSerializer):
            loose += _loose_fields(field, where)
        elif isinstance(field, serializers.ListField):
            if not isinstance(field.child, STRICT_ENOUGH):
                loose.append(f"{where}[]: {type(field.child).__name__}")
        elif not isinstance(field, STRICT_ENOUGH):
            loose.append(f"{where}: {type(field).__name__}")
    return loose


def test_every_request_body_is_read_with_strict_fields(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    schema = (
        _client(alpha.user)
        .get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
        .json()
    )
    named = {cls.__name__.removesuffix("Serializer").removesuffix("Request") for cls in WRITABLE}
    assert _request_components(schema) == named, "a request serializer is missing from WRITABLE"
    loose = [f for cls in WRITABLE for f in _loose_fields(cls(), cls.__name__)]
    assert loose == []
