"""One bound for every JSON value a caller or a device gives (``common.validators``): at most
JSON_MAX_DEPTH nested arrays/objects and JSON_MAX_BYTES encoded. It is measured without
recursion, so no depth raises ``RecursionError``; the API's body parser, the serializers, the
model fields (the admin) and the MQTT contract all refuse through it."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from rest_framework.exceptions import ParseError

from common.parsers import BODY_MAX_DEPTH, BoundedJSONParser
from common.validators import (
    JSON_MAX_BYTES,
    JSON_MAX_DEPTH,
    json_bounds_violation,
    validate_json_bounds,
)
from devices.mqtt.contract import ContractError, ContractReason, parse_state_report


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_depth_is_counted_in_containers_and_bounded_without_recursion() -> None:
    assert json_bounds_violation(nested(JSON_MAX_DEPTH)) is None
    assert json_bounds_violation(42) is None and json_bounds_violation("text") is None
    too_deep = json_bounds_violation(nested(JSON_MAX_DEPTH + 1))
    assert too_deep is not None and too_deep.code == "json_too_deep"
    abyss = json_bounds_violation(nested(100_000))  # far past Python's recursion limit
    assert abyss is not None and abyss.code == "json_too_deep"


def test_size_is_the_compact_utf8_encoding() -> None:
    assert json_bounds_violation("é" * (JSON_MAX_BYTES // 2 - 1)) is None
    too_large = json_bounds_violation("é" * (JSON_MAX_BYTES // 2))
    assert too_large is not None and too_large.code == "json_too_large"


def test_the_model_validator_refuses_with_the_code() -> None:
    with pytest.raises(ValidationError) as refused:
        validate_json_bounds(nested(JSON_MAX_DEPTH + 1))
    assert refused.value.code == "json_too_deep"


def _parse(text: str) -> Any:
    return BoundedJSONParser().parse(io.BytesIO(text.encode()), "application/json", {})


def test_the_body_parser_refuses_depth_before_anything_recurses() -> None:
    assert _parse('{"a": [1]}') == {"a": [1]}
    for depth in (BODY_MAX_DEPTH + 1, 1000, 50_000):
        with pytest.raises(ParseError, match="nested deeper"):
            _parse("[" * depth + "]" * depth)


def test_the_mqtt_contract_records_depth_with_its_own_reason() -> None:
    state = {"commandId": "cmd-1", "appliedAt": "2026-11-29T12:00:00Z"}
    for depth in (JSON_MAX_DEPTH + 1, 1000):
        raw = '{"commandId":"cmd-1","appliedAt":"2026-11-29T12:00:00Z","reportedState":'
        raw += "[" * depth + "]" * depth + "}"
        with pytest.raises(ContractError) as refused:
            parse_state_report(raw.encode())
        assert refused.value.reason_code is ContractReason.JSON_TOO_DEEP
    fine = json.dumps({**state, "reportedState": {"io1": True}}).encode()
    assert parse_state_report(fine).reported_state == {"io1": True}
