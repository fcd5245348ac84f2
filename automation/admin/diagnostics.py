"""The ``manage.py diagnostics`` tables as an admin page (commands retrying, commands
uncertain, devices with the most ack timeouts, targets cooling down), from the same reads in
``automation.diagnostics`` with the user's organisation scope: staff who may view commands."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from automation.diagnostics import (
    commands_retrying,
    commands_uncertain,
    decisions_suppressed,
    devices_top_timeouts,
    targets_cooling_down,
)
from common.tenancy import organization_scope

WINDOW_HOURS = (1, 6, 24, 72, 168)
DEFAULT_WINDOW_HOURS = 24
LIMIT = 50


def _window_hours(request: HttpRequest) -> int:
    raw = request.GET.get("window_hours", "")
    return int(raw) if raw.isdigit() and int(raw) in WINDOW_HOURS else DEFAULT_WINDOW_HOURS


def diagnostics_view(model_admin: Any, request: HttpRequest) -> TemplateResponse:
    """Rendered for ``model_admin`` (the command admin): its permission, its site's chrome."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    scope = organization_scope(request.user)
    hours = _window_hours(request)
    now = timezone.now()
    since = now - timedelta(hours=hours)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Diagnostics",
        "opts": model_admin.model._meta,
        "window_hours": hours,
        "window_choices": WINDOW_HOURS,
        "since": since,
        "retrying": commands_retrying(scope=scope, limit=LIMIT),
        "uncertain": commands_uncertain(scope=scope, since=since, limit=LIMIT),
        "top_timeouts": devices_top_timeouts(since=since, scope=scope, limit=LIMIT),
        "cooling": targets_cooling_down(now=now, since=since, scope=scope, limit=LIMIT),
        "suppressed": decisions_suppressed(since=since, scope=scope),
    }
    return TemplateResponse(request, "admin/automation/diagnostics.html", context)
