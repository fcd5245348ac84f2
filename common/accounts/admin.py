"""API tokens in the admin: superusers list them (metadata only), issue one for a user and
rotate selected ones, each new key shown once on the page that made it; any staff user
rotates their own at ``mine/``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from common.accounts.models import ApiToken
from common.accounts.selectors import api_token_of_user
from common.accounts.services import IssuedToken, api_token_issue
from common.admin import SuperuserOnlyAdmin, is_superuser

ISSUED_TEMPLATE = "admin/accounts/apitoken/issued.html"
MINE_TEMPLATE = "admin/accounts/apitoken/mine.html"
_ISSUED = "_api_tokens_issued"  # the request attribute carrying keys to the page shown next


class ApiTokenAddForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = ApiToken
        fields = ("user",)


@admin.register(ApiToken)
class ApiTokenAdmin(SuperuserOnlyAdmin):
    list_display = ("prefix", "user", "created_at", "last_used_at", "expires_at")
    list_select_related = ("user",)
    search_fields = ("user__username", "prefix")
    fields = ("user", "prefix", "created_at", "last_used_at", "expires_at")
    readonly_fields = fields
    form = ApiTokenAddForm
    actions = ("rotate",)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("user",) if obj is None else self.fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.readonly_fields

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # nothing of a token is edited: it is rotated or deleted

    def has_rotate_permission(self, request: HttpRequest) -> bool:
        return is_superuser(request)

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        """Through the token service: the key exists only in the page this save shows."""
        issued = api_token_issue(user=obj.user)
        obj.pk, obj.prefix, obj.digest = issued.token.pk, issued.token.prefix, issued.token.digest
        obj.created_at, obj.expires_at = issued.token.created_at, issued.token.expires_at
        setattr(request, _ISSUED, [issued])

    def response_add(self, request: HttpRequest, obj: ApiToken, *args: Any) -> HttpResponse:
        return self._shown_once(request, getattr(request, _ISSUED))

    @admin.action(
        description="Rotate (new keys; the old ones stop working)", permissions=["rotate"]
    )
    def rotate(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> HttpResponse:
        issued = [api_token_issue(user=token.user) for token in queryset.select_related("user")]
        for one in issued:
            self.log_change(request, one.token, "Rotated")
        return self._shown_once(request, issued)

    def get_urls(self) -> list[URLPattern]:
        mine = path("mine/", self.admin_site.admin_view(self.mine_view), name="api_token_mine")
        return [mine, *super().get_urls()]

    def mine_view(self, request: HttpRequest) -> HttpResponse:
        """Any staff user: their own token's metadata, and a button that rotates it."""
        if request.method == "POST":
            return self._shown_once(request, [api_token_issue(user=request.user)])  # type: ignore[arg-type]
        context = {
            **self.admin_site.each_context(request),
            "title": "Your API token",
            "token": api_token_of_user(user_id=request.user.pk),  # type: ignore[arg-type]
        }
        return TemplateResponse(request, MINE_TEMPLATE, context)

    def _shown_once(self, request: HttpRequest, issued: list[IssuedToken]) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "New API key" if len(issued) == 1 else "New API keys",
            "issued": [(one.token.user.get_username(), one.key, one.token) for one in issued],
        }
        response = TemplateResponse(request, ISSUED_TEMPLATE, context)
        response["Cache-Control"] = "no-store"
        return response
