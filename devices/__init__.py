"""Devices: organisations, farms, device profiles and endpoints, telemetry ingestion.

Invariants: a device has one endpoint per endpoint of its profile (``device_create``,
``device_endpoints_sync``), and that profile is its farm's organisation's or a global one;
telemetry is validated at the edge (device time within bounds of the server clock) and
anything rejected, a key with no endpoint included, leaves a DeviceMessageRejection row with
a reason code; the same message delivered many times yields one Telemetry row and one set of
endpoint events; ingestion never evaluates or dispatches inline.
"""
