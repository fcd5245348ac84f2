"""A device status change: support's move (maintenance, retire, back to active), which
publishes ``DeviceStatusChanged`` so other apps react after commit. Retiring revokes the
device's MQTT login before the change commits: a broker that does not confirm leaves the
device as it was. Back to active creates no login (the operator rotates to get one). A
retired device leaves the online devices in the same transaction."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from common.ledger import Ledger, Move, Step, ledger_move
from devices.models import Device, DeviceStatus
from devices.services.credentials import device_credentials_revoke
from devices.services.health import device_retired_offline
from events.envelope import occurred_at_format
from events.event_types import DEVICE_STATUS_CHANGED, DeviceStatusChangedPayload
from events.services.publish import event_publish

# A device's status is support's to move (no version: the status read is the guard); the
# audit log follows the device, so each move is an entry with its actor.
DEVICES = Ledger(Device, version=None)


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
        move = Move(device.pk, device.status, steps=[Step(status)])
        if not ledger_move(DEVICES, [move], now=now):
            return False
        if status == DeviceStatus.RETIRED:
            device_credentials_revoke(serial_number=device.serial_number)
            device_retired_offline(device_id=device.pk, now=now)
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
