"""What devices send: telemetry as received, its hourly rollups, and the messages dropped."""

from __future__ import annotations

from django.db import models

from devices.models.fleet import Device, DeviceInstanceEndpoint


class Telemetry(models.Model):
    """A telemetry message as received; (device, message_ts, fingerprint) absorbs
    redeliveries. On PostgreSQL the table is partitioned by ``message_ts`` (the device's
    time, which a redelivery carries unchanged), so the key carries it (``common.partitions``)."""

    # No index of its own: ``telemetry_once`` (device, message_ts, fingerprint) starts with it,
    # and serves a device's readings over a time window too.
    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, related_name="telemetry", db_index=False
    )
    raw_payload = models.TextField()
    # The payload's hash, 16 bytes (``automation.keys.telemetry_fingerprint``).
    fingerprint = models.BinaryField(max_length=16)
    message_ts = models.DateTimeField()
    received_at = models.DateTimeField()

    class Meta:
        # The fingerprint hashes the payload, its ``ts`` included, so adding ``message_ts``
        # (the partition key) keeps one row per message; an unstamped message is timed by
        # its arrival, and its redeliveries are matched by ``automation.services.ingest``.
        constraints = [
            models.UniqueConstraint(
                fields=["device", "message_ts", "fingerprint"], name="telemetry_once"
            )
        ]
        # The retention prune's oldest-first scan on the partition key (common.retention).
        indexes = [models.Index(fields=["message_ts"], name="telemetry_ts")]

    def __str__(self) -> str:
        at = f"{self.message_ts:%Y-%m-%d %H:%M:%S}"
        return f"telemetry #{self.pk} {self.device.serial_number} @ {at}"


class TelemetryRollup(models.Model):
    """One endpoint's numeric readings in one UTC hour (bool as 0/1, enum not rolled up),
    kept for ``RETENTION_ROLLUPS_DAYS`` after the raw telemetry is gone: charts and reports
    over long windows read these. Sum and count, not an average, so merging two partial
    aggregates of an hour is exact (``devices.services.rollups``). 174 bytes per row on
    PostgreSQL after VACUUM (1M rows written hour by hour, as the job does): 101 of heap, 22
    of the primary key, 42 of the (endpoint, hour) key (31 once reindexed: hourly inserts
    across endpoints leave its pages part-full), 8 of the hour index (deduplicated)."""

    endpoint = models.ForeignKey(
        DeviceInstanceEndpoint, on_delete=models.CASCADE, db_index=False, related_name="+"
    )
    hour = models.DateTimeField()  # the hour's start, UTC
    value_min = models.FloatField()
    value_max = models.FloatField()
    value_sum = models.FloatField()
    value_count = models.IntegerField()
    last_value = models.FloatField()
    last_at = models.DateTimeField()  # the device time of ``last_value``

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "hour"], name="rollup_once_per_hour")
        ]
        indexes = [models.Index(fields=["hour"], name="rollup_hour_idx")]  # the prune's

    def __str__(self) -> str:
        return (
            f"rollup {self.endpoint_id} @ {self.hour:%Y-%m-%d %H:00}: {self.value_count} "
            f"readings, {self.value_min:g}..{self.value_max:g}"
        )


class TelemetryRollupWatermark(models.Model):
    """Where the rollups stand, one row: every telemetry row with an id up to
    ``rolled_up_through`` is folded in, none above it. ``horizon_id`` is the highest id seen
    at ``horizon_at``; ids up to it are folded only once no transaction can still commit one
    of them. ``covered_at``: every telemetry row committed before it is in the rollups."""

    rolled_up_through = models.BigIntegerField(default=0)
    horizon_id = models.BigIntegerField(default=0)
    horizon_at = models.DateTimeField(null=True, blank=True)
    covered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="one_watermark")]

    def __str__(self) -> str:
        return f"telemetry rolled up through #{self.rolled_up_through}"


class DeviceMessageRejectionReason(models.TextChoices):
    UNKNOWN_DEVICE = "unknown_device"
    DEVICE_RETIRED = "device_retired"
    INVALID_ENCODING = "invalid_encoding"
    INVALID_JSON = "invalid_json"
    JSON_TOO_DEEP = "json_too_deep"  # nested deeper than common.validators.JSON_MAX_DEPTH
    NOT_AN_OBJECT = "not_an_object"
    MISSING_VALUES = "missing_values"
    MISSING_FIELD = "missing_field"
    INVALID_FIELD = "invalid_field"
    INVALID_TIMESTAMP = "invalid_timestamp"
    TIMESTAMP_IN_FUTURE = "timestamp_in_future"  # beyond TELEMETRY_MAX_FUTURE_S ahead
    TIMESTAMP_TOO_OLD = "timestamp_too_old"  # older than TELEMETRY_MAX_AGE_S
    INVALID_VALUE_TYPE = "invalid_value_type"
    UNKNOWN_ENDPOINT = "unknown_endpoint"  # a telemetry key the device has no endpoint for
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNKNOWN_COMMAND = "unknown_command"
    RATE_LIMITED = "rate_limited"


class DeviceMessageKind(models.TextChoices):
    TELEMETRY = "telemetry"
    RPC_RESPONSE = "rpc_response"
    STATE = "state"


class DeviceMessageRejection(models.Model):
    """A device message (or part of one) that was dropped, kept so support can see why."""

    serial_number = models.CharField(max_length=200)
    kind = models.CharField(
        max_length=16, choices=DeviceMessageKind.choices, default=DeviceMessageKind.TELEMETRY
    )
    raw_payload = models.TextField()
    reason_code = models.CharField(max_length=32, choices=DeviceMessageRejectionReason.choices)
    detail = models.CharField(max_length=500, blank=True, default="")
    received_at = models.DateTimeField()
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["serial_number", "recorded_at"]),
            models.Index(fields=["recorded_at"], name="rejection_recorded"),  # the prune's scan
        ]

    def __str__(self) -> str:
        return (
            f"{self.serial_number} {self.kind} {self.reason_code} "
            f"@ {self.received_at:%Y-%m-%d %H:%M:%S}"
        )
