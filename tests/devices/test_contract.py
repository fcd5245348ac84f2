"""The firmware contract (docs/spec.md §3.7): what the backend sends and accepts, byte for byte.

A parser returns a typed payload or raises ContractError with a reason code, and nothing
else, whatever arrives on the wire: that is what lets the bridge record and drop a
malformed message instead of crashing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devices.mqtt.contract import (
    COMMAND_ID_MAX_CHARS,
    MAX_PAYLOAD_BYTES,
    ContractError,
    ContractReason,
    ResultCode,
    RpcRequest,
    RpcResponse,
    RpcStatus,
    StateReport,
    TopicKind,
    parse_rpc_request,
    parse_rpc_response,
    parse_state_report,
    parse_topic,
    rpc_request_topic,
    rpc_response_topic,
    state_topic,
    telemetry_payload,
    telemetry_topic,
)

SENT_AT = datetime(2025, 3, 1, 8, 30, 0, tzinfo=UTC)
PARSERS = [parse_rpc_request, parse_rpc_response, parse_state_report]


def _request_doc(**overrides: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "commandId": "cmd_01JN8ZQ4Y3M5V6W7X8Y9Z0ABCD",
        "method": "setIO",
        "params": {"io1": True},
        "sentAt": "2025-03-01T08:30:00Z",
        "deadlineAt": "2025-03-01T08:30:10Z",
    }
    doc.update(overrides)
    return doc


def _response_doc(**overrides: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "commandId": "cmd_1",
        "status": "accepted",
        "resultCode": "ok",
        "message": None,
    }
    doc.update(overrides)
    return doc


def _state_doc(**overrides: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "commandId": "cmd_1",
        "reportedState": {"io1": True},
        "appliedAt": "2025-03-01T08:30:01Z",
    }
    doc.update(overrides)
    return doc


def _raw(doc: object) -> bytes:
    return json.dumps(doc).encode()


def _reason(parser, raw: bytes) -> ContractReason:
    with pytest.raises(ContractError) as caught:
        parser(raw)
    return caught.value.reason_code


# -- topics ------------------------------------------------------------------------------


def test_topic_helpers_follow_the_contract_table():
    assert telemetry_topic("SN-1") == "devices/SN-1/telemetry"
    assert rpc_request_topic("SN-1") == "devices/SN-1/rpc/request"
    assert rpc_response_topic("SN-1") == "devices/SN-1/rpc/response"
    assert state_topic("SN-1") == "devices/SN-1/state"


@pytest.mark.parametrize(
    "helper", [telemetry_topic, rpc_request_topic, rpc_response_topic, state_topic]
)
def test_every_topic_parses_back_to_its_serial_and_kind(helper):
    parsed = parse_topic(helper("SN-7"))
    assert parsed is not None
    assert parsed[0] == "SN-7"
    assert helper(parsed[0]) == helper("SN-7")


def test_parse_topic_names_the_kind():
    assert parse_topic("devices/A/telemetry") == ("A", TopicKind.TELEMETRY)
    assert parse_topic("devices/A/rpc/response") == ("A", "rpc_response")
    assert parse_topic("devices/A/state") == ("A", "state")
    assert parse_topic("devices/A/rpc/request") == ("A", "rpc_request")


@pytest.mark.parametrize(
    "topic",
    [
        "devices//telemetry",
        "devices/A",
        "devices/A/rpc",
        "devices/A/rpc/other",
        "other/A/state",
        "devices/A/state/extra",
        "devices/+/state",
        "devices/#/telemetry",
        "",
        "devices/A/b/c/d",
    ],
)
def test_parse_topic_refuses_anything_else(topic):
    assert parse_topic(topic) is None


@pytest.mark.parametrize("serial", ["", "a/b", "+", "#", "x+y"])
def test_a_serial_that_cannot_be_a_topic_level_is_refused(serial):
    with pytest.raises(ValueError):
        telemetry_topic(serial)


# -- round trips -------------------------------------------------------------------------


def test_rpc_request_round_trips_with_utc_z_times():
    request = RpcRequest("cmd_1", "setIO", {"io1": True}, SENT_AT, SENT_AT + timedelta(seconds=10))
    raw = request.to_json()
    assert json.loads(raw) == {
        "commandId": "cmd_1",
        "method": "setIO",
        "params": {"io1": True},
        "sentAt": "2025-03-01T08:30:00Z",
        "deadlineAt": "2025-03-01T08:30:10Z",
    }
    assert parse_rpc_request(raw) == request


def test_times_with_an_offset_are_accepted_and_normalised_to_utc():
    hanoi = timezone(timedelta(hours=7))
    request = parse_rpc_request(_raw(_request_doc(sentAt="2025-03-01T15:30:00.250+07:00")))
    assert request.sent_at == datetime(2025, 3, 1, 8, 30, 0, 250000, tzinfo=UTC)
    assert request.sent_at.tzinfo is UTC
    built = RpcRequest("c", "m", {}, datetime(2025, 3, 1, 15, 30, tzinfo=hanoi), SENT_AT)
    assert json.loads(built.to_json())["sentAt"] == "2025-03-01T08:30:00Z"


@pytest.mark.parametrize(
    "status, code",
    [
        ("accepted", "ok"),
        ("rejected", "busy"),
        ("rejected", "invalid_param"),
        ("rejected", "hardware_fault"),
        ("rejected", "not_supported"),
    ],
)
def test_rpc_response_round_trips(status, code):
    response = RpcResponse("cmd_1", RpcStatus(status), ResultCode(code), f"device says {code}")
    assert parse_rpc_response(response.to_json()) == response
    assert json.loads(response.to_json())["resultCode"] == code


def test_rpc_response_message_may_be_null_or_absent():
    assert parse_rpc_response(_raw(_response_doc())).message is None
    doc = _response_doc()
    del doc["message"]
    parsed = parse_rpc_response(_raw(doc))
    assert parsed.accepted and parsed.message is None


def test_state_report_round_trips():
    report = StateReport("cmd_1", {"io1": True, "temp": 21.5, "mode": "auto"}, SENT_AT)
    raw = report.to_json()
    assert json.loads(raw)["appliedAt"] == "2025-03-01T08:30:00Z"
    assert parse_state_report(raw) == report


def test_telemetry_payload_matches_the_contract():
    raw = telemetry_payload(SENT_AT, {"temp": 31.2, "io1": False})
    assert json.loads(raw) == {"ts": "2025-03-01T08:30:00Z", "values": {"temp": 31.2, "io1": False}}


def test_unknown_extra_fields_are_ignored_for_forward_compatibility():
    assert parse_state_report(_raw(_state_doc(firmware="1.2.3"))).command_id == "cmd_1"


def test_command_id_of_exactly_the_maximum_length_is_accepted():
    command_id = "c" * COMMAND_ID_MAX_CHARS
    assert parse_rpc_response(_raw(_response_doc(commandId=command_id))).command_id == command_id


# -- every reason code -------------------------------------------------------------------


@pytest.mark.parametrize("parser", PARSERS)
def test_payload_too_large(parser):
    raw = b'{"pad":"' + b"x" * MAX_PAYLOAD_BYTES + b'"}'
    assert _reason(parser, raw) is ContractReason.PAYLOAD_TOO_LARGE


@pytest.mark.parametrize("parser", PARSERS)
def test_invalid_encoding(parser):
    assert _reason(parser, b'{"commandId":"\xff\xfe"}') is ContractReason.INVALID_ENCODING


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"not json",
        b'{"a":NaN}',
        b'{"a":1e999}',
        b'{"a":Infinity}',
    ],
)
def test_invalid_json(parser, raw):
    assert _reason(parser, raw) is ContractReason.INVALID_JSON


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("depth", [17, 5000])  # past JSON_MAX_DEPTH, and past the stack
def test_json_nested_too_deep(parser, depth):
    assert _reason(parser, b"[" * depth + b"]" * depth) is ContractReason.JSON_TOO_DEEP


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("raw", [b"[]", b"42", b'"text"', b"null", b"true"])
def test_not_an_object(parser, raw):
    assert _reason(parser, raw) is ContractReason.NOT_AN_OBJECT


@pytest.mark.parametrize(
    "parser, doc, field",
    [
        (parse_rpc_request, _request_doc(), "commandId"),
        (parse_rpc_request, _request_doc(), "method"),
        (parse_rpc_request, _request_doc(), "params"),
        (parse_rpc_request, _request_doc(), "sentAt"),
        (parse_rpc_request, _request_doc(), "deadlineAt"),
        (parse_rpc_response, _response_doc(), "commandId"),
        (parse_rpc_response, _response_doc(), "status"),
        (parse_rpc_response, _response_doc(), "resultCode"),
        (parse_state_report, _state_doc(), "commandId"),
        (parse_state_report, _state_doc(), "reportedState"),
        (parse_state_report, _state_doc(), "appliedAt"),
    ],
)
def test_missing_field(parser, doc, field):
    del doc[field]
    with pytest.raises(ContractError) as caught:
        parser(_raw(doc))
    assert caught.value.reason_code is ContractReason.MISSING_FIELD
    assert field in caught.value.detail


@pytest.mark.parametrize(
    "command_id",
    ["", "x" * (COMMAND_ID_MAX_CHARS + 1), 42, None, "has space", "tab\there", "é", ["cmd"]],
)
@pytest.mark.parametrize(
    "parser, make",
    [
        (parse_rpc_request, _request_doc),
        (parse_rpc_response, _response_doc),
        (parse_state_report, _state_doc),
    ],
)
def test_invalid_command_id(parser, make, command_id):
    assert _reason(parser, _raw(make(commandId=command_id))) is ContractReason.INVALID_FIELD


@pytest.mark.parametrize(
    "parser, doc",
    [
        (parse_rpc_request, _request_doc(method="")),
        (parse_rpc_request, _request_doc(method=7)),
        (parse_rpc_request, _request_doc(method="m" * 65)),
        (parse_rpc_request, _request_doc(params=[1, 2])),
        (parse_rpc_request, _request_doc(params=None)),
        (parse_rpc_response, _response_doc(status="ok")),
        (parse_rpc_response, _response_doc(status=["accepted"])),
        (parse_rpc_response, _response_doc(resultCode="timeout")),
        (parse_rpc_response, _response_doc(resultCode={"ok": 1})),
        (parse_rpc_response, _response_doc(message=5)),
        (parse_rpc_response, _response_doc(status="accepted", resultCode="busy")),
        (parse_rpc_response, _response_doc(status="rejected", resultCode="ok")),
        (parse_state_report, _state_doc(reportedState="on")),
        (parse_state_report, _state_doc(reportedState=None)),
    ],
)
def test_invalid_field(parser, doc):
    assert _reason(parser, _raw(doc)) is ContractReason.INVALID_FIELD


@pytest.mark.parametrize(
    "value",
    [
        "2025-03-01T08:30:00",  # naive: no way to know what instant it means
        "2025-03-01",
        "yesterday",
        "",
        1740817800,
        None,
        "2025-13-01T00:00:00Z",
        "2025-03-01T08:30:00+25:00",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
    ],
)
@pytest.mark.parametrize(
    "parser, make, field",
    [
        (parse_rpc_request, _request_doc, "sentAt"),
        (parse_rpc_request, _request_doc, "deadlineAt"),
        (parse_state_report, _state_doc, "appliedAt"),
    ],
)
def test_invalid_timestamp(parser, make, field, value):
    assert _reason(parser, _raw(make(**{field: value}))) is ContractReason.INVALID_TIMESTAMP


def test_building_a_payload_with_a_naive_time_is_refused():
    with pytest.raises(ContractError) as caught:
        RpcRequest("cmd_1", "setIO", {}, datetime(2025, 3, 1), SENT_AT)
    assert caught.value.reason_code is ContractReason.INVALID_TIMESTAMP
    with pytest.raises(ContractError):
        telemetry_payload(datetime(2025, 3, 1), {"temp": 1.0})


def test_building_a_contradictory_response_is_refused():
    with pytest.raises(ContractError):
        RpcResponse("cmd_1", RpcStatus.ACCEPTED, ResultCode.BUSY, None)


def test_contract_error_is_a_value_error_with_its_reason_in_the_message():
    error = ContractError(ContractReason.MISSING_FIELD, "commandId")
    assert isinstance(error, ValueError)
    assert str(error) == "missing_field: commandId"


# -- nothing but ContractError, whatever arrives -----------------------------------------

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=50)
)
_json_values = st.recursive(
    _json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
_field_values = _json_values | st.sampled_from(
    [
        "accepted",
        "rejected",
        "ok",
        "busy",
        "2025-03-01T08:30:00Z",
        "2025-03-01T08:30:00",
        "cmd_1",
        "setIO",
        {"io1": True},
    ]
)
_contract_keys = st.sampled_from(
    [
        "commandId",
        "method",
        "params",
        "sentAt",
        "deadlineAt",
        "status",
        "resultCode",
        "message",
        "reportedState",
        "appliedAt",
    ]
) | st.text(max_size=10)


def _outcome(parser, raw: bytes) -> None:
    try:
        parser(raw)
    except ContractError as error:
        assert isinstance(error.reason_code, ContractReason)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_contract_errors(raw):
    for parser in PARSERS:
        _outcome(parser, raw)


@settings(max_examples=300, deadline=None)
@given(doc=st.dictionaries(_contract_keys, _field_values, max_size=8))
def test_arbitrary_json_objects_raise_only_contract_errors(doc):
    raw = json.dumps(doc).encode()
    for parser in PARSERS:
        _outcome(parser, raw)


@settings(max_examples=200, deadline=None)
@given(
    base=st.sampled_from([_request_doc, _response_doc, _state_doc]),
    key=_contract_keys,
    value=_field_values,
)
def test_one_corrupted_field_in_a_valid_payload_raises_only_contract_errors(base, key, value):
    doc = base()
    doc[key] = value
    raw = json.dumps(doc).encode()
    for parser in PARSERS:
        _outcome(parser, raw)


@settings(max_examples=100, deadline=None)
@given(
    command_id=st.from_regex(r"[\x21-\x7e]{1,40}", fullmatch=True),
    state=st.dictionaries(st.text(max_size=10), _json_scalars, max_size=5),
    applied_at=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
)
def test_any_valid_state_report_round_trips(command_id, state, applied_at):
    report = StateReport(command_id, state, applied_at)
    assert parse_state_report(report.to_json()) == report
