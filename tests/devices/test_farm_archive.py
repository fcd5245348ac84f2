"""Archiving a farm (``POST /api/v1/farms/<id>/archive/``, ``devices.services.farm_archive``):
an admin's move, once (a second archive changes nothing and answers the same), after which
the farm leaves the farm list unless ``?archived=true`` asks for it, stays readable by its id
and keeps its devices and their readings."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from automation.models import DeviceCommand
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from common.models import MemberRole, OrganizationMember
from devices.models import Device, Farm, Telemetry
from devices.mqtt.messages import InboundTelemetry
from devices.services import farm_archive
from tests.automation.conftest import dispatch, make_intent
from tests.common.auth import token_client
from tests.conftest import Tenant
from tests.devices.factories import FarmFactory

pytestmark = pytest.mark.django_db


def _listed(client: object, **params: str) -> list[int]:
    response = client.get("/api/v1/farms/", params)  # type: ignore[attr-defined]
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def test_an_admin_archives_a_farm_once(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    farm = alpha.kit.farm
    other = FarmFactory(organization=farm.organization, name="South")
    client = token_client(alpha.user)
    devices = set(Device.objects.filter(farm=farm).values_list("pk", flat=True))
    Telemetry.objects.create(
        device=alpha.kit.sensor,
        raw_payload="{}",
        fingerprint=b"f",
        message_ts=timezone.now(),
        received_at=timezone.now(),
    )

    first = client.post(f"/api/v1/farms/{farm.pk}/archive/", format="json")
    assert first.status_code == 200, first.content
    assert first.json()["archived_at"] is not None and first.json()["archived_by"] == "alpha"
    again = client.post(f"/api/v1/farms/{farm.pk}/archive/", format="json")
    assert again.status_code == 200 and again.json() == first.json()  # a no-op

    assert _listed(client) == [other.pk] == _listed(client, archived="false")
    assert _listed(client, archived="true") == [farm.pk]
    detail = client.get(f"/api/v1/farms/{farm.pk}/")
    assert detail.status_code == 200 and detail.json()["archived_at"] == first.json()["archived_at"]
    # Its devices and their readings stay.
    assert set(Device.objects.filter(farm=farm).values_list("pk", flat=True)) == devices
    assert Telemetry.objects.filter(device=alpha.kit.sensor).count() == 1
    assert client.get(f"/api/v1/devices/{alpha.kit.sensor.pk}/").status_code == 200


def test_the_service_archives_by_compare_and_set(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    farm = alpha.kit.farm
    assert farm_archive(farm_id=farm.pk, actor="first") is True
    assert farm_archive(farm_id=farm.pk, actor="second") is False
    farm.refresh_from_db()
    assert farm.archived_by == "first" and farm.archived_at is not None


def test_archiving_is_for_admins_of_the_farms_organisation(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, beta = tenants
    url = f"/api/v1/farms/{alpha.kit.farm.pk}/archive/"
    assert token_client(beta.user).post(url, format="json").status_code == 404
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.OPERATOR)
    assert token_client(alpha.user).post(url, format="json").status_code == 403
    assert Farm.objects.get(pk=alpha.kit.farm.pk).archived_at is None


def test_a_bad_archived_filter_is_a_400(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    response = token_client(alpha.user).get("/api/v1/farms/", {"archived": "maybe"})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["archived"]


def test_a_patch_cannot_archive(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    url = f"/api/v1/farms/{alpha.kit.farm.pk}/"
    body = {"archived_at": "2026-01-01T00:00:00Z"}
    response = token_client(alpha.user).patch(url, body, format="json")
    assert response.status_code == 400 and list(response.json()["fields"]) == ["archived_at"]


@pytest.mark.usefixtures("clock_at_fixture_dates")
def test_an_archived_farms_rules_stop_deciding(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    alpha.kit.rule()
    farm_archive(farm_id=alpha.kit.farm.pk, actor="alpha")
    payload = json.dumps({"ts": "2026-11-29T11:59:00Z", "values": {"temp": 31}})
    message = InboundTelemetry(alpha.kit.sensor.serial_number, payload, timezone.now())
    ingested = telemetry_ingest(messages=[message])
    assert ingested.events == 1  # the reading is kept: only the rules stop
    endpoint_events_evaluate(event_ids=ingested.pending_event_ids)
    assert not DeviceCommand.objects.exists()


@pytest.mark.usefixtures("clock_at_fixture_dates")
def test_a_command_decided_before_the_archive_is_not_sent(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    alpha.kit.rule()
    intent = make_intent(alpha.kit)
    farm_archive(farm_id=alpha.kit.farm.pk, actor="alpha")
    sent = dispatch(intent)
    assert (sent.status, sent.status_reason) == ("failed", "rule_inactive")
