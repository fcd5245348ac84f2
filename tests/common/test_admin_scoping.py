"""Admin organisation scoping: a staff user sees only their organisations' rows, and only their
organisations' names in list filters; users, groups and the beat schedule are superuser pages."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.test import Client

from common.admin import OrgScopedAdmin, OrgScopedChoices, SuperuserOnlyAdmin
from tests.automation.conftest import make_intent
from tests.automation.test_admin import INTENT_URL
from tests.common.conftest import BETA_FARM, BETA_ORG, BETA_PROFILE
from tests.conftest import Tenant
from tests.devices.factories import FarmFactory
from tests.scheduler.test_admin import SCHEDULER_URL, _row

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def _staff_permissions(user: User) -> None:
    codenames = ["view_devicecommand", "change_devicecommand"]
    codenames += ["view_duework", "change_duework"]
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))


def test_staff_sees_only_their_organisations_intents(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    alpha.kit.rule()
    beta.kit.rule()
    mine, theirs = make_intent(alpha.kit), make_intent(beta.kit)
    _staff_permissions(alpha.user)
    _row("report-subscription:s:manual:1")
    client.login(username="alpha", password="pw")
    page = client.get(INTENT_URL)
    assert page.status_code == 200
    assert f"{INTENT_URL}{mine.pk}/change/".encode() in page.content
    assert f"{INTENT_URL}{theirs.pk}/change/".encode() not in page.content
    assert client.get(f"{INTENT_URL}{mine.pk}/change/").status_code == 200
    assert client.get(f"{INTENT_URL}{theirs.pk}/change/").status_code == 302  # "doesn't exist"
    # Scheduler rows carry no organisation yet: superusers only.
    assert b"report-subscription:s" not in client.get(SCHEDULER_URL).content


ORG_URL, MEMBER_URL = "/admin/common/organization/", "/admin/common/organizationmember/"
FARM_URL, DEVICE_URL = "/admin/devices/farm/", "/admin/devices/device/"
PROFILE_URL, RULE_URL = "/admin/devices/deviceprofile/", "/admin/automation/automationrule/"
SUPERUSER_PAGES = [
    "/admin/auth/user/",
    "/admin/auth/user/add/",
    "/admin/auth/group/",
    "/admin/django_celery_beat/periodictask/",
    "/admin/django_celery_beat/periodictask/add/",
    "/admin/django_celery_beat/intervalschedule/",
    "/admin/django_celery_beat/crontabschedule/",
    "/admin/django_celery_beat/solarschedule/",
    "/admin/django_celery_beat/clockedschedule/",
]


def _grant(user: User, *, app_labels: tuple[str, ...] = (), models: tuple[str, ...] = ()) -> None:
    """Every permission (view, add, change, delete) of these apps and models."""
    rows = Permission.objects.filter(content_type__app_label__in=app_labels)
    rows |= Permission.objects.filter(content_type__model__in=models)
    user.user_permissions.add(*rows)


def test_list_filters_offer_only_the_users_organisations_rows(
    client: Client, named: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = named
    for tenant in named:
        tenant.kit.rule()
        make_intent(tenant.kit)
    models = ("organization", "organizationmember", "farm", "device", "deviceprofile")
    _grant(alpha.user, models=(*models, "automationrule", "devicecommand"))
    client.login(username="alpha", password="pw")
    for url in (ORG_URL, MEMBER_URL, FARM_URL, DEVICE_URL, PROFILE_URL, RULE_URL, INTENT_URL):
        page = client.get(url)
        assert page.status_code == 200, url
        for theirs in (BETA_ORG, BETA_FARM, BETA_PROFILE, "beta-relay", "beta-sensor", ">beta<"):
            assert theirs.encode() not in page.content, (url, theirs)
    second = FarmFactory(organization=alpha.kit.farm.organization, name="Alpha South")
    sidebar = client.get(DEVICE_URL).content  # a filter of one choice is not drawn: two now
    assert f"farm__id__exact={second.pk}".encode() in sidebar and b"Alpha South" in sidebar
    assert BETA_FARM.encode() not in sidebar
    crafted = client.get(DEVICE_URL, {"farm__id__exact": beta.kit.farm.pk})
    assert b"beta-relay" not in crafted.content


def test_users_groups_and_the_beat_schedule_are_for_superusers_only(
    client: Client, named: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = named
    _grant(alpha.user, app_labels=("auth", "django_celery_beat"))
    client.login(username="alpha", password="pw")
    for url in [*SUPERUSER_PAGES, f"/admin/auth/user/{beta.user.pk}/change/"]:
        page = client.get(url)
        assert page.status_code == 403, url
        assert b">beta<" not in page.content
    index = client.get("/admin/").content
    assert b"/admin/auth/" not in index and b"/admin/django_celery_beat/" not in index
    # No way up: a staff user cannot make themselves a superuser.
    escalate = {"username": "alpha", "is_staff": "on", "is_superuser": "on", "is_active": "on"}
    assert client.post(f"/admin/auth/user/{alpha.user.pk}/change/", escalate).status_code == 403
    assert not User.objects.get(pk=alpha.user.pk).is_superuser
    User.objects.create_superuser("root", "r@example.com", "pw")
    root = Client()
    root.login(username="root", password="pw")
    assert all(root.get(url).status_code == 200 for url in SUPERUSER_PAGES)


def test_every_admin_page_is_scoped_or_for_superusers_only() -> None:
    """A new admin (an app's, or a package's) must choose: scoped rows, or superusers."""
    for model, model_admin in admin.site._registry.items():
        assert isinstance(model_admin, OrgScopedAdmin | SuperuserOnlyAdmin), model
        if isinstance(model_admin, OrgScopedAdmin):
            for inline in model_admin.inlines:
                assert issubclass(inline, OrgScopedChoices), (model, inline)
