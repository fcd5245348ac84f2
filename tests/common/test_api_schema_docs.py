"""The API docs (``/api/docs/``, from ``/api/schema/``) are ones an integrator can work from:
Swagger UI's Authorize takes the API's token, every operation has a summary and a
description of its own, example bodies hold values of their fields' types (a threshold is a
number, a priority an ordinary one), every error an operation answers is declared in the one
``Error`` shape, and what a person reads says "command", never "intent"."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from automation.models.rules import PRIORITY_MAX, PRIORITY_MIN
from common.accounts.schema import TOKEN_SCHEME
from common.schema import ERROR_SCHEMA
from tests.common.auth import api_key
from tests.conftest import Tenant

Schema = dict[str, Any]
ERROR_REF = "#/components/schemas/Error"
# Every field that holds an endpoint's value (a number, a boolean or an enum's text).
ENDPOINT_VALUES = {
    "Rule": ("threshold_value", "threshold_value_high", "target_value", "max_on_value"),
    "RuleRequest": ("threshold_value", "threshold_value_high", "target_value", "max_on_value"),
    "PatchedRuleRequest": (
        "threshold_value",
        "threshold_value_high",
        "target_value",
        "max_on_value",
    ),
    "RuleCondition": ("threshold_value", "threshold_value_high"),
    "RuleConditionRequest": ("threshold_value", "threshold_value_high"),
    "RuleAction": ("target_value", "max_on_value"),
    "RuleActionRequest": ("target_value", "max_on_value"),
    "Command": ("target_value", "max_on_value"),
    "ManualCommandRequest": ("value", "max_on_value"),
    "InstanceEndpoint": ("last_value",),
    "RolloutCreateRequest": ("value",),
    "Rollout": ("value",),
}


@pytest.fixture(scope="module")
def schema(django_db_setup: None, django_db_blocker: Any) -> Iterator[Schema]:
    """What ``/api/schema/`` serves (public, as Swagger UI and a client generator read it)."""
    with django_db_blocker.unblock():
        yield SchemaGenerator().get_schema(request=None, public=True)


def _operations(schema: Schema) -> dict[str, dict[str, Any]]:
    return {
        f"{method} {path}": operation
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }


def test_every_operation_has_a_summary_and_a_description_of_its_own(schema: Schema) -> None:
    operations = _operations(schema)
    assert len(operations) > 90
    no_summary = [k for k, o in operations.items() if not o.get("summary", "").strip()]
    assert no_summary == []
    long = [k for k, o in operations.items() if "\n" in o["summary"] or len(o["summary"]) > 60]
    assert long == []
    no_description = [k for k, o in operations.items() if not o.get("description", "").strip()]
    assert no_description == []
    shared = Counter(o["description"] for o in operations.values())
    repeated = {
        k: o["description"][:60] for k, o in operations.items() if shared[o["description"]] > 1
    }
    assert repeated == {}
    summaries = Counter(o["summary"] for o in operations.values())
    assert [s for s, n in summaries.items() if n > 1] == []
    # The class docstring that once described every rules operation as a DELETE.
    rules = [o for k, o in operations.items() if " /api/v1/rules/" in k]
    assert [o["summary"] for o in rules if o["description"].startswith("``DELETE``")] == []


def test_swagger_ui_authorizes_with_the_api_token(schema: Schema) -> None:
    scheme = schema["components"]["securitySchemes"][TOKEN_SCHEME]
    assert {k: scheme[k] for k in ("type", "in", "name")} == {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
    }
    assert "`Token <key>`" in scheme["description"]
    unsigned = [
        key
        for key, operation in _operations(schema).items()
        if operation["security"][:1] != [{TOKEN_SCHEME: []}]
    ]
    assert unsigned == []  # the token is what every operation asks for first


def test_the_header_the_scheme_describes_signs_a_client_in(
    schema: Schema, tenants: tuple[Tenant, Tenant]
) -> None:
    alpha, _ = tenants
    scheme = schema["components"]["securitySchemes"][TOKEN_SCHEME]
    prefix = re.search(r"`(\S+) <key>`", scheme["description"])
    assert prefix is not None
    header = {f"HTTP_{scheme['name'].upper()}": f"{prefix[1]} {api_key(alpha.user)}"}
    assert APIClient().get("/api/v1/farms/", **header).status_code == 200


def _error_body(response: dict[str, Any]) -> str | None:
    ref: str | None = (
        response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
    )
    return ref


def test_every_error_an_operation_declares_has_the_error_shape(schema: Schema) -> None:
    other = {
        f"{key} {status}": _error_body(response)
        for key, operation in _operations(schema).items()
        for status, response in operation["responses"].items()
        if status[0] in "45" and _error_body(response) != ERROR_REF
    }
    # Telemetry's 422 is the ingest result, each rejection listed: not an error body.
    assert other == {"post /api/v1/telemetry/ 422": "#/components/schemas/IngestResult"}


def test_telemetry_declares_its_404_for_an_unknown_serial(
    schema: Schema, tenants: tuple[Tenant, Tenant]
) -> None:
    declared = _operations(schema)["post /api/v1/telemetry/"]["responses"]["404"]
    assert _error_body(declared) == ERROR_REF and "serial" in declared["description"]
    alpha, beta = tenants
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key(alpha.user)}")
    batch = {"messages": [{"serial": beta.kit.sensor.serial_number, "payload": {"values": {}}}]}
    answer = client.post("/api/v1/telemetry/", batch, format="json")
    assert answer.status_code == 404
    jsonschema.validate(answer.json(), ERROR_SCHEMA)
    assert answer.json()["code"] == "not_found"


def test_a_caller_without_a_token_gets_the_declared_404(
    schema: Schema, tenants: tuple[Tenant, Tenant]
) -> None:
    declared = _operations(schema)["get /api/v1/auth/token/"]["responses"]["404"]
    assert _error_body(declared) == ERROR_REF
    alpha, _ = tenants
    client = APIClient()
    client.force_login(alpha.user)  # signed in by session: no token issued
    answer = client.get("/api/v1/auth/token/")
    assert answer.status_code == 404
    jsonschema.validate(answer.json(), ERROR_SCHEMA)
    assert answer.json()["code"] == "not_found"


def test_an_endpoint_value_is_typed_a_number_first(schema: Schema) -> None:
    components = schema["components"]["schemas"]
    untyped = {}
    for component, names in ENDPOINT_VALUES.items():
        for name in names:
            field = components[component]["properties"][name]
            kinds = [alternative.get("type") for alternative in field.get("oneOf", [])]
            if kinds != ["number", "boolean", "string"]:
                untyped[f"{component}.{name}"] = field
    assert untyped == {}


def _resolve(node: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = components[node["$ref"].rsplit("/", 1)[-1]]
    return node


_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _mismatches(value: Any, node: dict[str, Any], components: dict[str, Any], at: str) -> list[str]:
    """Where ``value`` is not of the type its schema names (the types only: enough to catch
    a number written as text)."""
    node = _resolve(node, components)
    if value is None:
        return [] if node.get("nullable") or None in node.get("enum", []) else [f"{at}: null"]
    if "oneOf" in node or "anyOf" in node:
        options = node.get("oneOf") or node["anyOf"]
        fits = any(not _mismatches(value, o, components, at) for o in options)
        return [] if fits else [f"{at}: {value!r} fits none of its types"]
    found = [m for part in node.get("allOf", []) for m in _mismatches(value, part, components, at)]
    kind = node.get("type")
    if kind in _TYPES:
        bad_bool = isinstance(value, bool) and kind in ("integer", "number")
        if bad_bool or not isinstance(value, _TYPES[kind]):
            return [*found, f"{at}: {value!r} is not a {kind}"]
    if "enum" in node and value not in node["enum"]:
        found.append(f"{at}: {value!r} is not one of its choices")
    if isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            found += _mismatches(item, node["items"], components, f"{at}[{i}]")
    if isinstance(value, dict):
        for name, item in value.items():
            if name in node.get("properties", {}):
                found += _mismatches(item, node["properties"][name], components, f"{at}.{name}")
    return found


def _examples(schema: Schema) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """Every example body: where it is shown, its value, and the schema it illustrates."""
    for key, operation in _operations(schema).items():
        bodies = [("request", operation.get("requestBody", {}))]
        bodies += [(status, r) for status, r in operation["responses"].items()]
        for where, body in bodies:
            for media in body.get("content", {}).values():
                for name, example in media.get("examples", {}).items():
                    yield f"{key} {where} {name}", example["value"], media["schema"]


def test_every_example_holds_values_of_its_fields_types(schema: Schema) -> None:
    components = schema["components"]["schemas"]
    examples = list(_examples(schema))
    shown = {where.split(" ")[1] for where, _, _ in examples}
    assert {"/api/v1/rules/", "/api/v1/rollouts/", "/api/v1/endpoints/{id}/command/"} <= shown
    bad = [m for at, value, node in examples for m in _mismatches(value, node, components, at)]
    assert bad == []


def _priorities(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for name, item in value.items():
            yield from [item] if name == "priority" else _priorities(item)
    elif isinstance(value, list):
        for item in value:
            yield from _priorities(item)


def test_a_priority_is_shown_as_an_ordinary_one(schema: Schema) -> None:
    """Not at a bound (Swagger UI's own pick for a bounded number), in examples and fields."""
    ordinary = range(PRIORITY_MIN + 1, PRIORITY_MAX)
    shown = [p for _, value, _ in _examples(schema) for p in _priorities(value)]
    assert shown and all(isinstance(p, int) and p in ordinary for p in shown), shown
    fields = {
        name: field.get("example", field.get("default"))
        for name, node in schema["components"]["schemas"].items()
        if (field := node.get("properties", {}).get("priority")) is not None
    }
    assert {"Rule", "RuleRequest", "RolloutCreateRequest"} <= set(fields)
    assert {k: v for k, v in fields.items() if v not in ordinary} == {}


def test_what_a_person_reads_says_command_not_intent(
    schema: Schema, tenants: tuple[Tenant, Tenant]
) -> None:
    words: list[str] = []

    def texts(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("summary", "description", "title") and isinstance(value, str):
                    words.append(value)
                texts(value)
        elif isinstance(node, list):
            for value in node:
                texts(value)

    texts(schema)
    tags = [tag for operation in _operations(schema).values() for tag in operation["tags"]]
    named = [*schema["components"]["schemas"], *tags]
    # ``intent_created`` is a value on the wire, not a word for people: its label is not.
    assert [w for w in words + named if re.search(r"intent(?!_created)", w, re.IGNORECASE)] == []
    alpha, _ = tenants
    client = APIClient()
    client.force_login(alpha.user)
    page = client.get("/api/v1/commands/", HTTP_ACCEPT="text/html").content.decode()
    assert "Command List" in page and "Intent" not in page
