"""Whatever a device sends, ingestion and reply recording neither raise nor lose it silently:
each message persists (telemetry row, receipt) or leaves a rejection whose reason is an enum
value. Runs on the real database, so values PostgreSQL cannot store (NUL, lone surrogates,
numbers outside float range, dates that overflow in UTC) are exercised too."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automation.keys import receipt_dedupe_key, telemetry_fingerprint
from automation.models import DeviceCommand, DeviceCommandReceipt
from automation.services.evaluate import endpoint_events_evaluate
from automation.services.ingest import telemetry_ingest
from automation.services.receipts import DeviceMessage, device_messages_record
from devices.models import DeviceMessageRejection, DeviceMessageRejectionReason, Telemetry
from devices.mqtt.messages import InboundTelemetry
from devices.mqtt.messages import decode_payload as _decode
from tests.devices.factories import FarmKit, make_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
KNOWN_COMMAND = "cmd-known-1"
REASONS = set(DeviceMessageRejectionReason.values)
PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_odd_text = st.one_of(
    st.text(max_size=20),
    st.text(st.characters(codec=None, categories=["Cs", "Cc"]), max_size=6),  # NUL, surrogates
    st.sampled_from(["NaN", "nan", "Infinity", "-Infinity", "1e999", "\x00", "null", "", "é"]),
)
_numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**320), max_value=10**320),  # beyond float range
    st.floats(),  # NaN and ±Infinity reach the text as bare tokens
)
_leaves = st.one_of(st.none(), st.booleans(), _numbers, _odd_text)
_keys = st.one_of(st.sampled_from(["temp", "humidity", "io1", "fan", "mode"]), _odd_text)
_json = st.recursive(
    _leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=20,
)
_timestamps = st.one_of(
    st.sampled_from(
        [
            "2026-11-29T11:59:58Z",
            "2026-11-29T11:59:58",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-01:00",
            "2026-02-30T00:00:00Z",
            "2026-11-29T11:59:58+99:00",
        ]
    ),
    st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat),
    _json,
)


def _deep(n: int) -> str:
    return '{"values":{"temp":' + "[" * n + "]" * n + "}}"


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _dumps(doc: Any, ascii_only: bool) -> str:
    return json.dumps(doc, ensure_ascii=ascii_only)


_telemetry_docs = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={"ts": _timestamps, "values": st.dictionaries(_keys, _json, max_size=6) | _json},
    ),
    _json,
)
_telemetry_texts = st.one_of(
    st.builds(_dumps, _telemetry_docs, st.booleans()),
    st.integers(min_value=1, max_value=5000).map(_deep),
    st.binary(max_size=300).map(lambda raw: _decode(raw)[0]),
)


@pytest.fixture
def kit() -> FarmKit:
    return make_farm()


def _serials(kit: FarmKit) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from([kit.sensor.serial_number, kit.actuator.serial_number, "SN-UNKNOWN"]),
        st.text(max_size=80),
    )


def _ingest_persists_or_rejects(message: InboundTelemetry, kit: FarmKit) -> None:
    before = DeviceMessageRejection.objects.count()
    with transaction.atomic():  # a database error fails this example, not the whole test
        telemetry_ingest(messages=[message])
    new = list(DeviceMessageRejection.objects.order_by("pk").values_list("reason_code", flat=True))
    new = new[before:]
    assert set(new) <= REASONS
    stored = (
        "\x00" not in message.serial  # no device has one; PostgreSQL cannot even compare it
        and Telemetry.objects.filter(
            device__serial_number=message.serial,
            fingerprint=telemetry_fingerprint(message.payload),
        ).exists()
    )
    assert stored or new, "message neither stored nor rejected"


@PROPERTY
@given(data=st.data())
def test_arbitrary_bytes_never_crash_ingest(kit: FarmKit, data: st.DataObject) -> None:
    serial = data.draw(_serials(kit))
    raw = data.draw(st.binary(max_size=600) | _telemetry_texts.map(_encode))
    _ingest_persists_or_rejects(InboundTelemetry.from_bytes(serial, raw, NOW), kit)


@PROPERTY
@given(data=st.data())
def test_arbitrary_json_never_crashes_ingest(kit: FarmKit, data: st.DataObject) -> None:
    serial = data.draw(_serials(kit))
    payload = data.draw(_telemetry_texts)
    _ingest_persists_or_rejects(InboundTelemetry(serial, payload, NOW), kit)


def test_a_whole_batch_of_bad_input_is_one_call(kit: FarmKit) -> None:
    """Mixed good and bad messages in one batch: the good one persists, the rest are kept."""
    good = json.dumps({"ts": "2026-11-29T11:59:58Z", "values": {"temp": 21.5}})
    bad = [
        '{"values":{"temp":1e999,"mode":"\\u0000","humidity":"\\ud800"}}',
        '{"ts":"0001-01-01T00:00:00+01:00","values":{"temp":1}}',
        '{"values":{"temp":' + str(10**320) + "}}",
        _deep(3000),
    ]
    messages = [InboundTelemetry(kit.sensor.serial_number, p, NOW) for p in [good, *bad]]
    telemetry_ingest(messages=messages)
    assert Telemetry.objects.filter(fingerprint=telemetry_fingerprint(good)).exists()
    assert DeviceMessageRejection.objects.count() >= 3


# --- device replies -----------------------------------------------------------------------


@pytest.fixture
def intent(kit: FarmKit) -> DeviceCommand:
    """A dispatched command whose commandId replies can name."""
    kit.rule()
    payload = json.dumps({"ts": "2026-11-29T11:59:00Z", "values": {"temp": 31}})
    ids = telemetry_ingest(
        messages=[InboundTelemetry(kit.sensor.serial_number, payload, timezone.now())]
    ).pending_event_ids
    pk = endpoint_events_evaluate(event_ids=ids).pending_command_ids[0]
    DeviceCommand.objects.filter(pk=pk).update(
        device_command_id=KNOWN_COMMAND, status="dispatched", attempt_count=1
    )
    return DeviceCommand.objects.get(pk=pk)


_command_ids = st.one_of(st.sampled_from([KNOWN_COMMAND, "cmd-unknown"]), _odd_text, _json)
_reply_docs = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "commandId": _command_ids,
            "status": st.sampled_from(["accepted", "rejected"]) | _json,
            "resultCode": st.sampled_from(["ok", "busy", "invalid_param"]) | _json,
            "message": _json,
            "reportedState": st.dictionaries(_keys, _json, max_size=5) | _json,
            "appliedAt": _timestamps,
        },
    ),
    _json,
)
_kinds = st.sampled_from(["rpc_response", "state", "telemetry", "garbage"])


def _record_persists_or_rejects(message: DeviceMessage, intent: DeviceCommand) -> None:
    before = DeviceMessageRejection.objects.count()
    with transaction.atomic():
        device_messages_record(messages=[message])
    new = list(DeviceMessageRejection.objects.order_by("pk").values_list("reason_code", flat=True))
    new = new[before:]
    assert set(new) <= REASONS
    try:
        key = receipt_dedupe_key(
            serial=message.serial,
            kind=message.kind,
            payload=message.payload,
            attempt=intent.attempt_count,
        )
    except UnicodeEncodeError:  # a lone surrogate: no receipt can have been stored
        key = ""
    stored = DeviceCommandReceipt.objects.filter(dedupe_key=key).exists()
    assert stored or new, "reply neither stored nor rejected"


@PROPERTY
@given(data=st.data())
def test_arbitrary_replies_never_crash_recording(
    kit: FarmKit, intent: DeviceCommand, data: st.DataObject
) -> None:
    serial = data.draw(_serials(kit) | st.just(intent.target_serial_number))
    kind = data.draw(_kinds)
    if data.draw(st.booleans()):
        text, bad = _decode(data.draw(st.binary(max_size=400)))
    else:
        text, bad = data.draw(st.builds(_dumps, _reply_docs, st.booleans())), False
    _record_persists_or_rejects(DeviceMessage(serial, kind, text, NOW, bad), intent)
