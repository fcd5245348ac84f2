"""The API's own pages: its root, which links every resource by name, and the OpenAPI schema
with its docs. Each declares its need like every other view (``common.permissions``)."""

from typing import Any

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from common import schema_docs
from common.roles import Need

# The API root's links: resource name -> URL name of its list (or only) view.
API_RESOURCES = {
    "organizations": "organization-list",
    "members": "member-list",
    "farms": "farm-list",
    "profiles": "profile-list",
    "devices": "device-list",
    "endpoints": "endpoint-list",
    "rules": "rule-list",
    "commands": "command-list",
    "executions": "execution-list",
    "scheduler": "scheduler-list",
    "rollouts": "rollout-list",
    "alarms": "alarm-list",
    "audit": "audit-list",
    "telemetry": "telemetry-ingest",
    "diagnostics": "diagnostics",
    "reminder-settings": "reminder-setting-list",
    "report-subscriptions": "report-subscription-list",
    "user-messages": "user-message-list",
    "notifications": "notification-list",
    "contacts": "contact-list",
    "channel-preferences": "channel-preference-list",
    "inbox": "inbox-list",
    "auth-token": "api-token",
    "schema": "schema",
}


@schema_docs.API_ROOT
class ApiRoot(APIView):
    """``/api/v1/``: every resource by name, as absolute URLs. Signed in like the rest of the
    API (the links are no secret, but an anonymous client has nothing to follow them with)."""

    required_roles = {"get": Need.SIGNED_IN}

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(
            {name: reverse(url, request=request) for name, url in API_RESOURCES.items()}
        )


class SchemaApi(SpectacularAPIView):
    required_roles = {"get": Need.ANYONE}  # what a client generator reads before any login


class SchemaSwaggerPage(SpectacularSwaggerView):
    required_roles = {"get": Need.ANYONE}


class SchemaRedocPage(SpectacularRedocView):
    required_roles = {"get": Need.ANYONE}


urlpatterns = [
    path("api/v1/", ApiRoot.as_view(), name="api-root"),
    path("api/schema/", SchemaApi.as_view(), name="schema"),
    path("api/docs/", SchemaSwaggerPage.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SchemaRedocPage.as_view(url_name="schema"), name="api-redoc"),
]
