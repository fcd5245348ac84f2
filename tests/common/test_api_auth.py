"""API authentication: every resource accepts the documented credentials (a token, a session),
refused credentials and anonymous requests are throttled per client address (a 429 with
Retry-After), and the production settings leave Basic auth out."""

from __future__ import annotations

import base64
import importlib
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.settings import api_settings
from rest_framework.test import APIClient

from common.accounts.services import api_token_issue
from config.env import SettingError
from tests.automation.conftest import dispatch, make_intent
from tests.common.auth import token_client
from tests.config.entry_points import SERVERS_NAMED
from tests.conftest import Tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
FAILURES_ALLOWED, ANONYMOUS_ALLOWED = 10, 60  # the default rates, per minute
ATTEMPTS = 70


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def _statuses(authorization: str | None, count: int, **extra: Any) -> list[int]:
    client = APIClient()
    if authorization is not None:
        client.credentials(HTTP_AUTHORIZATION=authorization)
    return [client.get("/api/v1/farms/", **extra).status_code for _ in range(count)]


@pytest.mark.parametrize(
    "wrong",
    [_basic("alpha", "not-the-password"), "Token not-a-token", "Token", "Basic !!"],
    ids=["basic", "token", "token-without-key", "basic-malformed"],
)
def test_refused_credentials_are_throttled_per_client_address(
    tenants: tuple[Tenant, Tenant], wrong: str
) -> None:
    statuses = _statuses(wrong, ATTEMPTS)
    assert set(statuses[:FAILURES_ALLOWED]) == {401}
    assert set(statuses[FAILURES_ALLOWED:]) == {429}
    refused = APIClient()
    refused.credentials(HTTP_AUTHORIZATION=wrong)
    assert int(refused.get("/api/v1/farms/")["Retry-After"]) > 0


def test_a_throttled_address_is_refused_even_the_right_key_and_others_are_not(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    key = api_token_issue(user=alpha.user).key
    _statuses("Token wrong-key", FAILURES_ALLOWED)
    assert _statuses(f"Token {key}", 1) == [429]  # guessing costs the guesser
    assert _statuses(f"Token {key}", 1, REMOTE_ADDR="10.0.0.2") == [200]
    assert _statuses(_basic("alpha", "pw"), 1, REMOTE_ADDR="10.0.0.3") == [200]


def test_a_forwarded_for_header_does_not_give_a_fresh_address(
    tenants: tuple[Tenant, Tenant],
) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token wrong-key")
    statuses = [
        client.get("/api/v1/farms/", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}").status_code
        for n in range(FAILURES_ALLOWED + 5)
    ]
    assert statuses[-1] == 429


def test_anonymous_requests_are_throttled(tenants: tuple[Tenant, Tenant]) -> None:
    statuses = _statuses(None, ATTEMPTS)
    assert set(statuses[:ANONYMOUS_ALLOWED]) == {401}
    assert set(statuses[ANONYMOUS_ALLOWED:]) == {429}


def test_rates_are_settings(tenants: tuple[Tenant, Tenant], settings: Any) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "auth_failure": "2/hour",
        },
    }
    assert _statuses("Token wrong-key", 3) == [401, 401, 429]


def test_a_malformed_rate_stops_start_up_naming_the_variable(monkeypatch: Any) -> None:
    from config.settings import base

    monkeypatch.setenv("API_THROTTLE_AUTH_FAILURES", "ten a minute")
    with pytest.raises(SettingError, match="API_THROTTLE_AUTH_FAILURES"):
        base._throttle_rate("API_THROTTLE_AUTH_FAILURES", "10/min")


def test_the_production_settings_have_no_basic_auth(monkeypatch: Any) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    monkeypatch.setenv("WEBHOOK_SECRET_KEY", secrets.token_urlsafe(50))
    monkeypatch.setenv("DJANGO_ALLOWED_HOSTS", "farm.example.com")
    for name, url in SERVERS_NAMED.items():  # production runs no embedded server
        if not os.environ.get(name, "").strip():
            monkeypatch.setenv(name, url)
    production = importlib.import_module("config.settings.production")
    classes = production.REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]
    assert not any("Basic" in name for name in classes)
    assert "common.accounts.authentication.ApiTokenAuthentication" in classes
    assert classes[-1] == "common.accounts.authentication.AnonymousRequestThrottle"


def _api_routes() -> Iterator[URLPattern]:
    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, URLPattern]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            else:
                yield prefix, pattern

    for prefix, pattern in walk(get_resolver().url_patterns, ""):
        if prefix.startswith("api/v1/"):
            yield pattern


def _methods(pattern: URLPattern) -> list[str]:
    actions = getattr(pattern.callback, "actions", None)
    if actions is not None:
        return sorted(actions)
    view = pattern.callback.cls  # type: ignore[attr-defined]
    return [m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)]


def _id_for(user: Any, name: str, parameter: str) -> str:
    """An id the user can see: the first of the list the route belongs to (0 if empty)."""
    listing = "inbox-list" if parameter == "item_id" else f"{name.rsplit('-', 1)[0]}-list"
    response = token_client(user).get(reverse(listing))
    rows = response.json().get("results", []) if response.status_code == 200 else []
    return str(rows[0]["id"]) if rows else "0"


def test_every_api_route_accepts_a_valid_token(tenants: tuple[Tenant, Tenant]) -> None:
    """Session and token are the documented credentials: a token is never refused (401/403)
    on a resource its user may see, whatever the route; DELETE goes last."""
    alpha, _ = tenants
    # A member's writes are refused by role with a 403 of their own (test_api_members.py);
    # a superuser may call every route, so any 401/403 left here is the token's doing.
    User.objects.filter(pk=alpha.user.pk).update(is_superuser=True)
    alpha.kit.rule()
    dispatch(make_intent(alpha.kit))
    routes = [(pattern, method) for pattern in _api_routes() for method in _methods(pattern)]
    assert len({p.name for p, _ in routes}) >= 20, "the API's routes were not found"
    routes.sort(key=lambda route: route[1] == "delete")
    refused: list[str] = []
    for pattern, method in routes:
        kwargs = {
            p: _id_for(alpha.user, pattern.name or "", p) for p in pattern.pattern.regex.groupindex
        }
        url = reverse(pattern.name or "", kwargs=kwargs)
        response = getattr(token_client(alpha.user), method)(url, {}, format="json")
        if response.status_code in (401, 403):
            refused.append(f"{method.upper()} {url}: {response.status_code}")
    assert refused == []


def test_no_api_view_picks_its_own_authentication() -> None:
    """Every view takes the settings' list, so the production settings' (no Basic) hold for
    all of them; the inbox used to name Session and Basic itself, refusing tokens."""
    own = sorted(
        f"{pattern.name}: {[c.__name__ for c in view.authentication_classes]}"
        for pattern in _api_routes()
        if (view := pattern.callback.cls).authentication_classes  # type: ignore[attr-defined]
        != api_settings.DEFAULT_AUTHENTICATION_CLASSES
    )
    assert own == []


def test_the_inbox_accepts_a_session_too(client: Client, tenants: tuple[Tenant, Tenant]) -> None:
    client.login(username="alpha", password="pw")
    assert client.get("/api/v1/inbox/").status_code == 200
    assert client.get("/api/v1/farms/").status_code == 200
