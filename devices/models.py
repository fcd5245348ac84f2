"""Devices domain tables (docs/spec.md §2)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models

from common.models import Organization
from common.validators import validate_json_bounds, validate_time_zone
from devices.mqtt.contract import rpc_request_topic


class Farm(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="farms")
    name = models.CharField(max_length=200)
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone])
    # How long an operator's manual command holds its endpoint against the farm's rules
    # (0: no hold, rules may act again at once); at most a week. Optional in forms (a form
    # without it keeps the default); ``clean`` refuses it cleared.
    manual_override_minutes = models.PositiveIntegerField(
        default=30, blank=True, validators=[MaxValueValidator(7 * 24 * 60)]
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Set once by ``farm_archive`` (never by a form): an archived farm is left out of the
    # farm list and its rules stop deciding; its devices, readings and history stay.
    archived_at = models.DateTimeField(null=True, blank=True, editable=False)
    archived_by = models.CharField(max_length=150, blank=True, default="", editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="farm_name_per_org")
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.manual_override_minutes is None:
            raise ValidationError({"manual_override_minutes": "minutes: 0 for no hold"})


class DeviceProfile(models.Model):
    """A device model's endpoint catalogue. It belongs to one organisation, whose devices
    alone may use it, or to none: a global profile, offered to every organisation and changed
    only by a superuser. Names are unique per organisation and among the global profiles."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="device_profiles",
        help_text="empty: a global profile, offered to every organisation",
    )
    name = models.CharField(max_length=200)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="profile_name_per_org"),
            models.UniqueConstraint(
                fields=["name"],
                condition=models.Q(organization__isnull=True),
                name="global_profile_name_once",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class EndpointDataType(models.TextChoices):
    BOOL = "bool"
    NUMBER = "number"
    ENUM = "enum"


class DeviceProfileEndpoint(models.Model):
    """An endpoint in a profile's catalogue, e.g. ``io1`` (bool, writable, ``setIO``)."""

    profile = models.ForeignKey(DeviceProfile, on_delete=models.CASCADE, related_name="endpoints")
    key = models.CharField(max_length=64)
    data_type = models.CharField(max_length=16, choices=EndpointDataType.choices)
    writable = models.BooleanField(default=False)
    min_value = models.FloatField(null=True, blank=True)
    max_value = models.FloatField(null=True, blank=True)
    allowed_values = models.JSONField(null=True, blank=True, validators=[validate_json_bounds])
    rpc_method = models.CharField(max_length=64, blank=True, default="")
    rpc_param_key = models.CharField(max_length=64, blank=True, default="")
    # What a number counts, shown after it on every page ("30 °C", "55 %"); "" for none.
    unit = models.CharField(max_length=16, blank=True, default="")
    # The value a writable endpoint falls back to when a run-time limit ends (null: none);
    # ``devices.services.profiles.endpoint_spec_problems`` holds it to the endpoint's type,
    # bounds and allowed values, so the follow-up command is never refused by the gates.
    safe_value = models.JSONField(
        null=True,
        blank=True,
        validators=[validate_json_bounds],
        help_text="the value the endpoint falls back to when a run-time limit ends "
        "(writable endpoints only; null: none)",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["profile", "key"], name="endpoint_key_per_profile")
        ]

    def __str__(self) -> str:
        return f"{self.profile} · {self.key}"


class DeviceStatus(models.TextChoices):
    ACTIVE = "active"
    MAINTENANCE = "maintenance"
    RETIRED = "retired"


def validate_serial_number(value: str) -> None:
    """A serial is the device's topic segment and, on the broker, its user name and client
    id: no topic separator or wildcard (a '/' would also pass for a backend client id)."""
    try:
        rpc_request_topic(value)
    except ValueError as exc:
        raise ValidationError(str(exc), code="invalid_serial") from exc


class Device(models.Model):
    farm = models.ForeignKey(Farm, on_delete=models.PROTECT, related_name="devices")
    profile = models.ForeignKey(DeviceProfile, on_delete=models.PROTECT, related_name="devices")
    serial_number = models.CharField(
        max_length=64, unique=True, validators=[validate_serial_number]
    )
    name = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(
        max_length=16, choices=DeviceStatus.choices, default=DeviceStatus.ACTIVE
    )
    last_seen_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.serial_number


class DeviceInstanceEndpoint(models.Model):
    """One endpoint on one device; caches the last reported value for the no-storm check."""

    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="endpoints")
    profile_endpoint = models.ForeignKey(
        DeviceProfileEndpoint, on_delete=models.PROTECT, related_name="instances"
    )
    is_enabled = models.BooleanField(default=True)
    rpc_method_override = models.CharField(max_length=64, blank=True, default="")
    rpc_param_key_override = models.CharField(max_length=64, blank=True, default="")
    last_value = models.JSONField(null=True, blank=True)
    last_value_at = models.DateTimeField(null=True, blank=True)
    # Configuration edits only (admin, API): readings update ``last_value`` with SQL, never
    # through save(). An edit lifts the command cool-downs of this endpoint.
    updated_at = models.DateTimeField(auto_now=True, null=True)

    class Meta:
        verbose_name = "device endpoint"
        constraints = [
            models.UniqueConstraint(
                fields=["device", "profile_endpoint"], name="one_instance_per_endpoint"
            )
        ]

    def __str__(self) -> str:
        return f"{self.device.serial_number} · {self.profile_endpoint.key}"

    @property
    def rpc_method(self) -> str:
        return self.rpc_method_override or self.profile_endpoint.rpc_method

    @property
    def rpc_param_key(self) -> str:
        return self.rpc_param_key_override or self.profile_endpoint.rpc_param_key


class Telemetry(models.Model):
    """A telemetry message as received; (device, fingerprint, message_ts) absorbs
    redeliveries. On PostgreSQL the table is partitioned by ``message_ts`` (the device's
    time, which a redelivery carries unchanged), so the key carries it (``common.partitions``)."""

    # No index of its own: ``telemetry_once`` (device, fingerprint, message_ts) starts with it.
    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, related_name="telemetry", db_index=False
    )
    raw_payload = models.TextField()
    fingerprint = models.CharField(max_length=64)
    message_ts = models.DateTimeField()
    received_at = models.DateTimeField()

    class Meta:
        # The fingerprint hashes the payload, its ``ts`` included, so adding ``message_ts``
        # (the partition key) keeps one row per message; an unstamped message is timed by
        # its arrival, and its redeliveries are matched by ``automation.services.ingest``.
        constraints = [
            models.UniqueConstraint(
                fields=["device", "fingerprint", "message_ts"], name="telemetry_once"
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
