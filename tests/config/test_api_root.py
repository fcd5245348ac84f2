"""``/api/v1/`` lists every resource by name with an absolute URL that answers, for a
signed-in caller only."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.common.auth import token_client
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db


def test_the_api_root_links_every_resource(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    links = client.get("/api/v1/").json()
    assert {"farms", "devices", "profiles", "members", "organizations", "rules"} <= set(links)
    for name, url in links.items():
        assert url.startswith("http://testserver/"), name
        if name != "telemetry":  # POST only
            assert client.get(url).status_code == 200, name
    assert APIClient().get("/api/v1/").status_code in (401, 403)
