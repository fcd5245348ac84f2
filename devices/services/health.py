"""Device health: a device with no message for its offline window (``offline_after_s``, by
default ``OFFLINE_INTERVALS`` of its profile's ``expected_interval_s``) goes offline, and its
next message brings it back online. Each change is one compare-and-set on ``online`` with
its ``DeviceHealthTransition`` in the same transaction, and one ``DeviceWentOffline`` /
``DeviceCameBack`` after commit: however many sweeps or ingest workers see it, it is
recorded once.

The sweep costs one indexed read when nothing changed, whatever the fleet: every write of
``last_seen_at`` or of a window also writes ``offline_due_at`` (the last message plus the
window, in SQL, so a concurrent edit cannot leave it stale), and the sweep reads
``online AND offline_due_at <= now`` on the partial index ``device_offline_due``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, QuerySet
from django.db.models.expressions import RawSQL
from django.utils.dateparse import parse_datetime

from common.audit.writes import audited_update
from devices.ingest_sql import (
    DEVICES,
    devices_online_set,
    devices_touch,
    offline_due_sql,
)
from devices.ingest_sql import OFFLINE_INTERVALS as OFFLINE_INTERVALS  # named here for callers
from devices.models import (
    Device,
    DeviceHealthCause,
    DeviceHealthTransition,
    DeviceProfile,
)
from events.envelope import occurred_at_format
from events.event_types import DEVICE_CAME_BACK, DEVICE_WENT_OFFLINE, DeviceHealthPayload
from events.services.publish import event_publish


def _offline_due(window: str, params: Sequence[int | None] = ()) -> RawSQL:
    """The offline time from the last message and ``window`` (SQL), as an ORM update's value:
    the same formula as ingest's touch (``devices.ingest_sql.offline_due_sql``)."""
    due = offline_due_sql(f"{DEVICES}.last_seen_at", window)
    return RawSQL(due, list(params), output_field=DateTimeField())


@dataclass(frozen=True)
class HealthMove:
    """A device that moved between online and offline, as its guarded update returned it."""

    device_id: int
    serial_number: str
    farm_id: int
    last_seen_at: datetime | None


def devices_heard_from(*, device_ids: Sequence[int], now: datetime) -> list[HealthMove]:
    """Ingest's touch, inside its transaction: one UPDATE of ``last_seen_at`` and
    ``offline_due_at`` that returns which devices are not online, then, only for those
    (normally none), the guarded UPDATE bringing them back. The touch goes first: its row
    locks make a concurrent sweep wait and then see the new due time, and a device the sweep
    flipped just before is brought back here. Returns the devices that came back."""
    ids = sorted(set(device_ids))
    if not ids:
        return []
    not_online = devices_touch(ids, now)
    if not not_online:  # the touch's locks hold: none of them can be moved meanwhile
        return []
    back = _online_set(not_online, online=True)
    _moves_record(back, online=True, cause=DeviceHealthCause.MESSAGE, now=now)
    return back


def devices_offline_sweep(*, now: datetime, batch: int) -> list[HealthMove]:
    """The devices online whose offline time has come, at most ``batch`` of them, moved
    offline: one indexed read when none is due; otherwise one guarded UPDATE, one INSERT of
    their transitions and their events after commit, whatever the batch's size. A device a
    concurrent sweep (or a message) moved first is left alone."""
    due = list(
        Device.objects.filter(online=True, offline_due_at__lte=now)
        .order_by("offline_due_at")
        .values_list("pk", flat=True)[:batch]
    )
    if not due:
        return []
    with transaction.atomic():
        gone = _online_set(due, online=False, due_by=now)
        _moves_record(gone, online=False, cause=DeviceHealthCause.SILENT, now=now)
    return gone


OFFLINE_SWEEP_BATCHES = 20  # per run: a fleet-wide outage moves 10,000 devices a run


def devices_offline_sweep_due(*, now: datetime) -> list[HealthMove]:
    """One run of the sweep: batches of ``DEVICE_HEALTH_SWEEP_BATCH`` until none is due, at
    most ``OFFLINE_SWEEP_BATCHES`` of them (the next run takes the rest)."""
    batch = settings.DEVICE_HEALTH_SWEEP_BATCH
    moved: list[HealthMove] = []
    for _ in range(OFFLINE_SWEEP_BATCHES):
        gone = devices_offline_sweep(now=now, batch=batch)
        moved += gone
        if len(gone) < batch:
            break
    return moved


