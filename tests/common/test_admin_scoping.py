"""Admin organisation scoping: a staff user sees only their organisations' rows."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.automation.conftest import make_intent
from tests.automation.test_admin import INTENT_URL
from tests.conftest import Tenant
from tests.scheduler.test_admin import SCHEDULER_URL, _row

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]


def _staff_permissions(user: User) -> None:
    codenames = ["view_automationcommandintent", "change_automationcommandintent"]
    codenames += ["view_automationscheduler", "change_automationscheduler"]
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
