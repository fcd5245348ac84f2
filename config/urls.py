"""URL map: the admin for support staff, the REST API with its root, its OpenAPI schema and
docs (``common.urls``), metrics and health. Django's own error pages answer in the API's JSON
error shape under ``/api/``."""

from django.contrib import admin
from django.urls import URLPattern, include, path, re_path
from django.views.generic import RedirectView

from config.health import health
from config.metrics import metrics

# The admin pages of models renamed in this release, under their previous addresses, for one
# release: bookmarks and links in older notifications land on the same page.
ADMIN_RENAMED = {
    "automation/automationcommandintent": "automation/devicecommand",
    "scheduler/automationscheduler": "scheduler/duework",
    "scheduler/automationjob": "scheduler/tracerecord",
}


def _admin_renamed(old: str, new: str) -> URLPattern:
    return re_path(
        rf"^admin/{old}/(?P<rest>.*)$",
        RedirectView.as_view(url=f"/admin/{new}/%(rest)s", query_string=True),
    )


urlpatterns = [
    *(_admin_renamed(old, new) for old, new in ADMIN_RENAMED.items()),
    path("admin/", admin.site.urls),
    path("", include("common.urls")),  # the API root, the schema and its docs
    path("api/v1/", include("common.accounts.api")),  # the caller's own API token
    path("api/v1/", include("common.members.api")),  # organisations and their members
    path("api/v1/", include("notifications.api")),  # the in-app inbox
    path("api/v1/", include("devices.api")),
    path("api/v1/", include("automation.api")),
    path("api/v1/", include("reminders.api")),
    path("api/v1/", include("reminders.user_messages_api")),  # users' scheduled messages
    path("api/v1/", include("rollouts.api")),  # fleet rollouts
    path("api/v1/", include("alarms.api")),  # alarms: list, acknowledge, clear
    path("api/v1/", include("common.audit.api")),  # the audit log of configuration changes
    path("metrics", metrics, name="metrics"),
    path("health", health, name="health"),
]

# Under /api/ these answer JSON in the API's error shape; elsewhere Django's own pages.
handler400 = "common.errors.bad_request"
handler403 = "common.errors.permission_denied"
handler404 = "common.errors.page_not_found"
handler500 = "common.errors.server_error"
