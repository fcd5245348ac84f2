"""The OpenAPI schema is one a client generator (openapi-python-client) can build a working
client from: a request body has its own component without read-only fields, is JSON only,
every error status an operation can answer names the one ``Error`` shape, and operation ids
and tags are readable and unique. A form body from a client is a 415 in that shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from common.schema import ERROR_SCHEMA
from devices.models import Farm
from tests.common.auth import token_client
from tests.conftest import Tenant

Schema = dict[str, Any]
Operation = tuple[str, str, dict[str, Any]]
ERROR_REF = "#/components/schemas/Error"


@pytest.fixture(scope="module")
def schema(django_db_setup: None, django_db_blocker: Any) -> Iterator[Schema]:
    """What ``/api/schema/`` serves (public, as a client generator reads it)."""
    with django_db_blocker.unblock():
        yield SchemaGenerator().get_schema(request=None, public=True)


def _operations(schema: Schema) -> list[Operation]:
    return [
        (path, method, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    ]


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"].rsplit("/", 1)[-1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _request_schemas(schema: Schema) -> dict[str, Any]:
    """Every schema a request body uses, the components it refers to included."""
    components = schema["components"]["schemas"]
    found: dict[str, Any] = {}
    todo: list[tuple[str, Any]] = []
    for path, method, operation in _operations(schema):
        for media, content in operation.get("requestBody", {}).get("content", {}).items():
            todo.append((f"{method} {path} {media}", content["schema"]))
    while todo:
        name, node = todo.pop()
        if name in found:
            continue
        found[name] = node
        todo += [(ref, components[ref]) for ref in _refs(node) if ref not in found]
    return found


def _required_read_only(node: Any) -> list[str]:
    if isinstance(node, list):
        return [f for item in node for f in _required_read_only(item)]
    if not isinstance(node, dict):
        return []
    properties = node.get("properties", {})
    bad = [f for f in node.get("required", []) if properties.get(f, {}).get("readOnly")]
    return bad + [f for value in node.values() for f in _required_read_only(value)]


def test_no_request_body_requires_a_read_only_field(schema: Schema) -> None:
    used = _request_schemas(schema)
    for name in ("Organization", "Rule", "ReminderSetting", "ReportSubscription", "UserMessage"):
        assert f"{name}Request" in used, f"{name} has no request component of its own"
        assert name not in used, f"{name} (the response) is still used as a request body"
    bad = {name: fields for name, node in used.items() if (fields := _required_read_only(node))}
    assert bad == {}


def test_request_bodies_are_json_only(schema: Schema) -> None:
    media = {
        f"{method} {path}": sorted(operation["requestBody"]["content"])
        for path, method, operation in _operations(schema)
        if "requestBody" in operation
    }
    assert media, "no operation takes a body"
    assert {k: v for k, v in media.items() if v != ["application/json"]} == {}


def _error_ref(operation: dict[str, Any], status: str) -> str | None:
    response = operation["responses"].get(status, {})
    ref: str | None = (
        response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
    )
    return ref


def test_operations_name_the_errors_they_can_answer(schema: Schema) -> None:
    assert schema["components"]["schemas"]["Error"] == ERROR_SCHEMA
    missing = []
    for path, method, operation in _operations(schema):
        where = f"{method} {path}"
        needed = set()
        if "requestBody" in operation:
            needed |= {"400", "413", "415"}
        if operation.get("security") and {} not in operation["security"]:
            needed.add("401")
        if any(p["in"] == "path" for p in operation.get("parameters", [])):
            needed.add("404")
        missing += [f"{where} {s}" for s in sorted(needed) if _error_ref(operation, s) != ERROR_REF]
        assert _error_ref(operation, "429") == ERROR_REF, where
    assert missing == []
    operations = {f"{m} {p}": o for p, m, o in _operations(schema)}
    farms = operations["get /api/v1/farms/"]["responses"]
    assert {"400", "401", "403", "404", "429"} <= set(farms)  # a filter, a role, a page
    assert "413" not in farms and "415" not in farms
    create = operations["post /api/v1/farms/"]["responses"]
    assert _error_ref(operations["post /api/v1/farms/"], "422") == ERROR_REF  # Idempotency-Key
    assert "404" not in create
    # A signed-in caller's own token: no role to lack, so no 403; a view's own 404 keeps its
    # description, and its body is the Error it is answered with.
    token = operations["get /api/v1/auth/token/"]["responses"]
    assert "401" in token and "403" not in token
    assert _error_ref(operations["get /api/v1/auth/token/"], "404") == ERROR_REF
    assert token["404"]["description"].startswith("not_found: the caller has no token")
    # A response a view declares keeps its body (telemetry's 422 is the ingest result) ...
    ingest = operations["post /api/v1/telemetry/"]
    assert _error_ref(ingest, "422") != ERROR_REF and _error_ref(ingest, "400") == ERROR_REF
    # ... and an error declared with a description alone says the body is an Error.
    command = operations["post /api/v1/endpoints/{id}/command/"]
    assert _error_ref(command, "409") == ERROR_REF
    assert command["responses"]["409"]["description"].startswith("conflict")


def test_the_error_component_is_what_the_api_answers(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    answers = [
        client.post("/api/v1/farms/", {"name": 7}),  # invalid, with fields
        client.post("/api/v1/farms/", "{", content_type="application/json"),  # parse_error
        client.get("/api/v1/farms/999999/"),  # not_found
        APIClient().get("/api/v1/farms/"),  # not_authenticated
        client.post("/api/v1/farms/", {"name": "x"}, format="multipart"),  # 415
    ]
    assert [a.status_code for a in answers] == [400, 400, 404, 401, 415]
    for answer in answers:
        jsonschema.validate(answer.json(), ERROR_SCHEMA)
        assert set(answer.json()) <= set(ERROR_SCHEMA["properties"])


def test_operation_ids_are_readable_and_unique(schema: Schema) -> None:
    ids = [operation["operationId"] for _, _, operation in _operations(schema)]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert [i for i in ids if i.startswith("v1_") or "-" in i] == []
    expected = {
        "farms_list",
        "farms_create",
        "farms_retrieve",
        "farms_partial_update",
        "endpoint_command",
        "endpoint_hold_cancel",
        "commands_retry",
        "commands_mark_failed",
        "devices_change_status",
        "telemetry_ingest",
        "inbox_list",
        "api_root",
    }
    assert expected <= set(ids), sorted(expected - set(ids))


def test_each_operation_has_one_tag_its_resource(schema: Schema) -> None:
    tags = {
        f"{method} {path}": operation.get("tags", [])
        for path, method, operation in _operations(schema)
    }
    assert [k for k, v in tags.items() if len(v) != 1 or v == ["v1"]] == []
    assert tags["post /api/v1/farms/"] == ["farms"]
    assert tags["post /api/v1/commands/{id}/retry/"] == ["commands"]
    assert tags["post /api/v1/endpoints/{id}/command/"] == ["endpoints"]
    assert {"farms", "devices", "rules", "commands", "reminder-settings"} <= {
        t for v in tags.values() for t in v
    }


def test_a_read_only_choice_a_row_may_leave_blank_lists_the_blank(schema: Schema) -> None:
    """DRF drops ``allow_blank`` from a model's read-only field; a due-work row that has not
    failed has ``failure_reason_code: ""``, which a generated client must be able to read."""
    reason = schema["components"]["schemas"]["Scheduler"]["properties"]["failure_reason_code"]
    assert {"$ref": "#/components/schemas/BlankEnum"} in reason["oneOf"]


def test_the_schema_is_valid_openapi(schema: Schema) -> None:
    validate_schema(schema)


@pytest.mark.parametrize("form", ["multipart", "urlencoded"])
def test_a_form_body_is_a_415(tenants: tuple[Tenant, Tenant], form: str) -> None:
    alpha, _ = tenants
    client = token_client(alpha.user)
    body = {"organization": alpha.kit.farm.organization_id, "name": "North"}
    if form == "multipart":
        response = client.post("/api/v1/farms/", body, format="multipart")
    else:
        text = f"organization={body['organization']}&name=North"
        response = client.post(
            "/api/v1/farms/", text, content_type="application/x-www-form-urlencoded"
        )
    assert response.status_code == 415, response.content[:300]
    assert response.json()["code"] == "unsupported_media_type"
    assert not Farm.objects.filter(name="North").exists()


def test_the_browsable_api_still_posts_its_forms(tenants: tuple[Tenant, Tenant]) -> None:
    """Its HTML form asks for HTML back; a form from it is parsed as before."""
    alpha, _ = tenants
    client = APIClient()
    client.force_login(alpha.user)
    body = {"organization": alpha.kit.farm.organization_id, "name": "North"}
    response = client.post("/api/v1/farms/", body, format="multipart", HTTP_ACCEPT="text/html")
    assert response.status_code == 201, response.content[:300]
    assert Farm.objects.filter(name="North").exists()
    page = client.get("/api/v1/farms/", HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and b"<form" in page.content
