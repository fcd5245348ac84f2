"""Devices: organisations, farms, device profiles and endpoints, telemetry ingestion.

Invariants: telemetry is validated at the edge and anything rejected leaves a
DeviceMessageRejection row with a reason code; the same message delivered many times yields one
Telemetry row and one set of endpoint events; ingestion never evaluates or dispatches inline.
"""
