"""Reminders on the operations surface: every API resource (and the notifications listed with
them) is scoped to the caller's organisations (another organisation's row is a 404), writes
go through the services (a refused setting is a 400 naming the field, a manual run asked twice
with one run id is one scheduler row), and the admin lists render scoped and run the
notification actions."""

from __future__ import annotations

import uuid
from datetime import time

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from devices.models import Farm
from notifications.models import Notification, NotificationTransition
from reminders.models import (
    Document,
    DocumentSubject,
    DocumentType,
    ReminderSetting,
    ReportManualRun,
    ReportSubscription,
    SourceType,
)
from reminders.services.reports.subscriptions import report_subscription_create
from reminders.services.settings import reminder_setting_create
from scheduler.models import DueWork
from tests.conftest import Tenant
from tests.notifications.test_support import _client, _notification

pytestmark = pytest.mark.django_db


def _setting(farm: Farm) -> ReminderSetting:
    return reminder_setting_create(
        name=f"expiry {farm.pk}",
        farm_id=farm.pk,
        source_type=SourceType.DOCUMENT,
        trigger_type="date_based",
        template_name="document_expiry",
        channels=["email"],
        offsets_days=[30, 7],
        send_time=time(9, 0),
    )


def _subscription(farm: Farm) -> ReportSubscription:
    return report_subscription_create(
        farm_id=farm.pk,
        name=f"weekly {farm.pk}",
        recurrence="weekly",
        send_time=time(8, 0),
        channels=["email"],
    )


def _resources(t: Tenant) -> dict[str, int]:
    farm = t.kit.farm
    return {
        "reminder-settings": _setting(farm).pk,
        "report-subscriptions": _subscription(farm).pk,
        "notifications": _notification(farm).pk,
    }


