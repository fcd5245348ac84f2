"""URL map: the admin for support staff, the REST API with its root, its OpenAPI schema and
docs (``common.urls``), metrics and health. Django's own error pages answer in the API's JSON
error shape under ``/api/``."""

from django.contrib import admin
from django.urls import include, path

from config.health import health
from config.metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("common.urls")),  # the API root, the schema and its docs
    path("api/v1/", include("common.accounts.api")),  # the caller's own API token
    path("api/v1/", include("common.members.api")),  # organisations and their members
    path("api/v1/", include("notifications.api")),  # the in-app inbox
    path("api/v1/", include("devices.api")),
    path("api/v1/", include("automation.api")),
    path("api/v1/", include("reminders.api")),
    path("api/v1/", include("reminders.user_messages_api")),  # users' scheduled messages
    path("metrics", metrics, name="metrics"),
    path("health", health, name="health"),
]

# Under /api/ these answer JSON in the API's error shape; elsewhere Django's own pages.
handler400 = "common.errors.bad_request"
handler403 = "common.errors.permission_denied"
handler404 = "common.errors.page_not_found"
handler500 = "common.errors.server_error"
