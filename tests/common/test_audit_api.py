"""The audit log's surfaces: ``GET /api/v1/audit/`` for an organisation's admins (their own
organisations only, paged by cursor, filtered by row, actor and time; a bad filter is a 400
naming it), the admin's read-only list, and retention."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from common.audit.models import AuditEntry
from common.models import MemberRole, OrganizationMember
from common.retention import retention_prune
from tests.common.auth import token_client
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db
URL = "/api/v1/audit/"


def _rename(tenant: Tenant, name: str) -> None:
    farm = tenant.kit.farm
    answer = token_client(tenant.user).patch(f"/api/v1/farms/{farm.pk}/", {"name": name})
    assert answer.status_code == 200, answer.content


def _ids(answer: Any) -> list[int]:
    assert answer.status_code == 200, answer.content
    return [row["id"] for row in answer.json()["results"]]


def test_an_admin_reads_their_organisations_entries_only(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    _rename(alpha, "Alpha north")
    _rename(beta, "Beta south")
    rows = token_client(alpha.user).get(URL).json()["results"]
    assert rows and {row["organization_id"] for row in rows} == {alpha.kit.farm.organization_id}
    renamed = rows[0]
    assert renamed["object_type"] == "devices.farm" and renamed["action"] == "update"
    assert renamed["actor"] == "alpha" and renamed["surface"] == "api"
    assert renamed["changes"]["name"][1] == "Alpha north"
    theirs = AuditEntry.objects.filter(organization_id=beta.kit.farm.organization_id).first()
    assert theirs is not None
    assert token_client(alpha.user).get(f"{URL}{theirs.pk}/").status_code == 404


@pytest.mark.parametrize("role", [MemberRole.VIEWER, MemberRole.OPERATOR])
def test_a_member_who_is_not_an_admin_is_refused(tenants: tuple[Tenant, Tenant], role: str) -> None:
    alpha, _ = tenants
    OrganizationMember.objects.filter(user=alpha.user).update(role=role)
    assert token_client(alpha.user).get(URL).status_code == 403


def test_filters_by_row_actor_and_time(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    farm, device = alpha.kit.farm, alpha.kit.actuator
    _rename(alpha, "Alpha north")
    moved = token_client(alpha.user).patch(f"/api/v1/devices/{device.pk}/", {"name": "Pump 2"})
    assert moved.status_code == 200, moved.content
    client = token_client(alpha.user)
    farm_rows = _ids(client.get(URL, {"object_type": "devices.farm", "object_id": farm.pk}))
    assert farm_rows == list(
        AuditEntry.objects.filter(content_type__model="farm", object_id=farm.pk)
        .order_by("-pk")
        .values_list("pk", flat=True)
    )
    mine = set(_ids(client.get(URL, {"actor": alpha.user.pk})))
    assert mine and mine == set(
        AuditEntry.objects.filter(actor=alpha.user).values_list("pk", flat=True)
    )
    assert _ids(client.get(URL, {"actor": alpha.user.pk + 1000})) == []
    now = timezone.now()
    assert _ids(client.get(URL, {"since": (now + timedelta(minutes=1)).isoformat()})) == []
    assert set(_ids(client.get(URL, {"until": (now + timedelta(minutes=1)).isoformat()}))) >= mine


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"object_type": "devices.telemetry"}, "object_type"),
        ({"object_id": "x"}, "object_id"),
        ({"actor": "-1"}, "actor"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-01"}, "until"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(
    tenants: tuple[Tenant, Tenant], query: dict[str, str], field: str
) -> None:
    alpha, _ = tenants
    answer = token_client(alpha.user).get(URL, query)
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["fields"]


def test_pages_follow_the_cursor_newest_first(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    for n in range(5):
        _rename(alpha, f"Alpha {n}")
    client = token_client(alpha.user)
    seen: list[int] = []
    page = client.get(URL, {"page_size": 2}).json()
    while True:
        seen += [row["id"] for row in page["results"]]
        if not page["next"]:
            break
        page = client.get(page["next"]).json()
    expected = AuditEntry.objects.filter(organization_id=alpha.kit.farm.organization_id)
    assert seen == list(expected.order_by("-pk").values_list("pk", flat=True))
    assert len(seen) >= 5


def test_retention_prunes_entries_older_than_the_setting(
    tenants: tuple[Tenant, Tenant], settings: Any
) -> None:
    alpha, _ = tenants
    _rename(alpha, "Alpha north")
    kept = AuditEntry.objects.count()
    old = AuditEntry.objects.create(
        content_type_id=AuditEntry.objects.first().content_type_id,  # type: ignore[union-attr]
        object_pk="1",
        object_repr="old",
        action=AuditEntry.Action.UPDATE,
        timestamp=timezone.now() - timedelta(days=settings.RETENTION_AUDIT_DAYS + 1),
    )
    result = retention_prune(now=timezone.now())
    assert result.deleted.get("audit.AuditEntry") == 1
    assert not AuditEntry.objects.filter(pk=old.pk).exists()
    assert AuditEntry.objects.count() == kept


@pytest.mark.usefixtures("staff_groups")
def test_the_admin_list_shows_a_staff_admin_their_organisations_entries(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    _rename(alpha, "Alpha north")
    _rename(beta, "Beta south")
    alpha.user.groups.add(Group.objects.get(name=MemberRole.ADMIN))
    client.login(username="alpha", password="pw")
    page = client.get("/admin/audit/auditentry/")
    assert page.status_code == 200
    assert b"Alpha north" in page.content and b"Beta south" not in page.content
    entry = AuditEntry.objects.filter(organization_id=alpha.kit.farm.organization_id).first()
    assert entry is not None
    assert client.get(f"/admin/audit/auditentry/{entry.pk}/change/").status_code == 200
