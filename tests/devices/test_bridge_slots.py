"""Bridge slots held by leases in the database, on an injected clock: a slot is claimed once,
renewed by its holder only, adopted once a dead holder's lease ran out (and the old holder's
renewal reports it lost), handed over by a release; of threads racing for one slot on
PostgreSQL exactly one wins. The supervisor, ticked by hand with bridges that only wait,
claims at once as a standby, hands a surplus slot over to a process holding fewer and
adopts a dead one's slot. ``/health`` and ``/metrics`` show each slot, never its client id."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from config.env import env_int
from config.env_bridge import bridge_slot_prefix_from_env
from devices.models import BridgeProcess, BridgeSlot
from devices.mqtt.bridge.slots import BridgeSupervisor
from devices.mqtt.bridge.stats import BridgeStats
from devices.services.bridge_health import bridge_health
from devices.services.bridge_slots import (
    bridge_process_beat,
    bridge_slot_beat,
    bridge_slot_claim,
    bridge_slot_hand_over_due,
    bridge_slot_ids,
    bridge_slot_release,
    bridge_slots_ensure,
    bridge_slots_fair_share,
    bridge_slots_renew,
)
from tests.concurrency import race

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LEASE_S = 20.0  # renewals hold a slot for 15 s, ticks every 5 s


def seconds(s: float) -> timedelta:
    return timedelta(seconds=s)


@pytest.fixture
def ids(db: None) -> list[str]:
    prefix = f"test-slots-{uuid.uuid4().hex[:8]}"
    bridge_slots_ensure(prefix=prefix, slots=2, now=T0)
    return bridge_slot_ids(prefix=prefix, slots=2)


def claim(ids: list[str], holder: str, now: datetime):  # type: ignore[no-untyped-def]
    return bridge_slot_claim(client_ids=ids, holder=holder, lease_s=LEASE_S, now=now)


def test_slots_are_made_once_unheld_and_named_prefix_slash_number(ids: list[str]) -> None:
    bridge_slots_ensure(prefix=ids[0].split("/")[0], slots=2, now=T0 + seconds(60))

    rows = list(BridgeSlot.objects.filter(client_id__in=ids).order_by("slot"))
    assert [(r.slot, r.client_id.split("/")[1]) for r in rows] == [(0, "0"), (1, "1")]
    assert all(r.holder == "" and r.unheld_since == T0 for r in rows)


def test_a_claim_takes_the_lowest_unheld_slot_until_none_is_left(ids: list[str]) -> None:
    first, second = claim(ids, "a:1:x", T0), claim(ids, "b:2:y", T0)

    assert (first.slot, first.previous_holder, first.version) == (0, "", 1)
    assert second is not None and second.slot == 1
    assert claim(ids, "c:3:z", T0 + seconds(1)) is None
    row = BridgeSlot.objects.get(client_id=ids[0])
    assert row.holder == "a:1:x" and row.lease_until == T0 + seconds(0.75 * LEASE_S)
    assert row.unheld_since is None and row.held_since == T0


def test_a_renewal_extends_the_lease_by_three_quarters_of_it(ids: list[str]) -> None:
    claim(ids, "a:1:x", T0)
    held = bridge_slots_renew(client_ids=ids, holder="a:1:x", lease_s=LEASE_S, now=T0 + seconds(5))

    assert held == {ids[0]}
    row = BridgeSlot.objects.get(client_id=ids[0])
    assert row.lease_until == T0 + seconds(5 + 0.75 * LEASE_S) and row.version == 1


def test_a_dead_holders_slot_is_adopted_once_its_lease_ran_out_and_the_holder_learns_it(
    ids: list[str],
) -> None:
    claim(ids, "a:1:x", T0)
    claim(ids, "a:1:x", T0)  # both slots
    expiry = T0 + seconds(0.75 * LEASE_S)

    assert claim(ids, "b:2:y", expiry) is None  # the lease still holds at its last instant
    adopted = claim(ids, "b:2:y", expiry + seconds(0.001))
    assert adopted is not None and adopted.previous_holder == "a:1:x" and adopted.version == 2

    # The old holder comes back: the adopted slot is reported lost, the other one renewed.
    held = bridge_slots_renew(client_ids=ids, holder="a:1:x", lease_s=LEASE_S, now=expiry)
    assert held == {ids[1]}
    assert not bridge_slot_beat(client_id=ids[0], holder="a:1:x", connected=True, now=expiry)


def test_a_release_hands_the_slot_over_at_once(ids: list[str]) -> None:
    claim(ids, "a:1:x", T0)
    released_at = T0 + seconds(2)

    assert bridge_slot_release(client_id=ids[0], holder="a:1:x", now=released_at)
    assert not bridge_slot_release(client_id=ids[0], holder="a:1:x", now=released_at)
    row = BridgeSlot.objects.get(client_id=ids[0])
    assert (row.holder, row.lease_until, row.unheld_since, row.version) == (
        "", None, released_at, 2,
    )  # fmt: skip
    taken = claim(ids, "b:2:y", released_at)
    assert taken is not None and taken.slot == 0 and taken.previous_holder == ""


def test_fair_share_counts_standbys_and_hand_over_needs_a_process_holding_fewer() -> None:
    assert bridge_slots_fair_share(slots=4, live_processes=3) == 2
    assert bridge_slots_fair_share(slots=1, live_processes=2) == 1
    assert bridge_slots_fair_share(slots=3, live_processes=0) == 3
    live = {"a", "b"}
    assert bridge_slot_hand_over_due(holder="a", held=2, fair_share=1, held_by={"a": 2}, live=live)
    assert not bridge_slot_hand_over_due(
        holder="a", held=2, fair_share=2, held_by={"a": 2}, live=live
    )
    assert not bridge_slot_hand_over_due(  # every other process already holds its share
        holder="a", held=3, fair_share=2, held_by={"a": 3, "b": 2}, live=live
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_of_threads_racing_for_one_slot_exactly_one_wins() -> None:
    prefix = f"test-race-{uuid.uuid4().hex[:8]}"
    bridge_slots_ensure(prefix=prefix, slots=1, now=T0)
    ids = bridge_slot_ids(prefix=prefix, slots=1)
    wins: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        holder = f"h:{threading.get_ident()}:r"
        if claim(ids, holder, T0) is not None:
            with lock:
                wins.append(holder)

    assert race(work, 8) == []
    assert len(wins) == 1
    row = BridgeSlot.objects.get(client_id=ids[0])
    assert row.holder == wins[0] and row.version == 1


# --- the supervisor, ticked by hand ------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class WaitingBridge:
    """Stands in for ``MqttBridge``: beats connected, waits for its stop."""

    def __init__(self, client_id: str, heartbeat: Callable[[str, bool], None]) -> None:
        self.client_id = client_id
        self.stats = BridgeStats()
        self.stopped = threading.Event()

    def run_forever(self, stop: threading.Event) -> None:
        stop.wait()
        self.stopped.set()

    def stop(self) -> None:
        pass


def supervisor(prefix: str, holder: str, clock: Clock, slots: int = 2) -> BridgeSupervisor:
    return BridgeSupervisor(
        bridge_factory=WaitingBridge,  # type: ignore[arg-type]
        prefix=prefix,
        slots=slots,
        lease_s=LEASE_S,
        holder=holder,
        clock=clock,
    )


@pytest.mark.django_db(transaction=True)
def test_the_supervisor_shares_slots_hands_one_over_and_adopts_a_dead_ones() -> None:
    prefix, clock = f"test-sup-{uuid.uuid4().hex[:8]}", Clock()
    bridge_slots_ensure(prefix=prefix, slots=2, now=T0)
    a, b = supervisor(prefix, "a:1:x", clock), supervisor(prefix, "b:2:y", clock)
    try:
        a.tick()
        assert sorted(a.bridges()) == [0, 1]  # alone: its fair share is every slot
        b.tick()  # a standby now: nothing unheld, but it counts towards the fair share
        assert b.bridges() == {}
        clock.now += seconds(a.tick_s)
        slot_1 = a.bridges()[1]
        a.tick()  # holds 2 > ceil(2 / 2) while b holds 0: hands slot 1 over, bridge first
        assert sorted(a.bridges()) == [0] and slot_1.stopped.is_set()  # type: ignore[attr-defined]
        assert BridgeSlot.objects.get(slot=1, client_id__startswith=prefix).holder == ""
        b.tick()
        assert sorted(b.bridges()) == [1]

        # a dies: it ticks no more and releases nothing.
        died = clock.now
        a.abandon()
        clock.now = died + seconds(0.75 * LEASE_S)
        b.tick()
        assert sorted(b.bridges()) == [1]  # a's lease still holds
        clock.now += seconds(b.tick_s)
        b.tick()  # a's lease and process row ran out: fair share 2, slot 0 adopted
        assert sorted(b.bridges()) == [0, 1]
        assert clock.now - died <= seconds(LEASE_S)
        assert BridgeSlot.objects.get(slot=0, client_id__startswith=prefix).version == 2

        a.tick()  # a was only paused: its renewal reports slot 0 lost
        assert a.bridges() == {}
    finally:
        a.shutdown()
        b.shutdown()
    assert not BridgeSlot.objects.filter(client_id__startswith=prefix).exclude(holder="").exists()
    assert not BridgeProcess.objects.filter(holder__in=["a:1:x", "b:2:y"]).exists()


@pytest.mark.django_db(transaction=True)
def test_a_standby_with_one_slot_claims_nothing_while_the_holder_lives() -> None:
    prefix, clock = f"test-standby-{uuid.uuid4().hex[:8]}", Clock()
    bridge_slots_ensure(prefix=prefix, slots=1, now=T0)
    a, b = supervisor(prefix, "a:1:x", clock, 1), supervisor(prefix, "b:2:y", clock, 1)
    try:
        for _ in range(4):
            a.tick()
            b.tick()
            clock.now += seconds(a.tick_s)
        assert sorted(a.bridges()) == [0] and b.bridges() == {}
        a.shutdown()  # a stop on purpose hands the slot over: the standby takes it at once
        b.tick()
        assert sorted(b.bridges()) == [0]
    finally:
        a.shutdown()
        b.shutdown()


# --- /health and /metrics ----------------------------------------------------------------


def slots_settings(settings, ids: list[str]) -> None:  # type: ignore[no-untyped-def]
    settings.BRIDGE_SLOT_PREFIX = ids[0].split("/")[0]
    settings.BRIDGE_SLOTS = 2
    settings.BRIDGE_LEASE_S = LEASE_S
    settings.BRIDGE_HEARTBEAT_STALE_S = 60.0


def test_health_fails_for_a_slot_unheld_longer_than_a_lease(ids: list[str], settings) -> None:  # type: ignore[no-untyped-def]
    slots_settings(settings, ids)
    claim(ids, "host-a:1:x", T0)
    claim(ids, "host-a:1:x", T0)
    bridge_slot_beat(client_id=ids[0], holder="host-a:1:x", connected=True, now=T0)
    bridge_slot_release(client_id=ids[1], holder="host-a:1:x", now=T0)
    bridge_slots_renew(client_ids=ids, holder="host-a:1:x", lease_s=LEASE_S, now=T0 + seconds(10))

    within: Any = bridge_health(T0 + seconds(LEASE_S))
    assert within["ok"] is True
    assert within["slots"][0] == {
        "slot": 0, "ok": True, "held": True, "holderHost": "host-a", "connected": True,
        "ageSeconds": float(LEASE_S), "unheldSeconds": 0.0,
    }  # fmt: skip

    late: Any = bridge_health(T0 + seconds(LEASE_S + 1))
    assert late["ok"] is False
    assert late["slots"][1] == {"slot": 1, "ok": False, "held": False, "unheldSeconds": 21.0}


def test_health_fails_for_a_dead_holder_and_a_stale_beat(ids: list[str], settings) -> None:  # type: ignore[no-untyped-def]
    slots_settings(settings, ids)
    claim(ids, "host-a:1:x", T0)
    claim(ids, "host-b:2:y", T0)
    bridge_slot_beat(client_id=ids[0], holder="host-a:1:x", connected=True, now=T0)
    bridge_slot_beat(client_id=ids[1], holder="host-b:2:y", connected=True, now=T0)

    # host-a renews but its bridge beat no more; host-b died (its lease ran out).
    bridge_slots_renew(client_ids=ids, holder="host-a:1:x", lease_s=LEASE_S, now=T0 + seconds(61))
    verdict: Any = bridge_health(T0 + seconds(61))

    assert verdict["ok"] is False
    slot_0, slot_1 = verdict["slots"]
    assert slot_0["ok"] is False and slot_0["ageSeconds"] == 61.0 and slot_0["held"] is True
    assert slot_1["ok"] is False and slot_1["held"] is False
    assert slot_1["unheldSeconds"] == 61.0 - 0.75 * LEASE_S


@pytest.mark.django_db
def test_health_and_metrics_show_slots_by_number_never_by_client_id(
    client: Client,
    settings: Any,
) -> None:
    prefix = f"farm-bridge-{uuid.uuid4().hex[:6]}"
    settings.BRIDGE_SLOT_PREFIX, settings.BRIDGE_SLOTS = prefix, 2
    now = datetime.now(UTC)
    bridge_slots_ensure(prefix=prefix, slots=2, now=now)
    ids = bridge_slot_ids(prefix=prefix, slots=2)
    bridge_process_beat(holder="web-1:42:abcdef", lease_s=15, now=now)
    claim(ids, "web-1:42:abcdef", now)
    bridge_slot_beat(client_id=ids[0], holder="web-1:42:abcdef", connected=True, now=now)

    health = client.get("/health")
    metrics = client.get("/metrics").content.decode()

    assert health.json()["checks"]["bridge"]["slots"][0]["holderHost"] == "web-1"
    assert prefix.encode() not in health.content
    assert 'farm_bridge_slot_held{slot="0"} 1.0' in metrics
    assert 'farm_bridge_slot_held{slot="1"} 0.0' in metrics
    assert 'farm_bridge_slot_unheld_seconds{slot="0"} 0.0' in metrics
    assert 'farm_bridge_slot_beat_age_seconds{slot="0"}' in metrics
    assert 'farm_bridge_slot_holder_info{holder="web-1:42:abcdef",host="web-1",slot="0"}' in metrics


# --- settings ----------------------------------------------------------------------------


def test_bad_slot_settings_stop_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRIDGE_SLOTS", "65")
    with pytest.raises(ImproperlyConfigured, match=r"^BRIDGE_SLOTS='65' is invalid: must be <= 64"):
        env_int("BRIDGE_SLOTS", 1, minimum=1, maximum=64)
    for bad in ("farm/bridge", "farm+", "farm#", "farm bridge"):
        monkeypatch.setenv("BRIDGE_SLOT_PREFIX", bad)
        with pytest.raises(ImproperlyConfigured, match=r"^BRIDGE_SLOT_PREFIX="):
            bridge_slot_prefix_from_env()
    monkeypatch.delenv("BRIDGE_SLOT_PREFIX")
    assert bridge_slot_prefix_from_env() == "farm-bridge"
    monkeypatch.setenv("BRIDGE_CLIENT_ID", "farm-bridge/oldhost")
    with pytest.raises(ImproperlyConfigured, match=r"^BRIDGE_CLIENT_ID=.*--retire"):
        bridge_slot_prefix_from_env()
