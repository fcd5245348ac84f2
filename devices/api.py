"""The devices part of the REST API (``/api/v1/``): farms, devices, profiles and endpoints,
read-only and scoped to the caller's organisations (another organisation's row is a 404)."""

from __future__ import annotations

from django.db.models import QuerySet
from django.urls import include, path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.routers import SimpleRouter

from common.api import ScopedViewSet, int_param, text_param
from common.tenancy import OrgScope
from devices.models import Device, DeviceInstanceEndpoint, DeviceProfile, Farm
from devices.selectors import (
    devices_visible,
    farms_visible,
    instance_endpoints_visible,
    profiles_visible,
)
from devices.serializers import (
    DeviceProfileSerializer,
    DeviceSerializer,
    FarmSerializer,
    InstanceEndpointSerializer,
)


class FarmViewSet(ScopedViewSet):
    serializer_class = FarmSerializer
    queryset = Farm.objects.none()

    def scoped(self, scope: OrgScope) -> QuerySet[Farm]:
        return farms_visible(scope=scope)


@extend_schema(
    parameters=[
        OpenApiParameter("farm", int, description="only this farm's devices"),
        OpenApiParameter("status", str, enum=["active", "maintenance", "retired"]),
    ]
)
class DeviceViewSet(ScopedViewSet):
    serializer_class = DeviceSerializer
    queryset = Device.objects.none()

    def scoped(self, scope: OrgScope) -> QuerySet[Device]:
        rows = devices_visible(scope=scope)
        farm = int_param(self.request, "farm")
        if farm is not None:
            rows = rows.filter(farm_id=farm)
        status_filter = text_param(self.request, "status")
        if status_filter is not None:
            rows = rows.filter(status=status_filter)
        return rows


class DeviceProfileViewSet(ScopedViewSet):
    serializer_class = DeviceProfileSerializer
    queryset = DeviceProfile.objects.none()

    def scoped(self, scope: OrgScope) -> QuerySet[DeviceProfile]:
        return profiles_visible(scope=scope)


@extend_schema(parameters=[OpenApiParameter("device", int, description="only this device")])
class InstanceEndpointViewSet(ScopedViewSet):
    serializer_class = InstanceEndpointSerializer
    queryset = DeviceInstanceEndpoint.objects.none()

    def scoped(self, scope: OrgScope) -> QuerySet[DeviceInstanceEndpoint]:
        rows = instance_endpoints_visible(scope=scope)
        device = int_param(self.request, "device")
        return rows if device is None else rows.filter(device_id=device)


router = SimpleRouter()
router.register("farms", FarmViewSet, basename="farm")
router.register("devices", DeviceViewSet, basename="device")
router.register("profiles", DeviceProfileViewSet, basename="profile")
router.register("endpoints", InstanceEndpointViewSet, basename="endpoint")

urlpatterns = [
    path("", include(router.urls)),
]
