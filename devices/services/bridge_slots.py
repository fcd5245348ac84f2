"""Bridge slots held by leases in the database: which process runs the bridge of each of the
fixed MQTT client ids ``<BRIDGE_SLOT_PREFIX>/<n>``.

Guarantees: a slot changes holder only by a compare-and-set on (holder, version), so of two
processes claiming one slot exactly one wins; a holder renews every ``TICK_FRACTION`` of the
lease for ``RENEW_FRACTION`` of it, so the slot of a holder that died is claimable within
``0.75 x BRIDGE_LEASE_S`` and adopted, by a process ticking every quarter lease, within
``BRIDGE_LEASE_S`` of the death. A renewal reports the slots another process took over, so
their bridge stops. The same ORM statements run on PostgreSQL and SQLite; on PostgreSQL a
claim skips rows another claim has locked.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q

from config.env_bridge import bridge_slot_client_id
from devices.models import BridgeProcess, BridgeSlot

logger = logging.getLogger("devices.mqtt.bridge")

RENEW_FRACTION = 0.75  # a renewal holds the slot for this share of BRIDGE_LEASE_S
TICK_FRACTION = 0.25  # renew and look for unheld slots every this share of BRIDGE_LEASE_S
PROCESS_PRUNE_LEASES = 20  # a process row unseen for this many leases is deleted


@dataclass(frozen=True)
class SlotClaim:
    """A slot just taken: ``previous_holder`` is a dead holder's id when it was adopted
    (its lease ran out), empty when the slot had been released or never held."""

    client_id: str
    slot: int
    previous_holder: str
    version: int


def bridge_slot_ids(*, prefix: str, slots: int) -> list[str]:
    """The client ids of slots 0..slots-1, in slot order."""
    return [bridge_slot_client_id(prefix, n) for n in range(slots)]


def bridge_slot_lease_until(*, now: datetime, lease_s: float) -> datetime:
    return now + timedelta(seconds=RENEW_FRACTION * lease_s)


def bridge_slots_ensure(*, prefix: str, slots: int, now: datetime) -> None:
    """Make the slots' rows that do not exist yet, unheld since ``now``; existing rows (and
    their holders) are left alone, so every process may call it at start."""
    BridgeSlot.objects.bulk_create(
        [
            BridgeSlot(client_id=client_id, slot=n, unheld_since=now)
            for n, client_id in enumerate(bridge_slot_ids(prefix=prefix, slots=slots))
        ],
        ignore_conflicts=True,
    )


def bridge_slot_claim(
    *, client_ids: list[str], holder: str, lease_s: float, now: datetime
) -> SlotClaim | None:
    """Take the lowest unheld slot among ``client_ids`` (released, never held, or its
    holder's lease run out), or None when every one is held or another claim won the race.
    The take is a guarded UPDATE on the (holder, version) read, so a lost race changes
    nothing."""
    with transaction.atomic():
        free = (
            BridgeSlot.objects.select_for_update(skip_locked=True)
            .filter(client_id__in=client_ids)
            .filter(Q(holder="") | Q(lease_until__lt=now) | Q(lease_until__isnull=True))
            .exclude(holder=holder)
            .order_by("slot", "client_id")
            .values_list("pk", "client_id", "slot", "holder", "version")
        )
        for pk, client_id, slot, previous, version in free[:8]:
            taken = BridgeSlot.objects.filter(pk=pk, holder=previous, version=version).update(
                holder=holder,
                version=F("version") + 1,
                lease_until=bridge_slot_lease_until(now=now, lease_s=lease_s),
                held_since=now,
                unheld_since=None,
                beat_at=None,
                connected=False,
            )
            if taken:
                return SlotClaim(client_id, slot, previous, version + 1)
    return None


def bridge_slots_renew(
    *, client_ids: list[str], holder: str, lease_s: float, now: datetime
) -> set[str]:
    """Extend ``holder``'s leases among ``client_ids``; the client ids it still holds (one
    another process took over is missing: its bridge must stop). A lease that ran out with
    nobody taking it is renewed: the holder never lost it."""
    mine = BridgeSlot.objects.filter(client_id__in=client_ids, holder=holder)
    mine.update(lease_until=bridge_slot_lease_until(now=now, lease_s=lease_s))
    return set(mine.values_list("client_id", flat=True))


def bridge_slot_release(*, client_id: str, holder: str, now: datetime) -> bool:
    """Hand the slot over: no holder, unheld since ``now``, claimable at once. False when
    ``holder`` no longer held it (nothing changed)."""
    released = BridgeSlot.objects.filter(client_id=client_id, holder=holder).update(
        holder="",
        version=F("version") + 1,
        lease_until=None,
        held_since=None,
        unheld_since=now,
        connected=False,
    )
    return released == 1


def bridge_slot_beat(*, client_id: str, holder: str, connected: bool, now: datetime) -> bool:
    """The slot's bridge's sign of life (from its loop every few seconds, and with
    ``connected=False`` when it disconnects); only its holder's bridge writes it."""
    beaten = BridgeSlot.objects.filter(client_id=client_id, holder=holder).update(
        beat_at=now, connected=connected
    )
    return beaten == 1


def bridge_process_beat(*, holder: str, lease_s: float, now: datetime) -> None:
    """This process is alive (slots or none): one row per process, updated in place; rows
    of processes unseen for ``PROCESS_PRUNE_LEASES`` leases are deleted on the way."""
    if not BridgeProcess.objects.filter(holder=holder).update(seen_at=now):
        BridgeProcess.objects.update_or_create(holder=holder, defaults={"seen_at": now})
    stale = now - timedelta(seconds=PROCESS_PRUNE_LEASES * lease_s)
    BridgeProcess.objects.filter(seen_at__lt=stale).delete()


def bridge_process_forget(*, holder: str) -> None:
    """A clean stop: this process no longer counts towards the fair share."""
    BridgeProcess.objects.filter(holder=holder).delete()


def bridge_process_live_since(*, now: datetime, lease_s: float) -> datetime:
    """Processes seen since then count as live: the same window as a lease, so a process
    counts as dead once its slots are claimable."""
    return now - timedelta(seconds=RENEW_FRACTION * lease_s)


def bridge_slots_fair_share(*, slots: int, live_processes: int) -> int:
    """The slots each live process should hold: rounded up, so every slot has room."""
    return math.ceil(slots / max(1, live_processes))


def bridge_slot_hand_over_due(
    *, holder: str, held: int, fair_share: int, held_by: dict[str, int], live: set[str]
) -> bool:
    """Whether ``holder`` should hand one slot over: it holds more than its fair share while
    another live process holds fewer (that one claims what is released)."""
    if held <= fair_share:
        return False
    return any(held_by.get(other, 0) < fair_share for other in live if other != holder)
