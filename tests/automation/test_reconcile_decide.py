"""The reconciliation decision as a pure function: evidence in, next transition out."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from automation.services.reconcile import Evidence, decide

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
WINDOW_S = 30.0
ACK = (1, "accepted", "ok", NOW - timedelta(seconds=1))


def evidence(status: str = "dispatched", **kw: object) -> Evidence:
    base = Evidence(
        status=status,
        attempt=1,
        deadline_at=NOW + timedelta(seconds=5),
        acknowledged_at=None,
        param_key="io1",
        target_value=True,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def to(e: Evidence, now: datetime = NOW) -> tuple[str, str] | None:
    decision = decide(e, now, WINDOW_S)
    return None if decision is None else (decision.to, decision.reason)


def test_nothing_yet_before_the_deadline() -> None:
    assert to(evidence()) is None


def test_ack_moves_dispatched_to_acknowledged() -> None:
    assert to(evidence(responses=[ACK])) == ("acknowledged", "acknowledged")


def test_ack_and_matching_state_walk_through_acknowledged_then_applied() -> None:
    e = evidence(responses=[ACK], states=[{"io1": True}])
    assert to(e) == ("acknowledged", "acknowledged")
    assert to(replace(e, status="acknowledged", acknowledged_at=NOW)) == (
        "applied",
        "state_reported",
    )


def test_matching_state_without_ack_is_evidence_enough() -> None:
    assert to(evidence(states=[{"io1": True}])) == ("applied", "state_reported")


def test_telemetry_equal_to_target_after_dispatch_is_evidence() -> None:
    assert to(evidence(status="acknowledged", acknowledged_at=NOW, telemetry_reading="r7")) == (
        "applied",
        "telemetry_matched",
    )


def test_ack_alone_is_not_applied() -> None:
    e = evidence(status="acknowledged", acknowledged_at=NOW, responses=[ACK])
    assert to(e) is None
    assert to(e, NOW + timedelta(seconds=WINDOW_S)) == ("uncertain", "no_applied_evidence")


def test_contradicting_state_after_ok_is_uncertain() -> None:
    e = evidence(
        status="acknowledged", acknowledged_at=NOW, responses=[ACK], states=[{"io1": False}]
    )
    assert to(e) == ("uncertain", "state_mismatch")


def test_contradicting_state_with_hardware_fault_is_failed() -> None:
    # The refusal outranks the report: failed, with the device's own code as the reason.
    fault = (1, "rejected", "hardware_fault", NOW)
    assert to(evidence(responses=[fault], states=[{"io1": False}])) == ("failed", "hardware_fault")


def test_busy_is_retried() -> None:
    decision = decide(evidence(responses=[(1, "rejected", "busy", NOW)]), NOW, WINDOW_S)
    assert decision is not None and decision.retry
    assert (decision.to, decision.reason) == ("retrying", "device_busy")


def test_busy_from_an_earlier_attempt_does_not_retry_the_current_one() -> None:
    assert to(evidence(attempt=2, responses=[(1, "rejected", "busy", NOW)])) is None


@pytest.mark.parametrize("code", ["invalid_param", "not_supported", "hardware_fault"])
def test_configuration_errors_fail_without_retry(code: str) -> None:
    decision = decide(evidence(responses=[(1, "rejected", code, NOW)]), NOW, WINDOW_S)
    assert decision is not None and not decision.retry
    assert (decision.to, decision.reason) == ("failed", code)


def test_no_ack_by_the_deadline_is_a_timeout() -> None:
    assert to(evidence(), NOW + timedelta(seconds=5)) == ("retrying", "ack_timeout")


def test_late_ack_while_retrying_is_still_acknowledged() -> None:
    assert to(evidence(status="retrying", responses=[ACK])) == ("acknowledged", "acknowledged")


@pytest.mark.parametrize(
    "status", ["pending_dispatch", "applied", "failed", "expired", "uncertain"]
)
def test_nothing_moves_outside_the_awaiting_states(status: str) -> None:
    e = evidence(status=status, responses=[ACK], states=[{"io1": True}])
    assert to(e, NOW + timedelta(hours=1)) is None


# --- precedence: each pair of evidence that can conflict (see decide's docstring) ----------

REFUSED = (1, "rejected", "invalid_param", NOW)


@pytest.mark.parametrize("status", ["dispatched", "acknowledged", "retrying"])
def test_a_refusal_outranks_a_matching_telemetry_reading(status: str) -> None:
    e = evidence(status=status, acknowledged_at=NOW, responses=[REFUSED], telemetry_reading="r")
    assert to(e) == ("failed", "invalid_param")


def test_a_refusal_outranks_a_matching_state_report() -> None:
    assert to(evidence(responses=[REFUSED], states=[{"io1": True}])) == ("failed", "invalid_param")


def test_a_refusal_after_an_ack_of_the_same_attempt_is_final() -> None:
    e = evidence(status="acknowledged", acknowledged_at=NOW, responses=[ACK, REFUSED])
    assert to(e) == ("failed", "invalid_param")


def test_a_refusal_of_an_earlier_attempt_does_not_fail_the_current_one() -> None:
    e = evidence(attempt=2, responses=[REFUSED], telemetry_reading="r")
    assert to(e) == ("applied", "telemetry_matched")


def test_a_contradicting_state_report_outranks_a_matching_telemetry_reading() -> None:
    e = evidence(responses=[ACK], states=[{"io1": False}], telemetry_reading="r")
    assert to(e) == ("uncertain", "state_mismatch")


def test_a_late_ack_after_a_timeout_is_acknowledged_then_applied_by_a_report() -> None:
    e = evidence(status="retrying", responses=[ACK], states=[{"io1": True}])
    assert to(e) == ("acknowledged", "acknowledged")
    assert to(replace(e, status="acknowledged", acknowledged_at=NOW)) == (
        "applied",
        "state_reported",
    )


def test_a_late_ack_after_a_timeout_does_not_outrank_a_refusal() -> None:
    assert to(evidence(status="retrying", responses=[ACK, REFUSED])) == ("failed", "invalid_param")


def test_telemetry_decision_records_the_reading_used() -> None:
    decision = decide(evidence(telemetry_reading="reading 7 (True)"), NOW, WINDOW_S)
    assert decision is not None and decision.detail == "reading 7 (True)"


def test_a_state_report_keyed_by_the_endpoints_own_name_counts() -> None:
    e = evidence(param_key="value", endpoint_key="relay", states=[{"relay": True}])
    assert to(e) == ("applied", "state_reported")
