"""Manual moves in the admin: an action that asks for a reason and calls a service. Such a
move operates (the ``operator`` role, ``common.operate``): it is offered only to a user who
may operate, and applied only to the selected rows of organisations where they may."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from common.roles import Need


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=400,
        help_text="Why: kept in the row's audit trail with your user name.",
    )


def reason_action(
    *, name: str, title: str, apply: Callable[[Model, str, str], bool]
) -> Callable[[Any, HttpRequest, QuerySet[Any]], TemplateResponse | None]:
    """An admin action that first asks for a required reason on an intermediate page, then
    calls ``apply(row, actor, reason)`` (a service) for each selected row."""

    def action(
        modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]
    ) -> TemplateResponse | None:
        form = ReasonForm(request.POST if "apply" in request.POST else None)
        queryset = modeladmin.rows_meeting(request, Need.OPERATE, queryset)
        if form.is_valid():
            actor = request.user.get_username()
            done = sum(1 for row in queryset if apply(row, actor, form.cleaned_data["reason"]))
            skipped = queryset.count() - done
            level = messages.SUCCESS if not skipped else messages.WARNING
            modeladmin.message_user(
                request, f"{title}: {done} done, {skipped} skipped (state had moved on)", level
            )
            return None
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": title,
            "rows": list(queryset),
            "action": name,
            "form": form,
            "opts": modeladmin.model._meta,
        }
        return TemplateResponse(request, "admin/reason_action.html", context)

    action.__name__ = name
    action.short_description = title  # type: ignore[attr-defined]
    action.allowed_permissions = ("operate",)  # type: ignore[attr-defined]
    return action
