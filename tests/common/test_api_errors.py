"""Every error under /api/ is JSON in one shape, ``{"code", "detail", "fields"?}``, whoever
answered it: DRF's exceptions, Django's own 400/404/500 handlers, a body over the upload limit
(413, not an HTML 400). Outside /api/ Django's pages are unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from automation.models import AutomationRule
from devices.api import FarmViewSet
from tests.automation.test_api import _client, _rule
from tests.conftest import Tenant

pytestmark = pytest.mark.django_db


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert body["code"] == code and isinstance(body["detail"], str) and body["detail"], body
    return body


def test_a_body_over_the_upload_limit_is_a_json_413(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    big = {**_rule(alpha), "name": "x" * (10 * 1024 * 1024)}
    as_json = client.post("/api/v1/rules/", json.dumps(big), content_type="application/json")
    body = _error(as_json, 413, "request_too_large")
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in body["detail"]
    as_form = client.post("/api/v1/rules/", big, format="multipart")  # refused unread
    _error(as_form, 415, "unsupported_media_type")
    assert not AutomationRule.objects.exists()


def test_validation_errors_name_their_fields(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    response = _client(alpha.user).post(
        "/api/v1/rules/", _rule(alpha, operator="sideways"), format="json"
    )
    body = _error(response, 400, "invalid")
    assert list(body["fields"]) == ["operator"] and "operator" in body["detail"]


def test_malformed_json_is_a_json_400(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    for text in ('{"name": ', '{"threshold_value": NaN}', '{"threshold_value": 1e999}'):
        response = client.post("/api/v1/rules/", text, content_type="application/json")
        _error(response, 400, "parse_error")


def test_unknown_path_and_wrong_method_are_json(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = _client(alpha.user)
    _error(client.get("/api/v1/no-such-resource/"), 404, "not_found")
    _error(client.get("/api/v1/rules/999999/"), 404, "not_found")
    _error(client.delete("/api/v1/diagnostics/"), 405, "method_not_allowed")
    anonymous = APIClient().get("/api/v1/rules/")
    _error(anonymous, anonymous.status_code, "not_authenticated")
    assert anonymous.status_code in (401, 403)
    csv = client.post("/api/v1/rules/", "x", content_type="text/csv")
    _error(csv, 415, "unsupported_media_type")


def test_an_unexpected_failure_is_a_json_500_and_is_logged(
    tenants: tuple[Tenant, Tenant],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    alpha, _ = tenants

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug, not the caller's fault")

    monkeypatch.setattr(FarmViewSet, "scoped", broken)
    client = _client(alpha.user)
    client.raise_request_exception = False
    body = _error(client.get("/api/v1/farms/"), 500, "server_error")
    assert "a bug" not in body["detail"]  # nothing internal leaks to the client
    assert any("a bug" in str(r.exc_info) for r in caplog.records if r.exc_info)


def test_pages_outside_the_api_keep_djangos_own_errors(client: Any) -> None:
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")