def test_every_new_resource_is_404_across_organisations(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    mine, theirs = _resources(alpha), _resources(beta)
    client = _client(alpha.user)
    for name, pk in mine.items():
        assert client.get(f"/api/v1/{name}/{pk}/").status_code == 200, name
        listed = [row["id"] for row in client.get(f"/api/v1/{name}/").json()["results"]]
        assert pk in listed and theirs[name] not in listed, name
        assert client.get(f"/api/v1/{name}/{theirs[name]}/").status_code == 404, name
    for name in ("reminder-settings", "report-subscriptions"):
        patched = client.patch(f"/api/v1/{name}/{theirs[name]}/", {"name": "x"}, format="json")
        assert patched.status_code == 404, name
    setting, sub, notification = (
        theirs["reminder-settings"],
        theirs["report-subscriptions"],
        theirs["notifications"],
    )
    assert client.post(f"/api/v1/reminder-settings/{setting}/deactivate/").status_code == 404
    assert client.post(f"/api/v1/report-subscriptions/{sub}/run/", {}).status_code == 404
    for move in ("retry", "cancel"):
        url = f"/api/v1/notifications/{notification}/{move}/"
        assert client.post(url, {"reason": "x"}).status_code == 404
    # Nothing of theirs moved, and their farm does not resolve for a create.
    assert ReminderSetting.objects.get(pk=setting).active
    assert not ReportManualRun.objects.exists()
    assert Notification.objects.get(pk=notification).status == "failed"
    body = {
        "name": "x",
        "farm": beta.kit.farm.pk,
        "source_type": "document",
        "trigger_type": "date_based",
        "offsets_days": [1],
        "send_time": "09:00",
        "template_name": "t",
        "channels": ["email"],
    }
    created = client.post("/api/v1/reminder-settings/", body, format="json")
    assert created.status_code == 400 and "farm" in created.json()["fields"]
    assert APIClient().get("/api/v1/reminder-settings/").status_code in (401, 403)


def test_reminder_setting_create_update_deactivate(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    body = {
        "name": "Certificates",
        "farm": alpha.kit.farm.pk,
        "source_type": "document",
        "trigger_type": "date_based",
        "offsets_days": [30, 7],
        "send_time": "09:00",
        "template_name": "document_expiry",
        "channels": ["email", "inbox"],
    }
    created = client.post("/api/v1/reminder-settings/", body, format="json")
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    updated = client.patch(
        f"/api/v1/reminder-settings/{pk}/", {"offsets_days": [14]}, format="json"
    )
    assert updated.status_code == 200 and updated.json()["offsets_days"] == [14]
    assert updated.json()["revision"] == 1
    fixed = client.patch(
        f"/api/v1/reminder-settings/{pk}/", {"source_type": "endpoint_metric"}, format="json"
    )
    assert fixed.status_code == 400 and "source_type" in fixed.json()["fields"]
    done = client.post(f"/api/v1/reminder-settings/{pk}/deactivate/")
    assert done.status_code == 200 and done.json()["active"] is False


def test_invalid_reminder_setting_is_400_with_field_errors(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    base = {
        "name": "Silo low",
        "farm": alpha.kit.farm.pk,
        "source_type": "endpoint_metric",
        "trigger_type": "threshold_condition",
        "template_name": "silo_low",
        "channels": ["email"],
    }
    missing = client.post("/api/v1/reminder-settings/", base, format="json")
    assert missing.status_code == 400
    assert {"threshold_metric", "threshold_value", "firing_policy"} <= set(missing.json()["fields"])
    wrong = client.post(
        "/api/v1/reminder-settings/",
        {**base, "trigger_type": "date_based", "offsets_days": [1], "send_time": "09:00"},
        format="json",
    )
    assert wrong.status_code == 400 and "trigger_type" in wrong.json()["fields"]
    channel = client.post(
        "/api/v1/reminder-settings/", {**base, "channels": ["sms"]}, format="json"
    )
    assert channel.status_code == 400 and "channels" in channel.json()["fields"]
    both = client.post(
        "/api/v1/reminder-settings/",
        {**base, "organization": alpha.kit.farm.organization_id},
        format="json",
    )
    assert both.status_code == 400 and "farm" in both.json()["fields"]
    assert not ReminderSetting.objects.exists()


def test_manual_run_twice_with_one_run_id_is_one_scheduler_row(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    sub = _subscription(alpha.kit.farm)
    url = f"/api/v1/report-subscriptions/{sub.pk}/run/"
    run_id = str(uuid.uuid4())
    first = client.post(url, {"run_id": run_id}, format="json")
    again = client.post(url, {"run_id": run_id}, format="json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["run_id"] == again.json()["run_id"] == run_id
    assert first.json()["scheduler"]["id"] == again.json()["scheduler"]["id"]
    assert DueWork.objects.filter(scheduler_key__contains=run_id).count() == 1
    assert ReportManualRun.objects.filter(guid=run_id).count() == 1
    # Without a run id the server makes one; an Idempotency-Key retry replays the first answer.
    headers = {"HTTP_IDEMPOTENCY_KEY": "run-1"}
    made = client.post(url, {}, format="json", **headers)
    replay = client.post(url, {}, format="json", **headers)
    assert made.status_code == replay.status_code == 201
    assert made.json() == replay.json() and replay["Idempotent-Replayed"] == "true"
    assert ReportManualRun.objects.count() == 2
    # A subscription's run id asked on another subscription is refused, not re-homed.
    other = _subscription(alpha.kit.farm)
    clash = client.post(
        f"/api/v1/report-subscriptions/{other.pk}/run/", {"run_id": run_id}, format="json"
    )
    assert clash.status_code == 400 and "run_id" in clash.json()["fields"]


def test_report_subscription_create_and_update(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    body = {
        "farm": alpha.kit.farm.pk,
        "name": "Monthly",
        "recurrence": "monthly",
        "send_time": "07:30",
        "channels": ["email"],
    }
    created = client.post("/api/v1/report-subscriptions/", body, format="json")
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    off = client.patch(f"/api/v1/report-subscriptions/{pk}/", {"active": False}, format="json")
    assert off.status_code == 200 and off.json()["active"] is False
    bad = client.post("/api/v1/report-subscriptions/", {**body, "recurrence": "hourly"})
    assert bad.status_code == 400 and "recurrence" in bad.json()["fields"]


ADMIN_PAGES = {
    "reminders/remindersetting": "view_remindersetting",
    "reminders/document": "view_document",
    "reminders/endpointmetricsource": "view_endpointmetricsource",
    "reminders/reportsubscription": "view_reportsubscription",
    "notifications/notification": "view_notification",
}


def _document(farm: Farm, title: str) -> Document:
    now = timezone.now()
    return Document.objects.create(
        farm=farm,
        subject_kind=DocumentSubject.FARM,
        document_type=DocumentType.INSURANCE,
        title=title,
        created_at=now,
        updated_at=now,
    )


def test_admin_lists_render_scoped_and_retry_needs_a_reason(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    codenames = [*ADMIN_PAGES.values(), "change_notification", "operate"]
    alpha.user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    mine, theirs = _resources(alpha), _resources(beta)
    _document(alpha.kit.farm, "alpha-insurance")
    _document(beta.kit.farm, "beta-insurance")
    client.login(username="alpha", password="pw")
    for page in ADMIN_PAGES:
        response = client.get(f"/admin/{page}/")
        assert response.status_code == 200, page
    docs = client.get("/admin/reminders/document/").content
    assert b"alpha-insurance" in docs and b"beta-insurance" not in docs
    url = "/admin/notifications/notification/"
    filtered = client.get(url, {"status__exact": "failed", "channel__exact": "email"})
    assert filtered.status_code == 200
    assert client.get(f"{url}{mine['notifications']}/change/").status_code == 200
    assert client.get(f"{url}{theirs['notifications']}/change/").status_code in (302, 404)

    pk = mine["notifications"]
    selected = {"action": "retry", "_selected_action": [str(pk)]}
    form = client.post(url, selected, follow=True)
    assert b'name="reason"' in form.content
    assert Notification.objects.get(pk=pk).status == "failed"
    client.post(url, {**selected, "apply": "1", "reason": "mailbox fixed"}, follow=True)
    row = Notification.objects.get(pk=pk)
    assert row.status == "queued"
    move = NotificationTransition.objects.get(notification=row)
    assert (move.actor, move.detail, move.reason) == ("alpha", "mailbox fixed", "support_retry")
    # Another organisation's row cannot be slipped into the selection.
    client.post(
        url,
        {"action": "retry", "_selected_action": [str(theirs["notifications"])], "apply": "1"}
        | {"reason": "x"},
        follow=True,
    )
    assert Notification.objects.get(pk=theirs["notifications"]).status == "failed"
