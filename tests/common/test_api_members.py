"""Organisations and members over the API: a member reads, an admin of the organisation
manages its members, a superuser does everything; another organisation's rows are a 404 and
an organisation keeps at least one admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from common.models import MemberRole, OrganizationMember
from tests.common.auth import token_client
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db


def _membership(tenant: Tenant) -> OrganizationMember:
    return OrganizationMember.objects.get(user=tenant.user)


def _make_admin(tenant: Tenant) -> None:
    OrganizationMember.objects.filter(user=tenant.user).update(role=MemberRole.ADMIN)


def test_the_caller_lists_their_organisations_only(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    client = token_client(alpha.user)
    listed = [o["id"] for o in client.get("/api/v1/organizations/").json()["results"]]
    assert listed == [alpha.kit.farm.organization_id]
    assert client.get(f"/api/v1/organizations/{beta.kit.farm.organization_id}/").status_code == 404
    refused = client.post("/api/v1/organizations/", {"name": "New"}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"


def test_a_superuser_creates_organisations(tenants: tuple[Tenant, Tenant]) -> None:
    root = User.objects.create_superuser("root", "r@example.com", "pw")
    client = token_client(root)
    made = client.post("/api/v1/organizations/", {"name": "Acme"}, format="json")
    assert made.status_code == 201 and made.json()["name"] == "Acme"
    again = client.post("/api/v1/organizations/", {"name": "Acme"}, format="json")
    assert again.status_code == 400 and "name" in again.json()["fields"]


def test_an_admin_adds_re_roles_and_removes_members(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    _make_admin(alpha)
    client = token_client(alpha.user)
    org = alpha.kit.farm.organization_id
    User.objects.create_user("carol")
    by_name = client.post(
        "/api/v1/members/", {"organization": org, "username": "carol"}, format="json"
    )
    assert by_name.status_code == 201 and by_name.json()["role"] == "viewer"
    by_id = client.post(
        "/api/v1/members/",
        {"organization": org, "user": beta.user.pk, "role": "admin"},
        format="json",
    )
    assert by_id.status_code == 201 and by_id.json()["username"] == "beta"
    twice = client.post("/api/v1/members/", {"organization": org, "username": "carol"})
    assert twice.status_code == 400 and "user" in twice.json()["fields"]
    unknown = client.post("/api/v1/members/", {"organization": org, "username": "nobody"})
    assert unknown.status_code == 400 and "username" in unknown.json()["fields"]
    carol = by_name.json()["id"]
    promoted = client.patch(f"/api/v1/members/{carol}/", {"role": "admin"}, format="json")
    assert promoted.status_code == 200 and promoted.json()["role"] == "admin"
    assert client.delete(f"/api/v1/members/{carol}/").status_code == 204
    assert not OrganizationMember.objects.filter(pk=carol).exists()
    listed = client.get(f"/api/v1/members/?organization={org}").json()["results"]
    assert sorted(m["username"] for m in listed) == ["alpha", "beta"]


def test_a_viewer_reads_but_does_not_write(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    OrganizationMember.objects.filter(user=alpha.user).update(role=MemberRole.VIEWER)
    client = token_client(alpha.user)
    org = alpha.kit.farm.organization_id
    mine = _membership(alpha).pk
    assert client.get("/api/v1/members/").status_code == 200
    User.objects.create_user("dave")
    writes = [
        client.post("/api/v1/members/", {"organization": org, "username": "dave"}),
        client.patch(f"/api/v1/members/{mine}/", {"role": "admin"}, format="json"),
        client.delete(f"/api/v1/members/{mine}/"),
    ]
    assert [w.status_code for w in writes] == [403, 403, 403]
    assert _membership(alpha).role == MemberRole.VIEWER


def test_another_organisations_members_are_not_there(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    _make_admin(alpha)
    client = token_client(alpha.user)
    theirs = _membership(beta).pk
    assert client.get(f"/api/v1/members/{theirs}/").status_code == 404
    assert client.delete(f"/api/v1/members/{theirs}/").status_code == 404
    add = {"organization": beta.kit.farm.organization_id, "username": "alpha"}
    refused = client.post("/api/v1/members/", add, format="json")
    assert refused.status_code == 400 and "organization" in refused.json()["fields"]
    assert OrganizationMember.objects.filter(user=alpha.user).count() == 1


def test_the_last_admin_stays(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    _make_admin(alpha)
    client = token_client(alpha.user)
    mine = _membership(alpha).pk
    demoted = client.patch(f"/api/v1/members/{mine}/", {"role": "viewer"}, format="json")
    assert demoted.status_code == 400 and "role" in demoted.json()["fields"]
    assert client.delete(f"/api/v1/members/{mine}/").status_code == 400
    assert _membership(alpha).role == MemberRole.ADMIN
    root = User.objects.create_superuser("root", "r@example.com", "pw")
    assert token_client(root).delete(f"/api/v1/members/{mine}/").status_code == 204


@pytest.mark.parametrize("resource", ["members", "organizations"])
def test_list_queries_do_not_grow_with_the_rows(
    tenants: tuple[Tenant, Tenant], resource: str
) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/api/v1/{resource}/").status_code == 200
        return len(queries)

    count()
    before = count()
    for n in range(5):
        user = User.objects.create_user(f"extra{n}")
        OrganizationMember.objects.create(user=user, organization=alpha.kit.farm.organization)
    assert count() == before
