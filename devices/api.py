"""The devices part of the REST API (``/api/v1/``): farms (archived ones left out of the list
unless ``?archived=true``), device profiles with their endpoint catalogue, devices
(provisioning with a one-time MQTT login, rotation, status moves, online or not, each one's
offline window) and their endpoints with their readings per time bucket (``series/``), and a
farm's raw readings as CSV (``readings/export/``, ``devices.export_api``). Rows
are scoped to the caller's organisations (another organisation's row is a 404); what each
role may do is each view's ``required_roles`` (``common.permissions``). Profiles are their
organisation's, or global (read-only but for superusers)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import django_filters
from django.db.models import QuerySet
from django.urls import include, path
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.settings import api_settings

from common.api import (
    NO_STORE,
    ScopedViewSet,
    idempotent,
    secret_blanked,
    valid_data,
)
from common.errors import BrokerUnavailable, Conflict
from common.filters import IdFilter, StrictBooleanFilter
from common.permissions import require_organization
from common.renderers import CsvErrorsAsJson
from common.roles import action_roles
from common.tenancy import OrgScope
from devices import schema_docs
from devices.export_api import ReadingsExportView
from devices.models import (
    DEFAULT_EXPECTED_INTERVAL_S,
    Device,
    DeviceInstanceEndpoint,
    DeviceProfile,
    DeviceStatus,
    Farm,
)
from devices.selectors import (
    devices_visible,
    farms_visible,
    instance_endpoints_visible,
    profiles_visible,
)
from devices.serializers import (
    DeviceCreateSerializer,
    DeviceProfileSerializer,
    DeviceSerializer,
    DeviceStatusRequestSerializer,
    DeviceUpdateSerializer,
    FarmCreateSerializer,
    FarmSerializer,
    FarmUpdateSerializer,
    InstanceEndpointSerializer,
    InstanceEndpointUpdateSerializer,
    MqttCredentialsSerializer,
    ProfileCreateSerializer,
    ProfileEndpointsAddSerializer,
    ProfileUpdateSerializer,
    ProvisionedDeviceSerializer,
)
from devices.series_api import (
    SERIES_RESPONSES,
    SeriesCsvRenderer,
    SeriesQuerySerializer,
    endpoint_series_answer,
)
from devices.services import (
    ProvisioningRefused,
    device_offline_after_set,
    device_provision,
    device_rename,
    device_status_change,
    farm_archive,
    farm_create,
    farm_update,
    instance_endpoint_configure,
    profile_create,
    profile_endpoints_add,
    profile_expected_interval_set,
    profile_rename,
)
from devices.services.credentials import CredentialsUnavailable, device_credentials_rotate

_BROKER_DOWN = OpenApiResponse(description="broker_unavailable: the broker did not confirm")


@contextmanager
def _refusals() -> Iterator[None]:
    """The services' refusals as the API's answers: a field error, or a 503 when the broker
    did not confirm a login change (nothing was changed)."""
    try:
        yield
    except ProvisioningRefused as exc:
        raise ValidationError({exc.field: [exc.message]}) from None
    except CredentialsUnavailable:
        raise BrokerUnavailable() from None


# Reading is for viewers; every write of the devices part configures the farm.


class FarmFilter(django_filters.FilterSet):
    archived = StrictBooleanFilter(
        method="filter_archived",
        help_text="true: only archived farms; false or absent: only farms in use (archived "
        "farms are left out of the list unless asked for; each stays readable by its id)",
    )

    class Meta:
        model = Farm
        fields = ("archived",)

    def filter_archived(self, rows: QuerySet[Farm], name: str, value: bool) -> QuerySet[Farm]:
        return rows.filter(archived_at__isnull=not value)


@schema_docs.FARMS
class FarmViewSet(ScopedViewSet):
    """The caller's farms; an admin creates, changes and archives them."""

    serializer_class = FarmSerializer
    queryset = Farm.objects.none()
    filterset_class = FarmFilter
    required_roles = action_roles(configure=("create", "partial_update", "archive"))
    organization_path = "organization.pk"

    def scoped(self, scope: OrgScope) -> QuerySet[Farm]:
        return farms_visible(scope=scope)

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """The list leaves archived farms out unless ``?archived=`` says otherwise; a farm
        is found by its id whether archived or not."""
        rows: QuerySet[Any] = super().filter_queryset(queryset)
        asked = self.request.query_params.get("archived", "")
        if self.action == "list" and not asked:
            rows = rows.filter(archived_at__isnull=True)
        return rows

    @idempotent(request=FarmCreateSerializer, responses={201: FarmSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = valid_data(FarmCreateSerializer(data=request.data, context=self.write_context()))
        require_organization(request, self, data["organization"].pk)
        with _refusals():
            farm = farm_create(**data)
        return Response(FarmSerializer(farm).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=FarmUpdateSerializer, responses=FarmSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        farm = self.get_object()
        data = valid_data(FarmUpdateSerializer(farm, data=request.data, partial=True))
        with _refusals():
            farm = farm_update(farm=farm, **data)
        return Response(FarmSerializer(farm).data)

    @idempotent(request=None, responses={200: FarmSerializer})
    @action(detail=True, methods=["post"])
    def archive(self, request: Request, pk: str | None = None) -> Response:
        """Archive the farm: it leaves ``GET /farms/`` (``?archived=true`` lists it), its
        rules stop deciding, its devices keep their history. Archiving an archived farm is a
        no-op (200; the first archive's time and actor stay)."""
        farm: Farm = self.get_object()
        farm_archive(farm_id=farm.pk, actor=request.user.get_username())
        return Response(FarmSerializer(self.get_object()).data)


class DeviceFilter(django_filters.FilterSet):
    farm = IdFilter(field_name="farm_id", help_text="only this farm's devices")
    status = django_filters.ChoiceFilter(choices=DeviceStatus.choices)
    online = StrictBooleanFilter(
        field_name="online",
        help_text="true: only devices online; false: only those offline or never heard from",
    )

    class Meta:
        model = Device
        fields = ("farm", "status", "online")


@schema_docs.DEVICES
class DeviceViewSet(ScopedViewSet):
    """The devices on the caller's farms; an admin provisions them, rotates their MQTT login
    and moves their status."""

    serializer_class = DeviceSerializer
    queryset = Device.objects.none()
    filterset_class = DeviceFilter
    required_roles = action_roles(
        configure=("create", "partial_update", "credentials", "change_status")
    )
    organization_path = "farm.organization_id"

    def scoped(self, scope: OrgScope) -> QuerySet[Device]:
        return devices_visible(scope=scope)

    @idempotent(
        request=DeviceCreateSerializer,
        responses={201: ProvisionedDeviceSerializer, 503: _BROKER_DOWN},
        stored=secret_blanked("mqtt_credentials", "password"),  # rotate for a new one
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Provision a device: its profile's endpoints and its MQTT login, in one transaction.
        The password is in this answer only; a replay by Idempotency-Key omits it."""
        data = valid_data(DeviceCreateSerializer(data=request.data, context=self.write_context()))
        require_organization(request, self, data["farm"].organization_id)
        with _refusals():
            made = device_provision(**data)
        login = None if made.credentials is None else asdict(made.credentials)
        body = {**DeviceSerializer(made.device).data, "mqtt_credentials": login}
        return Response(body, status=status.HTTP_201_CREATED, headers=NO_STORE)

    @extend_schema(request=DeviceUpdateSerializer, responses=DeviceSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        device: Device = self.get_object()
        data = valid_data(DeviceUpdateSerializer(device, data=request.data, partial=True))
        if "name" in data:
            device = device_rename(device=device, name=data["name"])
        if "offline_after_s" in data:
            device = device_offline_after_set(
                device=device, offline_after_s=data["offline_after_s"]
            )
        return Response(DeviceSerializer(device).data)

    @extend_schema(
        request=None,
        responses={
            201: MqttCredentialsSerializer,
            409: OpenApiResponse(description="retired, or no credentials backend"),
            503: _BROKER_DOWN,
        },
    )
    @action(detail=True, methods=["post"])
    def credentials(self, request: Request, pk: str | None = None) -> Response:
        """A new MQTT password for the device, in this answer only; the old one stops working
        at once. Not replayed by Idempotency-Key (a stored replay would keep the password):
        a retry rotates again, and the last answer's password is the one that works."""
        device: Device = self.get_object()
        if device.status == DeviceStatus.RETIRED:
            raise Conflict("A retired device has no login; activate it first.")
        with _refusals():
            login = device_credentials_rotate(device=device)
        if login is None:
            detail = "No credentials backend is configured: the broker's logins are managed "
            raise Conflict(detail + "outside the product.", code="credentials_not_managed")
        return Response(asdict(login), status=status.HTTP_201_CREATED, headers=NO_STORE)

    @idempotent(
        request=DeviceStatusRequestSerializer,
        responses={200: DeviceSerializer, 503: _BROKER_DOWN},
    )
    @action(detail=True, methods=["post"], url_path="status", url_name="status")
    def change_status(self, request: Request, pk: str | None = None) -> Response:
        """Move the device to active, maintenance or retired (a no-op if it is there
        already); publishes DeviceStatusChanged. Retiring revokes its MQTT login."""
        device: Device = self.get_object()
        data = valid_data(DeviceStatusRequestSerializer(data=request.data))
        with _refusals():
            device_status_change(
                device_id=device.pk, status=data["status"], actor=request.user.get_username()
            )
        return Response(DeviceSerializer(self.get_object()).data)


@schema_docs.PROFILES
class DeviceProfileViewSet(ScopedViewSet):
    """A caller sees their organisations' profiles and the global ones (no organisation);
    another organisation's profile is a 404, so a taken name is only ever one of theirs. An
    organisation's profile is its admins' to change, a global one a superuser's (403)."""

    serializer_class = DeviceProfileSerializer
    queryset = DeviceProfile.objects.none()
    required_roles = action_roles(configure=("create", "partial_update", "endpoints_add"))
    organization_path = "organization.pk"  # a global profile (none): superusers only

    def scoped(self, scope: OrgScope) -> QuerySet[DeviceProfile]:
        return profiles_visible(scope=scope)

    def _shown(self, profile: DeviceProfile, code: int = status.HTTP_200_OK) -> Response:
        fresh = DeviceProfile.objects.prefetch_related("endpoints").get(pk=profile.pk)
        return Response(DeviceProfileSerializer(fresh).data, status=code)

    @idempotent(request=ProfileCreateSerializer, responses={201: DeviceProfileSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = valid_data(ProfileCreateSerializer(data=request.data, context=self.write_context()))
        organization = data["organization"]
        require_organization(request, self, None if organization is None else organization.pk)
        with _refusals():
            profile = profile_create(
                organization=organization,
                name=data["name"],
                endpoints=data["endpoints"],
                expected_interval_s=data.get("expected_interval_s", DEFAULT_EXPECTED_INTERVAL_S),
            )
        return self._shown(profile, status.HTTP_201_CREATED)

    @extend_schema(request=ProfileUpdateSerializer, responses=DeviceProfileSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        profile = self.get_object()
        data = valid_data(ProfileUpdateSerializer(profile, data=request.data, partial=True))
        with _refusals():
            if "name" in data:
                profile_rename(profile=profile, name=data["name"])
        if "expected_interval_s" in data:
            profile_expected_interval_set(
                profile=profile, expected_interval_s=data["expected_interval_s"]
            )
        return self._shown(profile)

    @idempotent(request=ProfileEndpointsAddSerializer, responses={201: DeviceProfileSerializer})
    @action(detail=True, methods=["post"], url_path="endpoints", url_name="endpoints")
    def endpoints_add(self, request: Request, pk: str | None = None) -> Response:
        """Add entries to the catalogue; every device of the profile gets them at once."""
        profile = self.get_object()
        data = valid_data(ProfileEndpointsAddSerializer(data=request.data))
        with _refusals():
            profile_endpoints_add(profile=profile, endpoints=data["endpoints"])
        return self._shown(profile, status.HTTP_201_CREATED)


class InstanceEndpointFilter(django_filters.FilterSet):
    device = IdFilter(field_name="device_id", help_text="only this device's endpoints")

    class Meta:
        model = DeviceInstanceEndpoint
        fields = ("device",)


@schema_docs.ENDPOINTS
class InstanceEndpointViewSet(CsvErrorsAsJson, ScopedViewSet):
    """Each device's endpoints with their latest reading and their readings over time."""

    serializer_class = InstanceEndpointSerializer
    queryset = DeviceInstanceEndpoint.objects.none()
    filterset_class = InstanceEndpointFilter
    required_roles = action_roles(
        read=("list", "retrieve", "series"), configure=("partial_update",)
    )
    organization_path = "device.farm.organization_id"

    def scoped(self, scope: OrgScope) -> QuerySet[DeviceInstanceEndpoint]:
        return instance_endpoints_visible(scope=scope)

    @extend_schema(parameters=[SeriesQuerySerializer], responses=SERIES_RESPONSES)
    @action(
        detail=True,
        methods=["get"],
        renderer_classes=[*api_settings.DEFAULT_RENDERER_CLASSES, SeriesCsvRenderer],
    )
    def series(self, request: Request, pk: str | None = None) -> Response:
        """The endpoint's readings per time bucket (min, max, avg, last, count), computed by
        the database; empty buckets are left out (``devices.series``); ``?format=csv``
        answers the same buckets as CSV."""
        endpoint = self.get_object()
        body = endpoint_series_answer(endpoint, request.query_params, now=timezone.now())
        return Response(body)

    @extend_schema(request=InstanceEndpointUpdateSerializer, responses=InstanceEndpointSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        endpoint = self.get_object()
        data = valid_data(
            InstanceEndpointUpdateSerializer(endpoint, data=request.data, partial=True)
        )
        with _refusals():
            endpoint = instance_endpoint_configure(endpoint=endpoint, changes=data)
        return Response(InstanceEndpointSerializer(endpoint).data)


router = SimpleRouter()
router.register("farms", FarmViewSet, basename="farm")
router.register("devices", DeviceViewSet, basename="device")
router.register("profiles", DeviceProfileViewSet, basename="profile")
router.register("endpoints", InstanceEndpointViewSet, basename="endpoint")

urlpatterns = [
    path("", include(router.urls)),
    path("readings/export/", ReadingsExportView.as_view(), name="readings-export"),
]
