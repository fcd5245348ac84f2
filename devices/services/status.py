"""A device status change: support's move (maintenance, retire, back to active), which
publishes ``DeviceStatusChanged`` so other apps react after commit. Retiring revokes the
device's MQTT login before the change commits: a broker that does not confirm leaves the
device as it was. Back to active creates no login (the operator rotates to get one). A
retired device leaves the online devices in the same transaction."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from common.audit.writes import audited_update
from devices.models import Device, DeviceHealthCause, DeviceHealthTransition, DeviceStatus
from devices.services.credentials import device_credentials_revoke
from events.envelope import occurred_at_format
from events.event_types import DEVICE_STATUS_CHANGED, DeviceStatusChangedPayload
from events.services.publish import event_publish


def device_status_change(
    *, device_id: int, status: str, actor: str, now: datetime | None = None
) -> bool:
    """Move the device to ``status`` (compare-and-set on the status read) and publish
    ``DeviceStatusChanged`` after commit; False when it already had that status or another
    writer changed it first (then nothing is published). Retiring raises
    ``CredentialsUnavailable`` (and changes nothing) when the broker keeps the login."""
    if status not in DeviceStatus.values:
        raise ValueError(f"unknown device status {status!r}")
    now = now or timezone.now()
    device = Device.objects.get(pk=device_id)
    if device.status == status:
        return False
    with transaction.atomic():
        current = Device.objects.filter(pk=device.pk, status=device.status)
        moved = audited_update(current, status=status)
        if moved != 1:
            return False
        if status == DeviceStatus.RETIRED:
            device_credentials_revoke(serial_number=device.serial_number)
            _retired_offline(device=device, now=now)
        event_publish(
            DEVICE_STATUS_CHANGED,
            # One change of one device is one fact: its time makes it distinct from a later
            # change between the same two statuses.
            idempotency_key=(
                f"device-status:{device.pk}:{device.status}:{status}:{occurred_at_format(now)}"
            ),
            payload=DeviceStatusChangedPayload(
                device_id=device.pk,
                serial_number=device.serial_number,
                farm_id=device.farm_id,
                old_status=device.status,
                new_status=status,
                actor=actor,
            ),
            occurred_at=now,
        )
    return True


def _retired_offline(*, device: Device, now: datetime) -> None:
    """A retired device sends nothing more: it leaves the online devices with the status
    change (its transition says why), so the health sweep never reports it silent (no
    ``DeviceWentOffline``: ``DeviceStatusChanged`` tells consumers)."""
    moved = Device.objects.filter(pk=device.pk, online=True).update(
        online=False, offline_due_at=None
    )
    if moved:
        DeviceHealthTransition.objects.bulk_create(
            [
                DeviceHealthTransition(
                    device_id=device.pk,
                    online=False,
                    cause=DeviceHealthCause.RETIRED,
                    last_seen_at=device.last_seen_at,
                    recorded_at=now,
                )
            ],
            ignore_conflicts=True,
        )
