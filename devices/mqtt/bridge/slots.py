"""The bridge slot supervisor: which of the fixed slots ``<BRIDGE_SLOT_PREFIX>/<n>`` this
process runs a bridge for, decided through the leases of ``devices.services.bridge_slots``.

Guarantees: a slot's ``MqttBridge`` is created only once its lease is held, and stopped as
soon as a renewal shows another process took the slot (or the lease could not be renewed
before it ran out). Every quarter lease the supervisor beats its process row, renews, claims
unheld slots while it holds fewer than its fair share (``ceil(slots / live processes)``; a
process holding none claims at once, so a standby adopts a dead holder's slot within
``BRIDGE_LEASE_S``) and, holding more than its share while another live process holds fewer,
hands one over: its bridge stops first (flushing, acknowledging what was handed off,
disconnecting with its session kept), then the lease is released. A stop on purpose hands
every slot over the same way, so nobody retires a session by hand.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connections
from django.utils import timezone

from devices.mqtt.bridge.loop import STOP_TIMEOUT_S, MqttBridge
from devices.mqtt.bridge.session import SessionTakenOver
from devices.mqtt.client import MqttUnavailable
from devices.selectors import bridge_processes_live, bridge_slots_held_count
from devices.services.bridge_slots import (
    RENEW_FRACTION,
    TICK_FRACTION,
    SlotClaim,
    bridge_process_beat,
    bridge_process_forget,
    bridge_process_live_since,
    bridge_slot_beat,
    bridge_slot_claim,
    bridge_slot_hand_over_due,
    bridge_slot_ids,
    bridge_slot_release,
    bridge_slots_ensure,
    bridge_slots_fair_share,
    bridge_slots_renew,
)

logger = logging.getLogger("devices.mqtt.bridge")

Heartbeat = Callable[[str, bool], None]
# Makes the bridge of one slot: (client id, heartbeat) -> a bridge not yet started.
BridgeFactory = Callable[[str, Heartbeat], MqttBridge]
# Errors of a slot's bridge that stop the process while it still holds the slot: retrying
# cannot fix a refused login, and a session taken over from a held slot is a configuration
# error (two deployments on one broker under one BRIDGE_SLOT_PREFIX).
FATAL_BRIDGE_ERRORS = (MqttUnavailable, SessionTakenOver)


def bridge_holder_id() -> str:
    """This process's holder id, ``host:pid:random``: unique per process and restart; the
    host only tells an operator where a slot runs."""
    host = socket.gethostname().split(".")[0][:60]
    return f"{host}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class SlotRun:
    """One held slot's bridge and the thread it runs on."""

    client_id: str
    slot: int
    bridge: MqttBridge
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    error: BaseException | None = None


