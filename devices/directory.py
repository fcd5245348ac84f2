"""The lookups a long-running ingest needs for every batch (serial → device with its farm,
device → endpoints by key), kept per process so a quiet batch costs no read for them.

An entry is read again once it is ``ttl_s`` old, so a retired device, a device moved to
another farm or an endpoint added to a profile is seen within that many seconds; a serial the
database does not know is never kept, so a device provisioned a moment ago is seen at once.
Only the MQTT bridge uses it: the HTTP gateway and the tests read the database each time."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from devices.models import Device, DeviceInstanceEndpoint

DEFAULT_TTL_S = 5.0

EndpointKey = tuple[int, str]  # (device id, endpoint key)


@dataclass(frozen=True, slots=True)
class _Entry:
    device: Device
    endpoints: dict[str, DeviceInstanceEndpoint]
    loaded_at: float


class DeviceDirectory:
    """Devices and their endpoints by serial, each entry at most ``ttl_s`` old."""

    def __init__(
        self, *, ttl_s: float = DEFAULT_TTL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self.reads = 0  # database round trips made, for tests and progress lines

    def devices(self, serials: Collection[str]) -> dict[str, Device]:
        """The known devices among ``serials``, reading only those missing or stale."""
        now = self._clock()
        stale = {s for s in serials if (e := self._entries.get(s)) is None or self._old(e, now)}
        if stale:
            self._load(stale, now)
        return {s: entry.device for s in serials if (entry := self._entries.get(s)) is not None}

    def endpoints(self, devices: Collection[Device]) -> dict[EndpointKey, DeviceInstanceEndpoint]:
        """The endpoints of ``devices`` (as ``devices`` returned them) by (device id, key)."""
        found: dict[EndpointKey, DeviceInstanceEndpoint] = {}
        for device in devices:
            entry = self._entries.get(device.serial_number)
            if entry is None or entry.device.pk != device.pk:
                continue
            for key, endpoint in entry.endpoints.items():
                found[(device.pk, key)] = endpoint
        return found

    def forget(self) -> None:
        """Drop every entry (a commit failed: perhaps on a device deleted meanwhile)."""
        self._entries.clear()

    def _old(self, entry: _Entry, now: float) -> bool:
        return now - entry.loaded_at >= self._ttl_s

    def _load(self, serials: set[str], now: float) -> None:
        loaded = {
            d.serial_number: d
            for d in Device.objects.filter(serial_number__in=serials).select_related("farm")
        }
        by_device: dict[int, dict[str, DeviceInstanceEndpoint]] = {
            d.pk: {} for d in loaded.values()
        }
        if loaded:
            rows = DeviceInstanceEndpoint.objects.filter(device_id__in=list(by_device))
            for endpoint in rows.select_related("profile_endpoint"):
                by_device[endpoint.device_id][endpoint.profile_endpoint.key] = endpoint
        self.reads += 2 if loaded else 1
        for serial in serials:
            device = loaded.get(serial)
            if device is None:
                self._entries.pop(serial, None)  # unknown now: not kept, asked again next time
            else:
                self._entries[serial] = _Entry(device, by_device[device.pk], now)
