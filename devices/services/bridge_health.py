"""What ``/health`` and ``/metrics`` say about the bridge slots, read from their rows: a slot
nobody drains (its session keeps its share of the shared subscription, undelivered) fails
``/health`` and shows in the gauges, whoever wrote the rows.

Neither shows a slot's MQTT client id: a device logging in with it would take the slot's
session. Slots are named by number, holders by host."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from prometheus_client.core import GaugeMetricFamily

from common.json_types import JsonObject, JsonValue
from devices.selectors import BridgeSlotState, bridge_slots_read
from devices.services.bridge_slots import bridge_slot_ids


def bridge_slot_host(holder: str) -> str:
    """The host part of a holder id (``host:pid:random``)."""
    return holder.split(":", 1)[0]


def _slots_configured() -> tuple[list[str], dict[str, BridgeSlotState]]:
    ids = bridge_slot_ids(prefix=settings.BRIDGE_SLOT_PREFIX, slots=settings.BRIDGE_SLOTS)
    return ids, {row.client_id: row for row in bridge_slots_read(client_ids=ids)}


def bridge_slot_verdict(row: BridgeSlotState | None, slot: int, now: datetime) -> JsonObject:
    """One slot's health: held by a process whose bridge is connected and beat within
    BRIDGE_HEARTBEAT_STALE_S (a slot claimed less than a lease ago may still be connecting),
    or unheld for no longer than BRIDGE_LEASE_S (a hand-over, an adoption under way)."""
    lease_s: float = settings.BRIDGE_LEASE_S
    if row is None:
        return {"slot": slot, "ok": False, "held": False, "error": "no bridge has run this slot"}
    if not row.held(now):
        unheld_s = row.unheld_s(now)
        return {
            "slot": slot,
            "ok": unheld_s <= lease_s,
            "held": False,
            "unheldSeconds": round(unheld_s, 1),
        }
    age_s = None if row.beat_at is None else (now - row.beat_at).total_seconds()
    live = row.connected and age_s is not None and age_s <= settings.BRIDGE_HEARTBEAT_STALE_S
    since_claim_s = 0.0 if row.held_since is None else (now - row.held_since).total_seconds()
    connecting = row.beat_at is None and since_claim_s <= lease_s
    return {
        "slot": slot,
        "ok": live or connecting,
        "held": True,
        "holderHost": bridge_slot_host(row.holder),
        "connected": row.connected,
        "ageSeconds": None if age_s is None else round(age_s, 1),
        "unheldSeconds": 0.0,
    }


def bridge_health(now: datetime) -> JsonObject:
    """``/health``'s bridge check: every configured slot held by a connected bridge, or
    unheld for less than a lease."""
    ids, rows = _slots_configured()
    verdicts = [bridge_slot_verdict(rows.get(cid), n, now) for n, cid in enumerate(ids)]
    slots: list[JsonValue] = list(verdicts)
    return {"ok": all(v["ok"] is True for v in verdicts), "slots": slots}


def bridge_slot_gauges(now: datetime) -> Iterator[GaugeMetricFamily]:
    """Per-slot gauges at scrape time. Mosquitto does not report the messages queued in a
    client's offline session, so a dead slot's backlog is not a gauge here: its unheld
    seconds are the signal, and FarmBridgeSlotUnheld the alert."""
    ids, rows = _slots_configured()
    held = GaugeMetricFamily(
        "farm_bridge_slot_held",
        "1 when a bridge process holds the slot under a live lease, else 0.",
        labels=["slot"],
    )
    unheld = GaugeMetricFamily(
        "farm_bridge_slot_unheld_seconds",
        "Seconds the slot has had no live holder (released, or its holder's lease ran out); "
        "0 while held. Its session's messages wait in the broker meanwhile (Mosquitto does "
        "not report how many).",
        labels=["slot"],
    )
    age = GaugeMetricFamily(
        "farm_bridge_slot_beat_age_seconds",
        "Seconds since the slot's bridge last beat (the lag of its sign of life); missing "
        "until its first beat.",
        labels=["slot"],
    )
    holder = GaugeMetricFamily(
        "farm_bridge_slot_holder_info",
        "1 per held slot, labelled with the holder's host and process id (host:pid:random).",
        labels=["slot", "host", "holder"],
    )
    for n, client_id in enumerate(ids):
        row = rows.get(client_id)
        label = str(n)
        is_held = row is not None and row.held(now)
        held.add_metric([label], 1 if is_held else 0)
        if row is None:
            continue
        unheld.add_metric([label], row.unheld_s(now))
        if row.beat_at is not None and is_held:
            age.add_metric([label], max(0.0, (now - row.beat_at).total_seconds()))
        if is_held:
            holder.add_metric([label, bridge_slot_host(row.holder), row.holder], 1)
    yield from (held, unheld, age, holder)