class BridgeSupervisor:
    """Holds this process's share of the bridge slots and runs one bridge per slot held."""

    def __init__(
        self,
        *,
        bridge_factory: BridgeFactory | None = None,
        prefix: str | None = None,
        slots: int | None = None,
        lease_s: float | None = None,
        holder: str | None = None,
        clock: Callable[[], datetime] = timezone.now,
    ) -> None:
        self._factory = bridge_factory or _bridge_default
        self._prefix: str = prefix or settings.BRIDGE_SLOT_PREFIX
        self._slots: int = slots or settings.BRIDGE_SLOTS
        self._lease_s: float = lease_s or settings.BRIDGE_LEASE_S
        self._holder = holder or bridge_holder_id()
        self._clock = clock
        self._ids = bridge_slot_ids(prefix=self._prefix, slots=self._slots)
        self._runs: dict[str, SlotRun] = {}
        self._lock = threading.Lock()  # guards _runs against the progress thread's reads
        self._valid_until = 0.0  # monotonic: our leases are good until then, renewed or not
        self._ensured = False

    @property
    def holder(self) -> str:
        return self._holder

    @property
    def tick_s(self) -> float:
        return TICK_FRACTION * self._lease_s

    @property
    def slot_ids(self) -> list[str]:
        return list(self._ids)

    def bridges(self) -> dict[int, MqttBridge]:
        """The bridge of each slot this process runs, by slot number (progress lines)."""
        with self._lock:
            return {run.slot: run.bridge for run in self._runs.values()}

    def run_forever(self, stop: threading.Event) -> None:
        """Tick every quarter lease until ``stop``, then hand every slot over. Raises what
        stopped a held slot's bridge for good (``FATAL_BRIDGE_ERRORS``)."""
        try:
            while True:
                self.tick()
                if stop.wait(self.tick_s):
                    break
        finally:
            self.shutdown()

    def tick(self) -> None:
        """One round: beat, renew, stop what was lost, then claim or hand over one slot."""
        started = time.monotonic()
        now = self._clock()
        try:
            if not self._ensured:  # the slots' rows, made by whichever process starts first
                bridge_slots_ensure(prefix=self._prefix, slots=self._slots, now=now)
                self._ensured = True
            bridge_process_beat(holder=self._holder, lease_s=self._lease_s, now=now)
            held = bridge_slots_renew(
                client_ids=self._ids, holder=self._holder, lease_s=self._lease_s, now=now
            )
        except DatabaseError as exc:
            close_old_connections()
            self._fence(exc)
            return
        self._valid_until = started + RENEW_FRACTION * self._lease_s
        for client_id in [c for c in self._runs if c not in held]:
            self._lost(client_id)
        self._bridges_check(held)
        try:
            self._balance(held, now)
        except DatabaseError as exc:
            close_old_connections()
            logger.warning("bridge slots: could not balance slots: %s", exc)
        for client_id in sorted(held - set(self._runs)):
            self._bridge_start(client_id)

    def shutdown(self) -> None:
        """A stop on purpose: every bridge stops (flushing, keeping its session), then every
        slot is released for another process to claim at once, then this process's row goes."""
        handed = self._bridges_stop(list(self._runs))
        now = self._clock()
        try:
            for client_id in self._ids:
                if bridge_slot_release(client_id=client_id, holder=self._holder, now=now):
                    self._log_hand_over(client_id, handed, reason="stopping")
            bridge_process_forget(holder=self._holder)
        except DatabaseError as exc:  # the leases run out on their own
            logger.warning("bridge slots: could not release on stop: %s", exc)

    def abandon(self) -> None:
        """Stop every bridge and tick no more, releasing nothing: how a process that died
        looks to the others (its leases run out; tests stage a death with it)."""
        self._bridges_stop(list(self._runs))

    # --- leases ---------------------------------------------------------------------------

    def _fence(self, exc: Exception) -> None:
        """The database did not answer: keep the bridges while our leases are good, stop
        them once they may have run out (another process may hold the slots by then)."""
        if time.monotonic() < self._valid_until or not self._runs:
            logger.warning("bridge slots: could not renew the leases: %s", exc)
            return
        logger.error(
            "bridge slots: leases not renewed before they ran out (%s); stopping %d bridge(s)",
            exc,
            len(self._runs),
            extra={"holder": self._holder, "reason": str(exc)},
        )
        self._bridges_stop(list(self._runs))

    def _balance(self, held: set[str], now: datetime) -> None:
        live = bridge_processes_live(
            seen_since=bridge_process_live_since(now=now, lease_s=self._lease_s)
        )
        live.add(self._holder)
        fair = bridge_slots_fair_share(slots=self._slots, live_processes=len(live))
        while len(held) < fair:
            claim = bridge_slot_claim(
                client_ids=self._ids, holder=self._holder, lease_s=self._lease_s, now=now
            )
            if claim is None:
                return
            held.add(claim.client_id)
            self._log_claim(claim, fair=fair, live=len(live))
        if len(held) <= fair:
            return
        held_by = bridge_slots_held_count(client_ids=self._ids, now=now)
        if not bridge_slot_hand_over_due(
            holder=self._holder, held=len(held), fair_share=fair, held_by=held_by, live=live
        ):
            return
        client_id = max(held, key=self._ids.index)
        handed = self._bridges_stop([client_id])
        if bridge_slot_release(client_id=client_id, holder=self._holder, now=self._clock()):
            held.discard(client_id)
            self._log_hand_over(client_id, handed, reason="fair share", fair=fair)

    # --- bridges --------------------------------------------------------------------------

    def _bridge_start(self, client_id: str) -> None:
        bridge = self._factory(client_id, self._beat)
        run = SlotRun(client_id, self._ids.index(client_id), bridge)
        run.thread = threading.Thread(
            target=self._bridge_run, args=(run,), name=f"mqtt-bridge-{client_id}", daemon=True
        )
        with self._lock:
            self._runs[client_id] = run
        run.thread.start()

    @staticmethod
    def _bridge_run(run: SlotRun) -> None:
        try:
            run.bridge.run_forever(run.stop)
        except BaseException as exc:  # the supervisor decides at its next tick
            run.error = exc
            logger.warning("bridge slot %d stopped: %s", run.slot, exc)
        finally:
            connections.close_all()

    def _bridges_stop(self, client_ids: list[str]) -> dict[str, str]:
        """Stop these slots' bridges together (each flushes and disconnects keeping its
        session); the stats summary of each, for the log line."""
        with self._lock:
            runs = [self._runs.pop(c) for c in client_ids if c in self._runs]
        for run in runs:
            run.stop.set()
            run.bridge.stop()
        for run in runs:
            if run.thread is not None:
                run.thread.join(STOP_TIMEOUT_S + 5)
        return {run.client_id: run.bridge.stats.summary() for run in runs}

    def _bridges_check(self, held: set[str]) -> None:
        """A held slot's bridge that ended: a fatal error stops the process, anything else
        is started again on this tick."""
        with self._lock:
            ended = [r for r in self._runs.values() if r.thread and not r.thread.is_alive()]
            for run in ended:
                del self._runs[run.client_id]
        for run in ended:
            if isinstance(run.error, FATAL_BRIDGE_ERRORS) and run.client_id in held:
                raise run.error
            if run.error is not None:
                logger.error(
                    "bridge slot %d ended with %s; starting it again",
                    run.slot,
                    run.error,
                    extra={"bridgeSlot": run.slot, "holder": self._holder},
                )

    def _beat(self, client_id: str, connected: bool) -> None:
        """A slot's bridge's sign of life, from its own thread, on a fresh connection if the
        old one died."""
        close_old_connections()
        bridge_slot_beat(
            client_id=client_id, holder=self._holder, connected=connected, now=self._clock()
        )

    # --- log lines ------------------------------------------------------------------------

    def _lost(self, client_id: str) -> None:
        slot = self._ids.index(client_id)
        handed = self._bridges_stop([client_id])
        logger.warning(
            "bridge slot %d lost: another process holds it now; its bridge stopped (%s)",
            slot,
            handed.get(client_id, ""),
            extra={"bridgeSlot": slot, "holder": self._holder, "slotEvent": "lost"},
        )

    def _log_claim(self, claim: SlotClaim, *, fair: int, live: int) -> None:
        extra = {
            "bridgeSlot": claim.slot,
            "holder": self._holder,
            "fairShare": fair,
            "liveProcesses": live,
            "slotVersion": claim.version,
        }
        if claim.previous_holder:
            logger.warning(
                "bridge slot %d adopted from %s, whose lease ran out: resuming its session",
                claim.slot,
                claim.previous_holder,
                extra=extra | {"previousHolder": claim.previous_holder, "slotEvent": "adopted"},
            )
            return
        logger.info("bridge slot %d claimed", claim.slot, extra=extra | {"slotEvent": "claimed"})

    def _log_hand_over(
        self, client_id: str, handed: dict[str, str], *, reason: str, fair: int | None = None
    ) -> None:
        slot = self._ids.index(client_id)
        logger.info(
            "bridge slot %d handed over (%s): %s",
            slot,
            reason,
            handed.get(client_id, "no bridge ran"),
            extra={
                "bridgeSlot": slot,
                "holder": self._holder,
                "fairShare": fair,
                "reason": reason,
                "slotEvent": "handed_over",
            },
        )


def _bridge_default(client_id: str, heartbeat: Heartbeat) -> MqttBridge:
    return MqttBridge(config=settings.MQTT, client_id=client_id, heartbeat=heartbeat)
