"""Who may scrape /metrics (it queries the database on every scrape and counts across
organisations): with METRICS_TOKEN set, only a request bearing it; without, only a loopback
client that no proxy forwarded."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db
TOKEN = "scrape-token-0123456789"


def test_with_a_token_set_a_scrape_needs_it(client: Client, settings) -> None:
    settings.METRICS_TOKEN = TOKEN
    anonymous = client.get("/metrics")
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    assert b"farm_" not in anonymous.content
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer sträng").status_code == 401
    granted = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", REMOTE_ADDR="10.0.0.5")
    assert granted.status_code == 200 and b"farm_backlog" in granted.content


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_without_a_token_a_loopback_client_may_scrape(client: Client, settings, address) -> None:
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics", REMOTE_ADDR=address).status_code == 200


@pytest.mark.parametrize(
    "request_meta",
    [
        {"REMOTE_ADDR": "10.0.0.5"},
        {"REMOTE_ADDR": "203.0.113.7"},
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.7"},
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_FORWARDED": "for=203.0.113.7"},
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_REAL_IP": "203.0.113.7"},
    ],
)
def test_without_a_token_anyone_else_is_refused(client: Client, settings, request_meta) -> None:
    settings.METRICS_TOKEN = ""
    response = client.get("/metrics", **request_meta)
    assert response.status_code == 403 and b"METRICS_TOKEN" in response.content
