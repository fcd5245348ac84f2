"""URL map: the admin for support staff, the REST API with its root, its OpenAPI schema and
docs, metrics and health. Django's own error pages answer in the API's JSON error shape under
``/api/``."""

from typing import Any

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from config.health import health
from config.metrics import metrics

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
    "telemetry": "telemetry-ingest",
    "diagnostics": "diagnostics",
    "reminder-settings": "reminder-setting-list",
    "report-subscriptions": "report-subscription-list",
    "user-messages": "user-message-list",
    "notifications": "notification-list",
    "inbox": "inbox-list",
    "auth-token": "api-token",
    "schema": "schema",
}


class ApiRoot(APIView):
    """``/api/v1/``: every resource by name, as absolute URLs. Signed in like the rest of the
    API (the links are no secret, but an anonymous client has nothing to follow them with)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(
            {name: reverse(url, request=request) for name, url in API_RESOURCES.items()}
        )


urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", ApiRoot.as_view(), name="api-root"),
    path("api/v1/", include("common.accounts.api")),  # the caller's own API token
    path("api/v1/", include("common.members.api")),  # organisations and their members
    path("api/v1/", include("notifications.api")),  # the in-app inbox
    path("api/v1/", include("devices.api")),
    path("api/v1/", include("automation.api")),
    path("api/v1/", include("reminders.api")),
    path("api/v1/", include("reminders.user_messages_api")),  # users' scheduled messages
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    path("metrics", metrics, name="metrics"),
    path("health", health, name="health"),
]

# Under /api/ these answer JSON in the API's error shape; elsewhere Django's own pages.
handler400 = "common.errors.bad_request"
handler403 = "common.errors.permission_denied"
handler404 = "common.errors.page_not_found"
handler500 = "common.errors.server_error"
