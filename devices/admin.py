"""Support's admin for the devices domain (scoping and reason actions: ``common.admin``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from common.admin import OrgScopedAdmin, OrgScopedTabularInline, ReadOnlyAdmin, is_superuser
from common.tenancy import org_path_register
from devices.models import (
    BridgeHeartbeat,
    Device,
    DeviceInstanceEndpoint,
    DeviceMessageRejection,
    DeviceProfile,
    DeviceProfileEndpoint,
    DeviceStatus,
    Farm,
)
from devices.services import device_endpoints_sync, device_status_change, profile_endpoints_sync

DeviceAction = Callable[[Any, HttpRequest, QuerySet[Any]], None]

# Endpoints have no admin list of their own but are picked in forms (a device's inline, a
# rule's trigger and target): they reach their organisation through their device, a profile's
# endpoints through the devices using the profile.
org_path_register(DeviceInstanceEndpoint, "device__farm__organization_id")
org_path_register(DeviceProfileEndpoint, "profile__devices__farm__organization_id")


def _device_status_action(status: str, title: str) -> DeviceAction:
    """Support moves a device through the status service, which publishes
    ``DeviceStatusChanged``."""

    def action(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        actor = request.user.get_username()
        ids = list(queryset.values_list("pk", flat=True))
        done = sum(device_status_change(device_id=pk, status=status, actor=actor) for pk in ids)
        modeladmin.message_user(
            request, f"{title}: {done} changed, {len(ids) - done} already so", messages.SUCCESS
        )

    action.__name__ = f"device_status_{status}"
    action.short_description = title  # type: ignore[attr-defined]
    action.allowed_permissions = ("change",)  # type: ignore[attr-defined]
    return action


@admin.register(Farm)
class FarmAdmin(OrgScopedAdmin):
    org_path = "organization_id"
    list_display = ("id", "name", "organization", "time_zone")
    list_filter = ("organization",)
    search_fields = ("name",)


class ProfileEndpointInline(OrgScopedTabularInline):
    model = DeviceProfileEndpoint
    extra = 0


@admin.register(DeviceProfile)
class DeviceProfileAdmin(OrgScopedAdmin):
    """The profile catalogue is shared by every organisation (a change reaches every device
    on the profile): staff see the profiles their devices use; only superusers change it."""

    org_path = "devices__farm__organization_id"
    list_display = ("id", "name")
    inlines = (ProfileEndpointInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).distinct()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """An endpoint added to the profile reaches the profile's devices."""
        super().save_related(request, form, formsets, change)
        profile_endpoints_sync(profile=form.instance)


class InstanceEndpointInline(OrgScopedTabularInline):
    model = DeviceInstanceEndpoint
    extra = 0
    readonly_fields = ("last_value", "last_value_at")


@admin.register(Device)
class DeviceAdmin(OrgScopedAdmin):
    org_path = "farm__organization_id"
    list_display = ("id", "serial_number", "name", "farm", "profile", "status", "last_seen_at")
    list_filter = ("status", "farm")
    search_fields = ("serial_number", "name")
    readonly_fields = ("last_seen_at",)
    inlines = (InstanceEndpointInline,)
    actions = (
        _device_status_action(DeviceStatus.ACTIVE, "Set active"),
        _device_status_action(DeviceStatus.MAINTENANCE, "Put in maintenance"),
        _device_status_action(DeviceStatus.RETIRED, "Retire"),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        """A device's status changes only through its actions (the status service publishes
        ``DeviceStatusChanged``), never as a field edit."""
        return (*self.readonly_fields, "status") if obj is not None else self.readonly_fields

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """A new device, or one moved to another profile, gets the profile's endpoints: after
        the inline rows are saved, so an endpoint added by hand is kept, not doubled."""
        super().save_related(request, form, formsets, change)
        device_endpoints_sync(device=form.instance)


@admin.register(DeviceMessageRejection)
class DeviceMessageRejectionAdmin(ReadOnlyAdmin):
    list_display = ("id", "serial_number", "kind", "reason_code", "detail", "received_at")
    list_filter = ("kind", "reason_code")
    search_fields = ("serial_number",)


@admin.register(BridgeHeartbeat)
class BridgeHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ("client_id", "connected", "beat_at")
