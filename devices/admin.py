"""Support's admin for the devices domain (scoping and reason actions: ``common.admin``). The
device list says at a glance which devices are online (``devices.services.health``), when
each was last seen and what it last reported, in a constant number of queries;
the automation app adds its own columns and the chart (``automation.admin.devices``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from common.admin import OrgScopedAdmin, OrgScopedTabularInline, ReadOnlyAdmin, is_superuser
from common.admin.columns import time_column
from common.tenancy import org_path_register, organization_scope
from devices.display import endpoint_value_text
from devices.models import (
    BridgeProcess,
    BridgeSlot,
    Device,
    DeviceInstanceEndpoint,
    DeviceMessageRejection,
    DeviceProfile,
    DeviceProfileEndpoint,
    DeviceStatus,
    Farm,
)
from devices.services import (
    EndpointSpec,
    device_endpoints_sync,
    device_status_change,
    devices_offline_due_refresh,
    endpoint_spec_problems,
    profile_endpoints_sync,
    profile_fits_farm,
)

DeviceAction = Callable[[Any, HttpRequest, QuerySet[Any]], None]

# Endpoints are picked in forms (a device's inline, a rule's trigger and target, searched by
# ``DeviceInstanceEndpointAdmin``): they reach their organisation through their device, a
# profile's endpoints through the devices using the profile (global profiles' included).
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
    list_display = ("id", "name", "organization", "time_zone", "archived_at")
    list_filter = ("organization",)
    search_fields = ("name",)


def _global_for_staff(request: HttpRequest, profile: DeviceProfile | None) -> bool:
    """A global profile (no organisation) is offered to every organisation: staff see it,
    only a superuser changes it."""
    return profile is not None and profile.organization_id is None and not is_superuser(request)


# Narrow inputs, so a catalogue row of ten fields fits a 1400 px screen.
COMPACT_INPUTS: dict[type[models.Field[Any, Any]], dict[str, Any]] = {
    models.CharField: {"widget": forms.TextInput(attrs={"size": 12})},
    models.FloatField: {"widget": forms.NumberInput(attrs={"style": "width: 6em"})},
    models.JSONField: {"widget": forms.Textarea(attrs={"rows": 1, "cols": 12})},
}


class ProfileEndpointForm(forms.ModelForm):  # type: ignore[type-arg]
    """A catalogue row passes the checks the API makes (``endpoint_spec_problems``): a safe
    value the endpoint would refuse is never saved from here either."""

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if not {"key", "data_type"} <= set(cleaned):
            return cleaned  # already an error on the field
        names = set(EndpointSpec.__dataclass_fields__) & set(cleaned)
        spec = EndpointSpec(**{name: cleaned[name] for name in names})
        for name, problem in endpoint_spec_problems(spec).items():
            if name in self.fields and name not in self.errors:
                self.add_error(name, problem)
        return cleaned


class ProfileEndpointInline(OrgScopedTabularInline):
    model = DeviceProfileEndpoint
    form = ProfileEndpointForm
    extra = 0
    verbose_name, verbose_name_plural = "endpoint", "endpoints"
    fields = (
        "key",
        "data_type",
        "unit",
        "writable",
        "min_value",
        "max_value",
        "allowed_values",
        "rpc_method",
        "rpc_param_key",
        "safe_value",
    )
    formfield_overrides = COMPACT_INPUTS
    input_sizes = {"key": 10, "unit": 4, "rpc_method": 8, "rpc_param_key": 8}

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if field is not None and db_field.name in self.input_sizes:
            field.widget.attrs["size"] = self.input_sizes[db_field.name]
        return field

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not _global_for_staff(request, obj) and super().has_add_permission(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not _global_for_staff(request, obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not _global_for_staff(request, obj) and super().has_delete_permission(request, obj)


@admin.register(DeviceProfile)
class DeviceProfileAdmin(OrgScopedAdmin):
    """A profile is its organisation's (a change reaches every device on it, all of that
    organisation) or global: listed to every staff user, changed only by superusers. A
    profile stays in the organisation it was made for."""

    org_path = "organization_id"
    list_display = ("id", "name", "organization")
    list_filter = ("organization",)
    search_fields = ("name",)
    inlines = (ProfileEndpointInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows = super().get_queryset(request)
        if organization_scope(request.user) is None:
            return rows
        return rows | self.model._default_manager.filter(organization__isnull=True)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_readonly_fields(request, obj)
        return fields if obj is None else (*fields, "organization")

    def get_form(
        self, request: HttpRequest, obj: Any | None = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm[Any]]:
        """Staff make profiles for one of their organisations: a global one is a superuser's."""
        form = super().get_form(request, obj, change, **kwargs)
        if obj is None and not is_superuser(request) and "organization" in form.base_fields:
            form.base_fields["organization"].required = True
        return form

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not _global_for_staff(request, obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not _global_for_staff(request, obj) and super().has_delete_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """A crafted POST past the form's required organisation is refused (403, rolled back)."""
        if _global_for_staff(request, obj):
            raise PermissionDenied("only a superuser makes or changes a global profile")
        super().save_model(request, obj, form, change)
        if "expected_interval_s" in form.changed_data:  # its devices' offline times follow
            devices_offline_due_refresh(
                devices=Device.objects.filter(profile=obj, offline_after_s__isnull=True)
            )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """An endpoint added to the profile reaches the profile's devices."""
        super().save_related(request, form, formsets, change)
        profile_endpoints_sync(profile=form.instance)


class DeviceForm(forms.ModelForm):  # type: ignore[type-arg]
    """A device's profile is a global one or its farm's organisation's (as provisioning
    says), whatever profiles the user may pick."""

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        farm, profile = cleaned.get("farm"), cleaned.get("profile")
        if farm and profile and not profile_fits_farm(profile=profile, farm=farm):
            self.add_error("profile", "not a profile of the farm's organisation, nor global")
        return cleaned


def reported_value(endpoint: DeviceInstanceEndpoint) -> str:
    """The endpoint's last reading in its type and unit, as every page shows values."""
    return endpoint_value_text(endpoint.last_value, endpoint.profile_endpoint)


@admin.register(DeviceInstanceEndpoint)
class DeviceInstanceEndpointAdmin(ReadOnlyAdmin):
    """Endpoints listed and searched by ``SERIAL · key`` (the rule form's pickers search
    here, within the user's organisations); they are edited on their device's page."""

    org_path = "device__farm__organization_id"
    list_display = (
        "__str__",
        "data_type",
        "writable",
        "is_enabled",
        "last_reading",
        "last_value_at",
    )
    list_select_related = ("device", "profile_endpoint")
    search_fields = ("device__serial_number", "device__name", "profile_endpoint__key")
    ordering = ("device__serial_number", "profile_endpoint__key")

    @admin.display(description="type")
    def data_type(self, obj: DeviceInstanceEndpoint) -> str:
        return obj.profile_endpoint.data_type

    @admin.display(description="writable", boolean=True)
    def writable(self, obj: DeviceInstanceEndpoint) -> bool:
        return obj.profile_endpoint.writable

    @admin.display(description="last value")
    def last_reading(self, obj: DeviceInstanceEndpoint) -> str:
        return reported_value(obj)

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Any], term: str) -> Any:
        """``SERIAL · key`` as shown finds the endpoint too."""
        serial, dot, key = term.partition("·")
        if dot and serial.strip() and key.strip():
            rows = queryset.filter(
                device__serial_number__iexact=serial.strip(),
                profile_endpoint__key__iexact=key.strip(),
            )
            return rows, False
        return super().get_search_results(request, queryset, term)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Whoever may view devices may view (and pick) their endpoints."""
        return super().has_view_permission(request, obj) or request.user.has_perm(
            "devices.view_device"
        )


class InstanceEndpointInline(OrgScopedTabularInline):
    """A device's endpoints, each row fitting a 1400 px screen: the overrides' inputs are
    narrow (rarely set, a method or a key name) and the last value reads in its unit."""

    model = DeviceInstanceEndpoint
    extra = 0
    fields = (
        "profile_endpoint",
        "is_enabled",
        "rpc_method_override",
        "rpc_param_key_override",
        "last_reading",
        "last_value_at",
    )
    readonly_fields = ("last_reading", "last_value_at")
    formfield_overrides = COMPACT_INPUTS

    @admin.display(description="last value")
    def last_reading(self, obj: DeviceInstanceEndpoint) -> str:
        return reported_value(obj) if obj.pk else ""


@admin.register(Device)
class DeviceAdmin(OrgScopedAdmin):
    org_path = "farm__organization_id"
    form = DeviceForm
    # The key columns fit a 1400 px screen with the menu, the filters and automation's
    # open-commands column: the name under the serial, last seen in short.
    list_display: tuple[str, ...] = (
        "device",
        "farm",
        "profile",
        "status",
        "online",
        "seen",
        "reported",
    )
    list_select_related = ("farm", "profile")
    list_filter = ("status", "online", "farm")
    search_fields = ("serial_number", "name")
    readonly_fields = ("online", "last_seen_at")
    inlines = (InstanceEndpointInline,)
    actions = (
        _device_status_action(DeviceStatus.ACTIVE, "Set active"),
        _device_status_action(DeviceStatus.MAINTENANCE, "Put in maintenance"),
        _device_status_action(DeviceStatus.RETIRED, "Retire"),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """The endpoints and their keys in one more query for the whole page."""
        endpoints = DeviceInstanceEndpoint.objects.select_related("profile_endpoint").order_by(
            "profile_endpoint__key"
        )
        return super().get_queryset(request).prefetch_related(Prefetch("endpoints", endpoints))

    @admin.display(description="device", ordering="serial_number")
    def device(self, obj: Device) -> SafeString:
        serial = format_html('<span style="white-space: nowrap">{}</span>', obj.serial_number)
        if not obj.name:
            return serial
        return format_html("{}<br><small>{}</small>", serial, obj.name)

    seen = time_column("last_seen_at", "seen")

    @admin.display(description="last reported")
    def reported(self, obj: Device) -> SafeString:
        return format_html_join(
            mark_safe("<br>"),
            '<span style="white-space: nowrap">{}={}</span>',
            (
                (e.profile_endpoint.key, reported_value(e))
                for e in obj.endpoints.all()
                if e.last_value_at is not None
            ),
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        """A device's status changes only through its actions (the status service publishes
        ``DeviceStatusChanged``), never as a field edit."""
        return (*self.readonly_fields, "status") if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """A changed offline window or profile moves the device's offline time with it."""
        super().save_model(request, obj, form, change)
        devices_offline_due_refresh(devices=Device.objects.filter(pk=obj.pk))

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


@admin.register(BridgeSlot)
class BridgeSlotAdmin(ReadOnlyAdmin):
    list_display = ("slot", "client_id", "holder", "lease_until", "connected", "beat_at")


@admin.register(BridgeProcess)
class BridgeProcessAdmin(ReadOnlyAdmin):
    list_display = ("holder", "seen_at")
