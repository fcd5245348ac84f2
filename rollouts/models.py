"""A fleet rollout: one value set on many endpoints, in waves, each target one ordinary
command of the ledger (docs/rollouts.md). The rollout row carries the plan and the driver's
position in it (rate, ramp, canary); targets carry what the rollout did with each endpoint,
and once sent, point at their command, whose state is the target's."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from automation.models import DeviceCommand
from automation.models.rules import PRIORITY_MAX, PRIORITY_MIN
from common.models import Organization
from common.validators import validate_json_bounds
from devices.models import Device, DeviceInstanceEndpoint, DeviceProfile, Farm
from rollouts.states import EndBehaviour, RolloutStatus, SkipReason, TargetMode, TargetStep

# Documented bounds (docs/rollouts.md); the API refuses a value outside them naming the field.
CANARY_MAX = 1000
RATE_MIN, RATE_MAX = 1.0, 10_000.0  # targets started per minute
FACTOR_MIN, FACTOR_MAX = 1.1, 5.0
RAMP_EVERY_MAX = 100_000
LIVE_PER_FARM_MAX = 1000
ABORT_CRITERIA_MAX = 8


class Rollout(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=120)
    # The column keeps its first name; the code says status, like every other ledger.
    status = models.CharField(max_length=16, choices=RolloutStatus.choices, db_column="state")
    # The selector: the profile's endpoint ``endpoint_key`` on its devices in ``farms``, or
    # only on ``devices`` when that list is given.
    mode = models.CharField(max_length=16, choices=TargetMode.choices, default=TargetMode.SNAPSHOT)
    farms = models.ManyToManyField(Farm, related_name="+")
    profile = models.ForeignKey(DeviceProfile, on_delete=models.PROTECT, related_name="+")
    endpoint_key = models.CharField(max_length=64)
    devices = models.ManyToManyField(Device, blank=True, related_name="+")
    value = models.JSONField(validators=[validate_json_bounds])
    # Ranks with rules' priorities (docs/architecture.md, "Precedence").
    priority = models.SmallIntegerField(
        default=0, validators=[MinValueValidator(PRIORITY_MIN), MaxValueValidator(PRIORITY_MAX)]
    )
    # Wall-clock times without a zone ("2026-12-24T22:00:00"): each farm reads them in its
    # own zone, so "22:00" starts each farm at its 22:00.
    start_local = models.CharField(max_length=19, blank=True, default="")
    end_local = models.CharField(max_length=19, blank=True, default="")
    end_behaviour = models.CharField(
        max_length=8, choices=EndBehaviour.choices, default=EndBehaviour.STOP
    )
    # The waves: a canary, then an exponential ramp counted on applied targets.
    canary_size = models.PositiveIntegerField()
    base_rate_per_minute = models.FloatField()
    increment_factor = models.FloatField()
    ramp_every_applied = models.PositiveIntegerField()
    max_rate_per_minute = models.FloatField()
    max_live_per_farm = models.PositiveIntegerField()
    abort_criteria = models.JSONField(default=list, blank=True)
    reason = models.CharField(max_length=400)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    # The driver's position in the plan: a pause keeps it, a resume goes on from it.
    canary_left = models.PositiveIntegerField()
    rate_per_minute = models.FloatField()
    rate_budget = models.FloatField(default=0.0)
    # [unix second, started] of the waves of the last minute: no 60 s ever starts more than
    # the rate, whatever the budget saved up while a farm's cap held the rollout back.
    recent_starts = models.JSONField(default=list, blank=True)
    ramp_next_applied = models.PositiveIntegerField()
    waves = models.PositiveIntegerField(default=0)
    ramping = models.BooleanField(default=False)  # the canary finished clean: the ramp runs
    # A continuous rollout looks only at endpoints above this id for new targets.
    targets_through_endpoint = models.BigIntegerField(default=0)
    tripped = models.JSONField(null=True, blank=True)  # the abort criterion and its counts
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=0)
    ticked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status"], name="rollout_state")]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    increment_factor__gte=FACTOR_MIN,
                    increment_factor__lte=FACTOR_MAX,
                    base_rate_per_minute__gte=RATE_MIN,
                    max_rate_per_minute__gte=models.F("base_rate_per_minute"),
                    max_rate_per_minute__lte=RATE_MAX,
                    max_live_per_farm__gte=1,
                    ramp_every_applied__gte=1,
                ),
                name="rollout_plan_in_bounds",
            )
        ]

    def __str__(self) -> str:
        return f"rollout #{self.pk} {self.name} ({self.status})"


class RolloutTarget(models.Model):
    """One endpoint of a rollout: ``pending`` until a wave sends it (``sent``, its command
    linked, that command's status is the target's) or the rollout skips it (``reason``);
    ``wave`` is the wave that sent or skipped it (none: skipped by a stop)."""

    # No index of its own: the two below lead with it.
    rollout = models.ForeignKey(
        Rollout, on_delete=models.CASCADE, related_name="targets", db_index=False
    )
    endpoint = models.ForeignKey(DeviceInstanceEndpoint, on_delete=models.CASCADE, related_name="+")
    step = models.CharField(max_length=8, choices=TargetStep.choices, default=TargetStep.PENDING)
    reason = models.CharField(max_length=24, choices=SkipReason.choices, blank=True, default="")
    wave = models.PositiveIntegerField(null=True, blank=True)  # 1 is the canary's first
    command = models.OneToOneField(
        DeviceCommand,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="rollout_target",
    )
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rollout", "endpoint"], name="rollout_target_once")
        ]
        indexes = [models.Index(fields=["rollout", "step", "id"], name="rollout_target_next")]

    def __str__(self) -> str:
        return f"rollout #{self.rollout_id} target endpoint {self.endpoint_id} ({self.step})"


class RolloutTransition(models.Model):
    """The rollout's timeline: every status move with who and why (the creation's from ""). A
    wave moves its targets, not the rollout: each target records the wave that sent or
    skipped it (``RolloutTarget.wave``)."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="transitions")
    from_status = models.CharField(max_length=16, db_column="from_state")
    to_status = models.CharField(max_length=16, db_column="to_state")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reason = models.CharField(max_length=400, blank=True, default="")
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["rollout", "at"], name="rollout_transition_at")]

    def __str__(self) -> str:
        return f"rollout #{self.rollout_id} {self.from_status} → {self.to_status}"
