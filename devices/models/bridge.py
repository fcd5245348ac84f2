"""The MQTT bridge's slots and processes, whose leases the bridges share through these rows."""

from __future__ import annotations

from django.db import models


class BridgeSlot(models.Model):
    """One MQTT bridge slot: a stable client id (``<BRIDGE_SLOT_PREFIX>/<n>``) whose persistent
    session holds a share of the shared subscription, and the lease of the one process that
    runs its bridge. Every change of holder is a compare-and-set on (holder, version), so two
    processes never both believe they took a slot; ``/health`` and ``/metrics`` read these
    rows, so the web process sees a slot nobody drains."""

    client_id = models.CharField(max_length=200, unique=True)
    slot = models.PositiveSmallIntegerField()
    holder = models.CharField(max_length=200, blank=True, default="")  # host:pid:random
    lease_until = models.DateTimeField(null=True, blank=True)
    unheld_since = models.DateTimeField(null=True, blank=True)  # set when released or made
    held_since = models.DateTimeField(null=True, blank=True)
    beat_at = models.DateTimeField(null=True, blank=True)  # the slot's bridge's sign of life
    connected = models.BooleanField(default=False)
    version = models.PositiveIntegerField(default=0)  # +1 on every change of holder

    def __str__(self) -> str:
        return f"slot {self.slot} held by {self.holder or 'nobody'}"


class BridgeProcess(models.Model):
    """A live ``mqtt_bridge`` process, slots or none (a standby): the fair share of slots is
    the slots over the processes seen within a lease. Deleted on a clean stop; a dead
    process's row goes stale and is pruned."""

    holder = models.CharField(max_length=200, primary_key=True)
    seen_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "bridge processes"

    def __str__(self) -> str:
        return f"{self.holder} @ {self.seen_at:%Y-%m-%d %H:%M:%S}"
