"""The audit log records each configuration change with its actor and surface (API, admin,
management command, system), the fields before and after, and never a secret; the hot path
(a reading ingested) writes no entry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, override_settings
from django.utils import timezone

from automation.services.ingest import telemetry_ingest
from common.accounts.models import ApiToken
from common.audit.context import command_context
from common.audit.models import AuditEntry
from common.audit.registry import MASK
from devices.models import Device, Farm
from devices.mqtt.messages import InboundTelemetry
from devices.services.farms import farm_archive
from notifications.models import ExternalContact
from tests.automation.test_rule_authoring_api import RULES, _body
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.fake_credentials import FakeBackend
from tests.notifications.test_contacts_api import CONTACTS, HOOK

pytestmark = pytest.mark.django_db


def _entries(model: type[Any], pk: object) -> list[AuditEntry]:
    rows = AuditEntry.objects.get_for_object(model(pk=pk))
    return list(rows.order_by("pk"))


def _last(model: type[Any], pk: object) -> AuditEntry:
    return _entries(model, pk)[-1]


@pytest.fixture
def fake_broker() -> Iterator[dict[str, str]]:
    FakeBackend.logins.clear()
    with override_settings(DEVICE_CREDENTIALS_BACKEND="tests.devices.fake_credentials.FakeBackend"):
        yield FakeBackend.logins


def test_an_api_change_records_actor_surface_organisation_and_both_values(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    farm = alpha.kit.farm
    answer = token_client(alpha.user).patch(
        f"/api/v1/farms/{farm.pk}/", {"name": "North field"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    entry = _last(Farm, farm.pk)
    assert entry.action == AuditEntry.Action.UPDATE
    assert entry.actor == alpha.user and entry.surface == "api"
    assert entry.organization_id == farm.organization_id
    assert entry.changes == {"name": [farm.name, "North field"]}


def test_a_device_status_change_and_a_credentials_rotation_are_recorded_without_the_password(
    tenants: tuple[Tenant, Tenant], fake_broker: dict[str, str]
) -> None:
    alpha, _ = tenants
    device = alpha.kit.actuator
    client = token_client(alpha.user)
    moved = client.post(f"/api/v1/devices/{device.pk}/status/", {"status": "maintenance"})
    assert moved.status_code == 200, moved.content
    rotated = client.post(f"/api/v1/devices/{device.pk}/credentials/")
    assert rotated.status_code == 201, rotated.content
    password = rotated.json()["password"]
    status, rotation = _entries(Device, device.pk)[-2:]
    assert status.changes == {"status": ["active", "maintenance"]}
    assert rotation.changes == {"mqtt_password": [MASK, MASK]}
    assert {status.actor, rotation.actor} == {alpha.user}
    assert password not in str(list(AuditEntry.objects.values("changes", "additional_data")))


def test_a_rule_with_its_conditions_actions_and_schedules_is_recorded(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    rule = client.post(RULES, _body(alpha), format="json").json()
    kinds = set(
        AuditEntry.objects.filter(action=AuditEntry.Action.CREATE).values_list(
            "content_type__model", flat=True
        )
    )
    assert {
        "automationrule",
        "automationrulecondition",
        "automationruleaction",
        "automationruleschedule",
    } <= kinds
    patched = client.patch(
        f"{RULES}{rule['id']}/", {"conditions": [], "schedules": [{"local_time": "06:00"}]}
    )
    assert patched.status_code == 200, patched.content
    deleted = AuditEntry.objects.filter(action=AuditEntry.Action.DELETE, surface="api")
    assert set(deleted.values_list("content_type__model", flat=True)) == {
        "automationrulecondition",
        "automationruleschedule",
    }
    assert set(deleted.values_list("organization_id", flat=True)) == {
        alpha.kit.farm.organization_id
    }


def test_a_webhook_secret_is_masked_in_every_entry(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    body = {"farm": alpha.kit.farm.pk, "name": "Integrator", "webhook_url": HOOK}
    made = client.post(CONTACTS, {**body, "with_webhook_secret": True}, format="json").json()
    rotated = client.post(f"{CONTACTS}{made['id']}/rotate-secret/", format="json").json()
    contact = ExternalContact.objects.get(pk=made["id"])
    created, rotation = _entries(ExternalContact, contact.pk)
    assert created.changes["webhook_secret_salt"] == ["None", MASK]
    assert rotation.changes["webhook_secret_salt"] == [MASK, MASK]
    stored = str(list(AuditEntry.objects.values("changes", "object_repr", "additional_data")))
    for secret in (made["webhook_secret"], rotated["webhook_secret"], contact.webhook_secret_salt):
        assert secret not in stored


def test_an_admin_change_records_the_admin_surface(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    organization = alpha.kit.farm.organization
    User.objects.create_superuser("support", "s@example.com", "pw")
    client = Client()
    client.login(username="support", password="pw")
    url = f"/admin/common/organization/{organization.pk}/change/"
    answer = client.post(url, {"name": "Renamed in the admin"})
    assert answer.status_code == 302, answer.content
    entry = _last(type(organization), organization.pk)
    assert entry.surface == "admin" and entry.actor is not None
    assert entry.actor.get_username() == "support"
    assert entry.changes == {"name": [organization.name, "Renamed in the admin"]}


def test_a_management_command_records_the_command_surface_and_no_key(
    tenants: tuple[Tenant, Tenant], capsys: pytest.CaptureFixture[str]
) -> None:
    alpha, _ = tenants
    ApiToken.objects.filter(user=alpha.user).delete()
    with command_context(["manage.py", "api_token", "alpha"]):  # as manage.py runs it
        call_command("api_token", "alpha")
    key = capsys.readouterr().out.strip().split()[-1]
    token = ApiToken.objects.get(user=alpha.user)
    entry = _last(ApiToken, token.pk)
    assert entry.surface == "command" and entry.actor is None
    assert entry.additional_data == {"command": "api_token"}
    assert entry.changes["digest"] == ["None", MASK] and entry.changes["prefix"] == ["None", MASK]
    assert key not in str(entry.changes) and token.prefix not in str(entry.changes)


def test_a_change_with_no_request_or_command_is_the_systems(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    farm = alpha.kit.farm
    assert farm_archive(farm_id=farm.pk, actor="beat")
    entry = _last(Farm, farm.pk)
    assert entry.surface == "system" and entry.actor is None
    assert entry.organization_id == farm.organization_id
    assert set(entry.changes) == {"archived_at", "archived_by"}


@pytest.mark.usefixtures("clock_at_fixture_dates")
def test_a_reading_ingested_writes_no_entry(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    alpha.kit.rule()
    before = AuditEntry.objects.count()
    payload = '{"ts": "2026-11-29T11:59:00Z", "values": {"temp": 31.5}}'
    message = InboundTelemetry(alpha.kit.sensor.serial_number, payload, timezone.now())
    assert telemetry_ingest(messages=[message]).pending_event_ids
    assert AuditEntry.objects.count() == before
