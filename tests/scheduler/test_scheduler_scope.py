"""Scheduler rows are scoped through their farm: a staff user sees their organisations' rows in
the admin and the API, another organisation's rows do not exist for them (404), and rows
without a farm stay superusers-only. Ensure records the farm its caller knows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler.keys import report_manual_key
from scheduler.models import AutomationType, DueWork, TriggerType
from scheduler.services import EnsureOutcome, scheduler_ensure
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.scheduler.factories import DueWorkFactory

pytestmark = pytest.mark.django_db
SCHEDULER_URL = "/admin/scheduler/duework/"


def _row(key: str, farm: Any = None) -> DueWork:
    now = timezone.now()
    return DueWorkFactory(
        automation_type=AutomationType.REPORT_SUBSCRIPTION,
        trigger_type=TriggerType.MANUAL_RUN,
        scheduler_key=key,
        farm=farm,
        scheduled_on=now + timedelta(hours=1),
        input_hash="0" * 64,
        created_on=now,
        updated_on=now,
    )


def _api(user: User) -> APIClient:
    return token_client(user)


def test_staff_sees_only_their_organisations_scheduler_rows(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    mine = _row("report-subscription:mine:manual:1", alpha.kit.farm)
    theirs = _row("report-subscription:theirs:manual:1", beta.kit.farm)
    orphan = _row("report-subscription:orphan:manual:1")
    codenames = ["view_duework", "change_duework", "operate"]
    alpha.user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.login(username="alpha", password="pw")
    page = client.get(SCHEDULER_URL)
    assert page.status_code == 200
    assert mine.scheduler_key.encode() in page.content
    assert theirs.scheduler_key.encode() not in page.content
    assert orphan.scheduler_key.encode() not in page.content
    assert client.get(f"{SCHEDULER_URL}{mine.pk}/change/").status_code == 200
    assert client.get(f"{SCHEDULER_URL}{theirs.pk}/change/").status_code == 302  # "doesn't exist"
    filtered = client.get(SCHEDULER_URL, {"farm__id__exact": str(alpha.kit.farm.pk)})
    assert filtered.status_code == 200 and mine.scheduler_key.encode() in filtered.content

    api = _api(alpha.user)
    listed = [r["id"] for r in api.get("/api/v1/scheduler/").json()["results"]]
    assert listed == [mine.pk]
    assert api.get(f"/api/v1/scheduler/{mine.pk}/").json()["farm"] == alpha.kit.farm.pk
    assert api.get(f"/api/v1/scheduler/{theirs.pk}/").status_code == 404
    assert api.get(f"/api/v1/scheduler/{orphan.pk}/").status_code == 404

    root = User.objects.create_superuser("root", "r@example.com", "pw")
    everything = [r["id"] for r in _api(root).get("/api/v1/scheduler/").json()["results"]]
    assert sorted(everything) == sorted([mine.pk, theirs.pk, orphan.pk])
    only_theirs = _api(root).get(f"/api/v1/scheduler/?farm={beta.kit.farm.pk}").json()
    assert [r["id"] for r in only_theirs["results"]] == [theirs.pk]


def test_ensure_records_the_farm_and_fills_it_on_a_later_write(
    tenants: tuple[Tenant, Tenant],
) -> None:
    import uuid

    alpha, _ = tenants
    now = timezone.now()
    key = report_manual_key(subscription_guid=uuid.uuid4(), manual_run_guid=uuid.uuid4())
    first = scheduler_ensure(key=key, scheduled_on=now, input_hash="1" * 64, now=now)
    assert DueWork.objects.get(pk=first.scheduler_id).farm_id is None
    moved = scheduler_ensure(
        key=key,
        scheduled_on=now + timedelta(minutes=5),
        input_hash="1" * 64,
        farm_id=alpha.kit.farm.pk,
        now=now,
    )
    assert moved.outcome == EnsureOutcome.UPDATED
    assert DueWork.objects.get(pk=first.scheduler_id).farm_id == alpha.kit.farm.pk
    other = report_manual_key(subscription_guid=uuid.uuid4(), manual_run_guid=uuid.uuid4())
    inserted = scheduler_ensure(
        key=other, scheduled_on=now, input_hash="2" * 64, farm_id=alpha.kit.farm.pk, now=now
    )
    assert inserted.outcome == EnsureOutcome.INSERTED
    assert DueWork.objects.get(pk=inserted.scheduler_id).farm_id == alpha.kit.farm.pk
