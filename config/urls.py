"""URL map: the admin for support staff, the REST API with its OpenAPI schema, metrics and
health. Django's own error pages answer in the API's JSON error shape under ``/api/``."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from config.health import health
from config.metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("common.accounts.api")),  # the caller's own API token
    path("api/v1/", include("notifications.api")),  # the in-app inbox
    path("api/v1/", include("devices.api")),
    path("api/v1/", include("automation.api")),
    path("api/v1/", include("reminders.api")),
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
