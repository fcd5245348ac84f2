"""A device's ack waits for its state report (up to BRIDGE_REPLY_WAIT_MS), so both cross in
one commit and one reconcile batch instead of two."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho

from config.task_names import DEVICE_MESSAGES_RECONCILE
from devices.mqtt.bridge import MqttBridge
from tests.devices.test_bridge import Recorder, publish_all, telemetry
from tests.waiting import wait_for

RESPONSE = b'{"commandId":"cmd_1","status":"accepted","resultCode":"ok","message":null}'
STATE = b'{"commandId":"cmd_1","reportedState":{"io1":true},"appliedAt":"2026-01-01T00:00:00Z"}'


def test_an_ack_waits_for_its_state_report_and_both_cross_in_one_batch(
    make_bridge: Callable[..., MqttBridge],
    device: paho.Client,
    prefix: str,
    settings: Any,
) -> None:
    settings.BRIDGE_REPLY_WAIT_MS = 60_000  # only the state report ends the wait
    recorder = Recorder()
    make_bridge(handoff=recorder, flush_ms=1)
    publish_all(device, [(f"devices/{prefix}-A/rpc/response", RESPONSE)])
    publish_all(device, [telemetry(f"{prefix}-T", 1)])  # gives the bridge's loop a few turns
    publish_all(device, [(f"devices/{prefix}-A/state", STATE)])

    wait_for(lambda: len(recorder.args(prefix, DEVICE_MESSAGES_RECONCILE)) == 2, "ack and state")
    replies = [b for name, b in recorder.batches if name == DEVICE_MESSAGES_RECONCILE]
    assert [[a[1] for a in b] for b in replies if b[0][0].startswith(prefix)] == [
        ["rpc_response", "state"]
    ]


def test_an_ack_without_a_state_report_waits_no_longer_than_the_reply_wait(
    make_bridge: Callable[..., MqttBridge],
    device: paho.Client,
    prefix: str,
    settings: Any,
) -> None:
    settings.BRIDGE_REPLY_WAIT_MS = 300
    recorder = Recorder()
    make_bridge(handoff=recorder, flush_ms=1)
    started = time.monotonic()
    publish_all(device, [(f"devices/{prefix}-A/rpc/response", RESPONSE)])
    wait_for(lambda: recorder.args(prefix, DEVICE_MESSAGES_RECONCILE), "the ack committed alone")
    assert time.monotonic() - started >= 0.3
