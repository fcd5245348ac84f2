"""Device health: each move of a device between online and offline, as its audit row."""

from __future__ import annotations

from django.db import models

from devices.models.fleet import Device


class DeviceHealthCause(models.TextChoices):
    SILENT = "silent"  # no message for its offline window (the sweep)
    MESSAGE = "message"  # a message from a device not online (ingest)
    RETIRED = "retired"  # retired while online: it will send nothing more


class DeviceHealthTransition(models.Model):
    """One move of a device between online and offline, written in the transaction of the
    compare-and-set that made it: one row per change, however many sweeps or ingest
    workers saw it (the unique key absorbs a repeat)."""

    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, related_name="health_transitions", db_index=False
    )
    online = models.BooleanField()  # the state it moved to
    cause = models.CharField(max_length=16, choices=DeviceHealthCause.choices)
    last_seen_at = models.DateTimeField(null=True, blank=True)  # its last message then
    recorded_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["device", "online", "last_seen_at"], name="device_health_move_once"
            )
        ]
        indexes = [models.Index(fields=["recorded_at"], name="device_health_recorded")]

    def __str__(self) -> str:
        state = "online" if self.online else "offline"
        return f"{self.device_id} {state} ({self.cause}) @ {self.recorded_at:%Y-%m-%d %H:%M:%S}"
