"""URL map: the admin for support staff, the REST API with its OpenAPI schema, metrics and
health."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

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
    path("metrics", metrics, name="metrics"),
    path("health", health, name="health"),
]
