"""The two rules every support admin follows: organisation scoping (``scoping``: a staff user
sees, picks and saves only their organisations' rows unless superuser) and manual moves as
actions that ask for a reason and call a service, never a field edit (``actions``). Also the
admin of organisations and their members, and the pages only superusers may open."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.http import HttpRequest
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from common.admin.actions import ReasonForm, reason_action
from common.admin.scoping import (
    OrgScopedAdmin,
    OrgScopedChoices,
    OrgScopedTabularInline,
    ReadOnlyAdmin,
    SuperuserOnlyAdmin,
    admin_superuser_only,
    is_superuser,
    related_rows,
)
from common.models import Organization, OrganizationMember

# The product's name on every page, and "View site" to the API's docs: the admin is one face of
# the product, the API the other (there is no public site to view).
admin.site.site_header = admin.site.site_title = "Farm Automation Core"
admin.site.index_title = "Operations"
admin.site.site_url = "/api/docs/"

__all__ = [
    "OrgScopedAdmin",
    "OrgScopedChoices",
    "OrgScopedTabularInline",
    "ReadOnlyAdmin",
    "ReasonForm",
    "SuperuserOnlyAdmin",
    "admin_superuser_only",
    "is_superuser",
    "reason_action",
    "related_rows",
]


@admin.register(Organization)
class OrganizationAdmin(OrgScopedAdmin):
    org_path = "pk"
    list_display = ("id", "name", "created_at")
    search_fields = ("name",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        """A staff user would not be a member of the organisation they created."""
        return is_superuser(request)


@admin.register(OrganizationMember)
class OrganizationMemberAdmin(OrgScopedAdmin):
    org_path = "organization_id"
    list_display = ("id", "user", "organization", "created_at")
    list_filter = ("organization",)
    search_fields = ("user__username",)


# Users and groups grant permissions and belong to no one organisation; the beat schedule runs
# tasks for every organisation. Their admins (registered by django.contrib.auth and
# django-celery-beat, which come before common in INSTALLED_APPS) become superuser pages.
admin_superuser_only(get_user_model(), Group)
admin_superuser_only(
    PeriodicTask, IntervalSchedule, CrontabSchedule, SolarSchedule, ClockedSchedule
)
