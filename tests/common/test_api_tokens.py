"""API tokens: stored as digests, shown once, visible to superusers only in the admin, rotated
by their user (API and admin), expiring, and every token made through the token service."""

from __future__ import annotations

import ast
import hashlib
import re
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from common.accounts.models import ApiToken
from common.accounts.services import api_token_issue
from tests.conftest import Tenant
from tests.migrating import migrate_to

pytestmark = pytest.mark.django_db
TOKEN_URL = "/admin/accounts/apitoken/"
ROOT = Path(__file__).resolve().parents[2]


def _with_key(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _works(key: str) -> bool:
    status = _with_key(key).get("/api/v1/").status_code
    assert status in (200, 401), status
    return status == 200


def _admin_list_urls() -> list[str]:
    return [
        f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        for model in admin.site._registry
    ]


def test_a_key_is_stored_only_as_its_digest(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    issued = api_token_issue(user=alpha.user)
    row = ApiToken.objects.values().get(user=alpha.user)
    assert row["digest"] == hashlib.sha256(issued.key.encode()).hexdigest()
    assert row["prefix"] == issued.key[:8] and len(issued.key) >= 40
    assert all(issued.key not in str(value) for value in row.values())
    assert _works(issued.key)
    assert not _works(issued.key[:-1] + ("A" if issued.key[-1] != "A" else "B"))


def test_staff_with_every_view_permission_see_no_token_in_the_admin(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    api_token_issue(user=alpha.user)
    theirs = api_token_issue(user=beta.user)
    alpha.user.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))
    client.login(username="alpha", password="pw")
    assert client.get(TOKEN_URL).status_code == 403
    for url in _admin_list_urls():
        page = client.get(url)
        assert theirs.key.encode() not in page.content, url
        assert theirs.token.prefix.encode() not in page.content, url
    index = client.get("/admin/").content
    # The menu lists no token model; the user links lead to the caller's own token only.
    assert f'href="{TOKEN_URL}"'.encode() not in index and b"API tokens" not in index
    assert f'id="api-token-link" href="{TOKEN_URL}mine/"'.encode() in index


def test_a_superuser_issues_a_token_in_the_admin_and_sees_the_key_once(
    support: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, _ = tenants
    page = support.post(f"{TOKEN_URL}add/", {"user": alpha.user.pk})
    assert page.status_code == 200 and "no-store" in page["Cache-Control"]
    key = re.search(rb"<code>([A-Za-z0-9_-]{40,})</code>", page.content)
    assert key is not None
    assert _works(key.group(1).decode())
    token = ApiToken.objects.get(user=alpha.user)
    for url in (TOKEN_URL, f"{TOKEN_URL}{token.pk}/change/"):
        shown = support.get(url)
        assert shown.status_code == 200 and key.group(1) not in shown.content
        assert token.prefix.encode() in shown.content


def test_a_superuser_rotates_selected_tokens_in_the_admin(
    support: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, _ = tenants
    old = api_token_issue(user=alpha.user)
    page = support.post(TOKEN_URL, {"action": "rotate", "_selected_action": [str(old.token.pk)]})
    new = re.search(rb"<code>([A-Za-z0-9_-]{40,})</code>", page.content)
    assert new is not None and _works(new.group(1).decode())
    assert not _works(old.key)


def test_a_staff_user_rotates_their_own_token_in_the_admin(
    client: Client, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, beta = tenants
    old, theirs = api_token_issue(user=alpha.user), api_token_issue(user=beta.user)
    client.login(username="alpha", password="pw")
    page = client.get(f"{TOKEN_URL}mine/")
    assert page.status_code == 200 and old.token.prefix.encode() in page.content
    page = client.post(f"{TOKEN_URL}mine/")
    new = re.search(rb"<code>([A-Za-z0-9_-]{40,})</code>", page.content)
    assert new is not None and _works(new.group(1).decode())
    assert not _works(old.key) and _works(theirs.key)


def test_a_user_rotates_their_own_token_over_the_api(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, beta = tenants
    old, theirs = api_token_issue(user=alpha.user), api_token_issue(user=beta.user)
    shown = _with_key(old.key).get("/api/v1/auth/token/")
    assert shown.status_code == 200 and shown.json()["prefix"] == old.token.prefix
    assert "key" not in shown.json()
    rotated = _with_key(old.key).post("/api/v1/auth/token/rotate/")
    assert rotated.status_code == 201 and rotated["Cache-Control"] == "no-store"
    new = rotated.json()["key"]
    assert _works(new) and not _works(old.key) and _works(theirs.key)
    assert rotated.json()["expires_at"] is not None
    assert APIClient().post("/api/v1/auth/token/rotate/").status_code == 401


def test_an_expired_token_or_an_inactive_user_is_refused(
    tenants: tuple[Tenant, Tenant], settings: Any
) -> None:
    alpha, beta = tenants
    settings.API_TOKEN_TTL_DAYS = 30
    expired = api_token_issue(user=alpha.user, now=timezone.now() - timedelta(days=31))
    assert not _works(expired.key)
    live = api_token_issue(user=beta.user)
    assert _works(live.key)
    User.objects.filter(pk=beta.user.pk).update(is_active=False)
    assert not _works(live.key)


def test_use_is_recorded(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    issued = api_token_issue(user=alpha.user)
    assert issued.token.last_used_at is None
    assert _works(issued.key)
    assert ApiToken.objects.get(pk=issued.token.pk).last_used_at is not None


def test_the_management_command_prints_a_working_key_once(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    out, err = StringIO(), StringIO()
    call_command("api_token", alpha.user.username, stdout=out, stderr=err)
    key = out.getvalue().strip()
    assert _works(key) and key not in err.getvalue()
    call_command("api_token", alpha.user.username, "--revoke", stdout=StringIO())
    assert not _works(key)


@pytest.mark.django_db(transaction=True)
def test_plain_tokens_of_drf_authtoken_become_hashed_rows() -> None:
    """The data migration: an old plain key keeps working, and its plain table is gone."""
    user = User.objects.create_user(username="legacy", password="pw")
    legacy_key = "0123456789abcdef0123456789abcdef01234567"
    migrate_to([("accounts", "0001_initial")])
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
            "created timestamp with time zone NOT NULL, user_id integer NOT NULL)"
            if connection.vendor == "postgresql"
            else "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
            "created datetime NOT NULL, user_id integer NOT NULL)"
        )
        cursor.execute(
            "INSERT INTO authtoken_token (key, created, user_id) VALUES (%s, %s, %s)",
            [legacy_key, timezone.now(), user.pk],
        )
    migrate_to()  # every app, dependants included
    assert "authtoken_token" not in connection.introspection.table_names()
    token = ApiToken.objects.get(user=user)
    assert token.digest == hashlib.sha256(legacy_key.encode()).hexdigest()
    assert token.expires_at is not None
    assert _works(legacy_key)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_module_makes_tokens_outside_the_token_service() -> None:
    """DRF's plain-text token model is gone: nothing imports it, product or tests."""
    skip = {".venv", ".venv-codegen", ".git", "var"}
    offenders = sorted(
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*.py")
        if not skip.intersection(path.relative_to(ROOT).parts[:1])
        and any(name.startswith("rest_framework.authtoken") for name in _imports(path))
    )
    assert offenders == []
