"""Manual control on a device's admin page: each writable endpoint with its hold, a form that
sets its value and one that cancels its hold, both asking for a reason and calling
``automation.services.manual`` (the API's service: the same gates, latest-wins and hold).
The set-value form carries a key made when it is shown, so a double submit makes one
command."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from automation.models import EndpointManualHold
from automation.services.manual import (
    ManualCommandRefused,
    endpoint_command_manual,
    endpoint_hold_cancel,
)
from devices.display import endpoint_value_text
from devices.models import Device, DeviceInstanceEndpoint


def _parsed(text: str) -> Any:
    """A value as typed: JSON (``true``, ``21.5``, ``"auto"``), else the text itself (``auto``)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class ManualCommandForm(forms.Form):
    endpoint = forms.TypedChoiceField(coerce=int)
    value = forms.CharField(
        max_length=200, help_text='JSON as the device reports it: true, 21.5, "auto" (or auto)'
    )
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=400,
        help_text="Why: kept in the command's audit trail with your user name.",
    )
    request_key = forms.CharField(widget=forms.HiddenInput, max_length=64)


class HoldCancelForm(forms.Form):
    endpoint = forms.TypedChoiceField(coerce=int)
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=400,
        help_text="Why the rules may act again now: kept with your user name.",
    )


def _writable(device: Device) -> list[DeviceInstanceEndpoint]:
    return list(
        DeviceInstanceEndpoint.objects.filter(device=device, profile_endpoint__writable=True)
        .select_related("profile_endpoint")
        .order_by("profile_endpoint__key")
    )


def _holds(endpoints: list[DeviceInstanceEndpoint]) -> dict[int, EndpointManualHold]:
    """The active holds of these endpoints, in one query."""
    rows = EndpointManualHold.objects.filter(
        endpoint__in=endpoints, cancelled_at__isnull=True, until__gt=timezone.now()
    ).select_related("requested_by")
    return {h.endpoint_id: h for h in rows}


def manual_control_html(device: Device) -> SafeString:
    """The device page's table: each writable endpoint, its last value and its hold."""
    endpoints = _writable(device)
    if not endpoints:
        return format_html("{}", "no writable endpoint")
    holds = _holds(endpoints)

    def hold_text(endpoint: DeviceInstanceEndpoint) -> str:
        hold = holds.get(endpoint.pk)
        if hold is None:
            return "rules act"
        who = hold.requested_by.get_username() if hold.requested_by else "?"
        until = f"{hold.until:%Y-%m-%d %H:%M:%S} UTC"
        return f"held until {until} by {who} (command #{hold.command_id})"

    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                e.profile_endpoint.key,
                endpoint_value_text(e.last_value, e.profile_endpoint),
                hold_text(e),
            )
            for e in endpoints
        ),
    )
    base = reverse("admin:devices_device_change", args=[device.pk])
    return format_html(
        "<table><thead><tr><th>endpoint</th><th>last value</th><th>manual hold</th></tr></thead>"
        '<tbody>{}</tbody></table><p><a class="button" href="{}manual-command/">Set a value…</a> '
        '<a class="button" href="{}hold-cancel/">Cancel a hold…</a></p>',
        rows,
        base,
        base,
    )


def _device(model_admin: Any, request: HttpRequest, object_id: str) -> Device:
    """The device, if the user may see it (scoped, else 404) and operate it (the ``operator``
    role in its organisation, else 403)."""
    device = model_admin.get_object(request, object_id)
    if device is None:
        raise Http404("no such device")
    if not model_admin.has_operate_permission(request, device):
        raise PermissionDenied
    return device


def _page(
    model_admin: Any, request: HttpRequest, device: Device, title: str, form: forms.Form
) -> TemplateResponse:
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "device": device,
        "form": form,
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/automation/manual_control.html", context)


def manual_command_view(model_admin: Any, request: HttpRequest, object_id: str) -> HttpResponse:
    device = _device(model_admin, request, object_id)
    choices = [(e.pk, e.profile_endpoint.key) for e in _writable(device)]
    if request.method != "POST":
        form = ManualCommandForm(initial={"request_key": uuid.uuid4().hex})
    else:
        form = ManualCommandForm(request.POST)
    form.fields["endpoint"].choices = choices  # type: ignore[attr-defined]
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            result = endpoint_command_manual(
                endpoint_id=data["endpoint"],
                value=_parsed(data["value"].strip()),
                actor=request.user,
                reason=data["reason"],
                request_key=data["request_key"],
            )
        except ManualCommandRefused as exc:
            form.add_error("value" if exc.field == "value" else None, exc.message)
        else:
            done = "sent" if result.created else "already asked for (same form)"
            model_admin.message_user(
                request, f"Manual command #{result.command.pk} {done}.", messages.SUCCESS
            )
            return HttpResponseRedirect(reverse("admin:devices_device_change", args=[device.pk]))
    return _page(model_admin, request, device, f"Set a value on {device.serial_number}", form)


def hold_cancel_view(model_admin: Any, request: HttpRequest, object_id: str) -> HttpResponse:
    device = _device(model_admin, request, object_id)
    endpoints = _writable(device)
    held = _holds(endpoints)
    choices = [(e.pk, e.profile_endpoint.key) for e in endpoints if e.pk in held]
    form = HoldCancelForm(request.POST if request.method == "POST" else None)
    form.fields["endpoint"].choices = choices  # type: ignore[attr-defined]
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        cancelled = endpoint_hold_cancel(
            endpoint_id=data["endpoint"], actor=request.user, reason=data["reason"]
        )
        text = "Hold cancelled: the rules act again." if cancelled else "No hold was active."
        model_admin.message_user(request, text, messages.SUCCESS if cancelled else messages.WARNING)
        return HttpResponseRedirect(reverse("admin:devices_device_change", args=[device.pk]))
    return _page(model_admin, request, device, f"Cancel a hold on {device.serial_number}", form)
