"""A state report is evidence only if its ``appliedAt`` is believable: one stamped far ahead
of the server clock or far behind it is recorded as a rejection with its reason code, makes
no receipt and moves no command."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import time_machine

from automation.models import DeviceCommandReceipt, ReceiptType
from automation.states import CommandStatus
from devices.models import DeviceMessageRejection
from tests.automation.conftest import ack, dispatch, make_intent, reply
from tests.devices.factories import make_farm

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _server_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def _state(intent: object, applied_at: str) -> object:
    body = {
        "commandId": intent.device_command_id,  # type: ignore[attr-defined]
        "reportedState": {"io1": True},
        "appliedAt": applied_at,
    }
    return reply(intent, "state", body)


@pytest.mark.parametrize(
    ("applied_at", "reason"),
    [
        ("9999-12-31T23:59:59Z", "timestamp_in_future"),
        ("2026-11-29T12:05:01Z", "timestamp_in_future"),
        ("0001-01-01T00:00:00Z", "timestamp_too_old"),
        ("2026-11-22T11:59:59Z", "timestamp_too_old"),
    ],
)
def test_state_report_with_applied_at_out_of_bounds_is_a_rejection_not_evidence(
    applied_at: str, reason: str
) -> None:
    kit = make_farm()
    kit.rule()
    intent = ack(dispatch(make_intent(kit)))
    assert intent.status == CommandStatus.ACKNOWLEDGED
    intent = _state(intent, applied_at)
    assert intent.status == CommandStatus.ACKNOWLEDGED
    states = DeviceCommandReceipt.objects.filter(receipt_type=ReceiptType.STATE_REPORT)
    assert not states.exists()
    rejection = DeviceMessageRejection.objects.get()
    assert (rejection.kind, rejection.reason_code) == ("state", reason)
    assert rejection.serial_number == kit.actuator.serial_number
    assert "appliedAt" in rejection.detail
    # The same report with a believable time is the evidence it should be.
    assert _state(intent, "2026-11-29T11:59:59Z").status == CommandStatus.APPLIED
