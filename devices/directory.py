"""The lookups a long-running ingest needs for every batch (serial → device with its farm,
device → endpoints by key), kept per process behind the configuration version
(``common.config_version``), so a quiet batch costs one read of one row for them.

Any configuration write (a device retired or moved to another farm, an endpoint disabled or
added to a profile) moves the version in its transaction, and the next batch drops every
entry: the next message is handled by the new configuration, not after a time to live. A
serial the database does not know is never kept, so a device provisioned a moment ago is
seen at once. Only the MQTT bridge uses it: the HTTP gateway and the tests read the database
each time, with the same statement (``devices.ingest_sql.devices_with_endpoints``)."""

from __future__ import annotations

import threading
from collections.abc import Collection

from common.config_version import config_version
from devices.ingest_sql import DeviceEndpoints, devices_with_endpoints
from devices.models import Device, DeviceInstanceEndpoint

EndpointKey = tuple[int, str]  # (device id, endpoint key)


class DeviceDirectory:
    """Devices and their endpoints by serial, as of the configuration version last read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version: int | None = None
        self._entries: dict[str, DeviceEndpoints] = {}
        self.reads = 0  # reads of devices with their endpoints, for tests and progress lines

    def devices(self, serials: Collection[str]) -> dict[str, Device]:
        """The known devices among ``serials``, reading only those missing, after the version
        (one row) says whether the entries still hold."""
        version = config_version()
        with self._lock:
            if version is None or version != self._version:
                self._entries.clear()  # read after the version: never older than it
                self._version = version
            missing = {s for s in serials if s not in self._entries}
            if missing:  # a serial the database does not know is not kept: asked next time
                self._entries.update(devices_with_endpoints(missing))
                self.reads += 1
            return {s: e.device for s in serials if (e := self._entries.get(s)) is not None}

    def endpoints(self, devices: Collection[Device]) -> dict[EndpointKey, DeviceInstanceEndpoint]:
        """The endpoints of ``devices`` (as ``devices`` returned them) by (device id, key)."""
        found: dict[EndpointKey, DeviceInstanceEndpoint] = {}
        with self._lock:
            for device in devices:
                entry = self._entries.get(device.serial_number)
                if entry is None or entry.device.pk != device.pk:
                    continue
                for key, endpoint in entry.endpoints.items():
                    found[(device.pk, key)] = endpoint
        return found

    def forget(self) -> None:
        """Drop every entry (a commit failed: perhaps on a device deleted meanwhile)."""
        with self._lock:
            self._entries.clear()
            self._version = None
