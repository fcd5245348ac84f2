"""Farms, device profiles with their endpoint catalogue, devices and their endpoints
(docs/spec.md §2)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from common.models import Organization
from common.validators import validate_json_bounds, validate_time_zone
from devices.mqtt.contract import rpc_request_topic

DEFAULT_EXPECTED_INTERVAL_S = 60  # how often a profile's devices report unless it says


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
    # How often its devices report; a device silent for three intervals (or its own
    # ``offline_after_s``) goes offline (``devices.services.health``).
    # Optional in forms (a form without it keeps the default); ``clean`` refuses it cleared.
    expected_interval_s = models.PositiveIntegerField(
        default=DEFAULT_EXPECTED_INTERVAL_S,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="how often its devices report, in seconds; a device silent for three "
        "intervals goes offline unless it names its own offline_after_s",
    )

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

    def clean(self) -> None:
        if self.expected_interval_s is None:
            raise ValidationError({"expected_interval_s": "seconds between its devices' reports"})


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
    offline_after_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="seconds without a message before the device goes offline "
        "(empty: three times its profile's expected interval)",
    )
    # Moved by ``devices.services.health`` only, each move a compare-and-set with its
    # ``DeviceHealthTransition``: a device never heard from is not online.
    online = models.BooleanField(default=False, editable=False)
    # When the device goes offline unless a message comes first: its last message plus its
    # offline window, kept by every write of either (ingest's touch, the window's edits), so
    # the sweep reads only the devices due, on ``device_offline_due``.
    offline_due_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        indexes = [
            models.Index(
                fields=["offline_due_at"],
                name="device_offline_due",
                condition=models.Q(online=True),
            ),
            # ``farm_devices_offline``: the devices heard from once and silent since.
            models.Index(
                fields=["farm"],
                name="device_offline",
                condition=models.Q(online=False, last_seen_at__isnull=False)
                & ~models.Q(status=DeviceStatus.RETIRED),
            ),
        ]

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
