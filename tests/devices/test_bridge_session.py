"""What the bridge does when its connection is lost, decided without a broker: a takeover
(another client with the bridge's client id) backs off exponentially instead of reconnecting
at once, is logged at most once a minute, and too many in a row stop the bridge with a
message naming BRIDGE_SLOT_PREFIX; an ordinary loss reconnects at once, as before. The same
behaviour on a real Mosquitto is in test_bridge_takeover.py."""

from __future__ import annotations

import logging

import pytest
from django.core.management import CommandError, call_command
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from devices.mqtt.bridge.session import (
    SHORT_CONNECTION_S,
    BridgeSession,
    SessionTakenOver,
    default_client_id,
)
from devices.mqtt.client import backend_client_id
from devices.mqtt.publisher import Publisher

TAKEN_OVER = ReasonCode(PacketTypes.DISCONNECT, identifier=0x8E)
SERVER_SHUTTING_DOWN = ReasonCode(PacketTypes.DISCONNECT, identifier=0x8B)
LOGGER = "devices.mqtt.bridge"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def session(clock: Clock, *, max_in_row: int = 5) -> BridgeSession:
    return BridgeSession(client_id="farm-bridge/a", max_in_row=max_in_row, clock=clock)


def fight(bridge: BridgeSession, clock: Clock, reason: ReasonCode | None, lived_s: float) -> float:
    """One connection that lived ``lived_s`` before it was lost: the wait the bridge chose."""
    bridge.connected(1, reconnect=True)
    clock.now += lived_s
    return bridge.lost(reason, "connection lost", held=0)


def test_a_takeover_backs_off_doubling_up_to_the_cap() -> None:
    clock = Clock()
    bridge = session(clock, max_in_row=20)

    waits = [fight(bridge, clock, TAKEN_OVER, 0.5) for _ in range(9)]

    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def test_an_ordinary_loss_reconnects_at_once_and_ends_a_run_of_takeovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    bridge = session(clock)
    fight(bridge, clock, TAKEN_OVER, 0.5)
    fight(bridge, clock, TAKEN_OVER, 0.5)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        wait = fight(bridge, clock, SERVER_SHUTTING_DOWN, 0.5)

    assert wait == 0.0
    assert bridge.taken_over_in_row == 0
    assert any("lost its MQTT connection" in r.getMessage() for r in caplog.records)
    assert fight(bridge, clock, TAKEN_OVER, 0.5) == 1.0  # a new run starts from the bottom


def test_too_many_takeovers_in_a_row_stop_the_bridge_naming_bridge_slot_prefix() -> None:
    clock = Clock()
    bridge = session(clock, max_in_row=3)
    fight(bridge, clock, TAKEN_OVER, 0.5)
    fight(bridge, clock, TAKEN_OVER, 1.0)

    with pytest.raises(SessionTakenOver, match="BRIDGE_SLOT_PREFIX") as raised:
        fight(bridge, clock, TAKEN_OVER, 2.0)

    assert "'farm-bridge/a'" in str(raised.value)
    assert "3 times in a row" in str(raised.value)


def test_a_connection_that_outlived_the_backoff_starts_the_count_again() -> None:
    clock = Clock()
    bridge = session(clock, max_in_row=3)
    fight(bridge, clock, TAKEN_OVER, 0.5)
    fight(bridge, clock, TAKEN_OVER, 0.5)

    # A takeover once in a long while (a deploy's overlap) never adds up to an exit.
    wait = fight(bridge, clock, TAKEN_OVER, SHORT_CONNECTION_S + 2 * 2.0 + 1)

    assert wait == 1.0
    assert bridge.taken_over_in_row == 1


def test_takeovers_are_logged_at_most_once_a_minute_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    bridge = session(clock, max_in_row=1000)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for n in range(200):  # 200 takeovers, 0.5 s each: ~100 s of fighting
            bridge.connected(1, reconnect=n > 0)
            clock.now += 0.5
            bridge.lost(TAKEN_OVER, "connection lost", held=0)

    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # at t=0 and once the minute had passed; no reconnect lines
    assert "took the session over" in lines[0] and "BRIDGE_SLOT_PREFIX" in lines[0]
    assert "120 since the last such line" in lines[1]


def test_connections_closed_soon_without_disconnect_twice_in_a_row_are_takeovers() -> None:
    # Mosquitto 2.0 (v5 as 3.1.1) and every 3.1.1 broker close the old socket, nothing more.
    clock = Clock()
    bridge = session(clock, max_in_row=3)

    assert fight(bridge, clock, None, 3600) == 0.0  # a long-lived connection lost: ordinary
    assert fight(bridge, clock, None, 0.1) == 0.0  # one short connection: maybe a restart
    assert fight(bridge, clock, None, 0.1) == 1.0  # twice in a row: taken over
    assert fight(bridge, clock, None, 1.0) == 2.0
    with pytest.raises(SessionTakenOver, match="BRIDGE_SLOT_PREFIX"):
        fight(bridge, clock, None, 2.0)


def test_an_unreachable_broker_or_another_disconnect_reason_between_is_no_takeover() -> None:
    clock = Clock()
    bridge = session(clock)
    fight(bridge, clock, None, 0.1)
    bridge.connect_failed()  # the broker was down: it restarted, nobody took the session
    assert fight(bridge, clock, None, 0.1) == 0.0

    assert fight(bridge, clock, SERVER_SHUTTING_DOWN, 0.1) == 0.0  # the broker said why
    assert fight(bridge, clock, None, 0.1) == 0.0


def test_backend_client_ids_hold_a_mark_no_device_id_holds(settings) -> None:  # type: ignore[no-untyped-def]
    settings.BRIDGE_SLOT_PREFIX = "farm-bridge"
    bridge_id = default_client_id()
    publishers = {Publisher().client_id for _ in range(3)}

    assert bridge_id == "farm-bridge/0"  # slot 0's: no host name in it
    assert len(publishers) == 3  # unique per instance: nothing to take over
    assert all(p.startswith("farm-publisher/") for p in publishers)
    assert backend_client_id("bridge", "north") == "farm-bridge/north"


def test_the_command_takes_a_client_id_only_to_retire_it() -> None:
    with pytest.raises(CommandError, match="only for --retire"):
        call_command("mqtt_bridge", "--client-id", "farm-bridge/north", "--duration", "0.1")
    with pytest.raises(CommandError, match="--retire needs --client-id"):
        call_command("mqtt_bridge", "--retire", "--duration", "0.1")