def device_offline_after_set(*, device: Device, offline_after_s: int | None) -> Device:
    """A device's own offline window (None: its profile's default), with its offline time
    moved to match in the same statement."""
    audited_update(
        Device.objects.filter(pk=device.pk),
        offline_after_s=offline_after_s,
        offline_due_at=_offline_due("%s", [offline_after_s]),
    )
    device.refresh_from_db(fields=["offline_after_s", "offline_due_at"])
    return device


def devices_offline_due_refresh(*, devices: QuerySet[Device]) -> int:
    """Recompute the offline time of ``devices`` from their last message and their window
    as stored now (after a profile's interval or a form changed it); one UPDATE."""
    return devices.update(offline_due_at=_offline_due(f"{DEVICES}.offline_after_s"))


def profile_expected_interval_set(*, profile: DeviceProfile, expected_interval_s: int) -> None:
    """A profile's reporting interval, and the offline time of its devices that follow it
    (no window of their own), in one transaction."""
    with transaction.atomic():
        audited_update(
            DeviceProfile.objects.filter(pk=profile.pk), expected_interval_s=expected_interval_s
        )
        devices_offline_due_refresh(
            devices=Device.objects.filter(profile=profile, offline_after_s__isnull=True)
        )
    profile.expected_interval_s = expected_interval_s


def _online_set(
    ids: Sequence[int], *, online: bool, due_by: datetime | None = None
) -> list[HealthMove]:
    """The compare-and-set: ``online`` written only on rows that do not hold it yet (and,
    going offline, whose offline time has still come), returning exactly the rows moved."""
    rows = devices_online_set(ids, online=online, due_by=due_by)
    return [HealthMove(row[0], row[1], row[2], _aware(row[3])) for row in rows]


def _aware(value: datetime | str | None) -> datetime | None:
    """A timestamp as RETURNING gives it: SQLite answers text, in UTC."""
    if value is None:
        return None
    parsed = parse_datetime(value) if isinstance(value, str) else value
    if parsed is None:
        raise ValueError(f"not a timestamp: {value!r}")
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def device_retired_offline(*, device_id: int, now: datetime) -> None:
    """A retired device sends nothing more: it leaves the online devices with its status
    change (its transition says why), so the sweep never reports it silent. No
    ``DeviceWentOffline``: ``DeviceStatusChanged`` tells consumers."""
    _transitions_write(
        _online_set([device_id], online=False),
        online=False,
        cause=DeviceHealthCause.RETIRED,
        now=now,
    )


def _moves_record(moves: Sequence[HealthMove], *, online: bool, cause: str, now: datetime) -> None:
    """The moves' audit rows and their events after commit, keyed by the fact: going offline
    after this last message, or coming back with this message."""
    if not moves:
        return
    _transitions_write(moves, online=online, cause=cause, now=now)
    event_type, key = (
        (DEVICE_CAME_BACK, "device-back")
        if online
        else (
            DEVICE_WENT_OFFLINE,
            "device-offline",
        )
    )
    at = occurred_at_format(now)
    for m in moves:
        seen = None if m.last_seen_at is None else occurred_at_format(m.last_seen_at)
        event_publish(
            event_type,
            idempotency_key=f"{key}:{m.device_id}:{seen or 'never'}",
            payload=DeviceHealthPayload(
                device_id=m.device_id,
                serial_number=m.serial_number,
                farm_id=m.farm_id,
                last_seen_at=seen,
                at=at,
            ),
            occurred_at=now,
        )


def _transitions_write(
    moves: Sequence[HealthMove], *, online: bool, cause: str, now: datetime
) -> None:
    """The moves' audit rows: one INSERT, the unique key absorbing a repeat."""
    if not moves:
        return
    DeviceHealthTransition.objects.bulk_create(
        [
            DeviceHealthTransition(
                device_id=m.device_id,
                online=online,
                cause=cause,
                last_seen_at=m.last_seen_at,
                recorded_at=now,
            )
            for m in moves
        ],
        ignore_conflicts=True,
    )
