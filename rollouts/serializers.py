"""API shapes of fleet rollouts: the create request (types and shapes only: every bound and
every check against the fleet is ``rollout_create``'s, answered as field errors), the rollout
as read with its counters and the driver's position, its targets and its timeline."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from datetime import datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from automation.models.rules import PRIORITY_MAX, PRIORITY_MIN
from common.serializers import EndpointValueField, StrictCharField, StrictFloatField
from common.serializers import StrictIntegerField as Int
from common.validators import DATE_MAX, DATE_MIN, ID_MAX
from rollouts import models as m
from rollouts.models import Rollout, RolloutTarget, RolloutTransition
from rollouts.services.counts import PRUNED, TARGET_STATES, Counts, rollout_count
from rollouts.services.plan import RolloutSpec
from rollouts.states import AbortOutcome, EndBehaviour, RolloutStatus, TargetMode, TargetStep

FARMS_MAX = 500  # farms one rollout names
DEVICES_MAX = 10_000  # devices one rollout names (its selector, not its targets)
_LOCAL = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2})?")
_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in fields(RolloutSpec) if f.default is not MISSING
}


def _spec_default(name: str) -> dict[str, Any]:
    """An optional field whose default is ``RolloutSpec``'s, shown in the schema."""
    return {"required": False, "default": _DEFAULTS[name]}


class LocalDateTimeField(StrictCharField):
    """A wall-clock time without a zone (``2026-12-24T22:00[:00]``), which each farm reads in
    its own zone; its date lies within the API's date bounds, so no farm's zone can push it
    out of what a datetime holds."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "YYYY-MM-DDTHH:MM[:SS], no zone: each farm's own time")
        super().__init__(max_length=19, allow_blank=True, required=False, default="", **kwargs)

    def to_internal_value(self, data: Any) -> str:
        text = super().to_internal_value(data)
        if not text:
            return text
        if not _LOCAL.fullmatch(text):
            raise serializers.ValidationError("must be YYYY-MM-DDTHH:MM[:SS] without a zone")
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise serializers.ValidationError("is not a date and time of the calendar") from None
        if not DATE_MIN <= moment.date() <= DATE_MAX:
            raise serializers.ValidationError(f"must lie between {DATE_MIN} and {DATE_MAX}")
        return text


class AbortCriterionSerializer(serializers.Serializer[Any]):
    """Abort once at least ``min_finished`` targets have ended and more than
    ``threshold_pct`` percent of them ended with ``outcome`` (``any``: any end but applied)."""

    outcome = serializers.ChoiceField(choices=AbortOutcome.choices)
    min_finished = Int(min_value=1, max_value=ID_MAX)
    threshold_pct = StrictFloatField(help_text="above 0, at most 100")


def _ids(most: int, **kwargs: Any) -> serializers.ListField:
    return serializers.ListField(child=Int(min_value=1), max_length=most, **kwargs)


class RolloutCreateRequestSerializer(serializers.Serializer[Any]):
    """What ``POST /rollouts/`` takes; its keys are ``RolloutSpec``'s. The organisation is
    the farms' (they must all be one organisation's)."""

    name = StrictCharField(max_length=120)
    farm_ids = _ids(FARMS_MAX, allow_empty=False, help_text="the farms to roll out to")
    profile_id = Int(min_value=1, help_text="the device profile the targets are of")
    endpoint_key = StrictCharField(max_length=64, help_text="the profile's writable endpoint")
    value = EndpointValueField(help_text="the value to set, of the endpoint's data type")
    reason = StrictCharField(max_length=400)
    device_ids = _ids(
        DEVICES_MAX, required=False, default=list, help_text="only these devices of the farms"
    )
    mode = serializers.ChoiceField(choices=TargetMode.choices, **_spec_default("mode"))
    priority = Int(min_value=PRIORITY_MIN, max_value=PRIORITY_MAX, **_spec_default("priority"))
    start_local = LocalDateTimeField()
    end_local = LocalDateTimeField()
    end_behaviour = serializers.ChoiceField(
        choices=EndBehaviour.choices, **_spec_default("end_behaviour")
    )
    canary_size = Int(
        required=False,
        allow_null=True,
        help_text=f"1 to {m.CANARY_MAX}; absent or null: the ROLLOUT_CANARY_SIZE setting",
    )
    base_rate_per_minute = StrictFloatField(
        help_text=f"{m.RATE_MIN:g} to {m.RATE_MAX:g}", **_spec_default("base_rate_per_minute")
    )
    increment_factor = StrictFloatField(
        help_text=f"{m.FACTOR_MIN:g} to {m.FACTOR_MAX:g}", **_spec_default("increment_factor")
    )
    ramp_every_applied = Int(
        help_text=f"1 to {m.RAMP_EVERY_MAX}", **_spec_default("ramp_every_applied")
    )
    max_rate_per_minute = StrictFloatField(
        help_text=f"base_rate_per_minute to {m.RATE_MAX:g}", **_spec_default("max_rate_per_minute")
    )
    max_live_per_farm = Int(
        help_text=f"1 to {m.LIVE_PER_FARM_MAX}", **_spec_default("max_live_per_farm")
    )
    abort_criteria: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=AbortCriterionSerializer(),
        max_length=m.ABORT_CRITERIA_MAX,
        required=False,
        default=list,
    )


class RolloutActRequestSerializer(serializers.Serializer[Any]):
    """Why the rollout is paused, resumed or cancelled: kept with the user name in its
    timeline."""

    reason = StrictCharField(max_length=400, allow_blank=False, trim_whitespace=True)


class RolloutSerializer(serializers.ModelSerializer[Rollout]):
    """A rollout: its plan, its state, the driver's position in the plan (``rate_per_minute``,
    ``waves``, ``canary_left``, ``ramping``), the abort criterion that ``tripped`` (null:
    none), and ``counters``, its targets per state (a sent target's state is its command's)."""

    farm_ids: serializers.PrimaryKeyRelatedField[Any] = serializers.PrimaryKeyRelatedField(
        source="farms", many=True, read_only=True
    )
    profile_id = serializers.IntegerField(read_only=True)
    device_ids: serializers.PrimaryKeyRelatedField[Any] = serializers.PrimaryKeyRelatedField(
        source="devices", many=True, read_only=True
    )
    abort_criteria = AbortCriterionSerializer(many=True, read_only=True)
    value = EndpointValueField(read_only=True, help_text="the value set on every target")
    requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    # The API's field keeps its name (an external contract); the model says status.
    state = serializers.ChoiceField(source="status", choices=RolloutStatus.choices, read_only=True)
    counters = serializers.SerializerMethodField(
        help_text=f"targets per state: {', '.join(TARGET_STATES)} (and {PRUNED}, a sent "
        "target whose command was pruned, when there is one)"
    )

    class Meta:
        model = Rollout
        fields = (
            "id",
            "organization",
            "name",
            "state",
            "mode",
            "farm_ids",
            "profile_id",
            "endpoint_key",
            "device_ids",
            "value",
            "priority",
            "start_local",
            "end_local",
            "end_behaviour",
            "canary_size",
            "base_rate_per_minute",
            "increment_factor",
            "ramp_every_applied",
            "max_rate_per_minute",
            "max_live_per_farm",
            "abort_criteria",
            "reason",
            "requested_by",
            "rate_per_minute",
            "waves",
            "canary_left",
            "ramping",
            "tripped",
            "counters",
            "created_at",
            "updated_at",
            "ended_at",
        )
        read_only_fields = fields

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_counters(self, rollout: Rollout) -> dict[str, int]:
        """From the page's one grouped count (``context["counts"]``), else counted alone."""
        counts: dict[int, Counts] = self.context.get("counts", {})
        found = counts.get(rollout.pk) or rollout_count(rollout.pk)
        return found.as_dict()


TARGET_STATE_CHOICES = [(s, s) for s in (*TARGET_STATES, PRUNED)]


class RolloutTargetSerializer(serializers.ModelSerializer[RolloutTarget]):
    """One endpoint of a rollout: ``state`` is its command's once sent (``pruned``: the
    command was since removed by retention), else ``pending`` or ``skipped`` (``reason``)."""

    device_serial = serializers.CharField(read_only=True)
    farm_id = serializers.IntegerField(read_only=True)
    state = serializers.SerializerMethodField()

    class Meta:
        model = RolloutTarget
        fields = (
            "id",
            "endpoint",
            "device_serial",
            "farm_id",
            "state",
            "step",
            "reason",
            "wave",
            "command",
            "updated_at",
        )
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=TARGET_STATE_CHOICES))
    def get_state(self, target: RolloutTarget) -> str:
        if target.step != TargetStep.SENT:
            return target.step
        status: str | None = getattr(target, "command_status", None)
        return status or PRUNED


class RolloutTransitionSerializer(serializers.ModelSerializer[RolloutTransition]):
    """A status move (``from_state`` blank: the creation), who made it (null: the driver) and
    why."""

    # The API's fields keep their names (an external contract); the model says status.
    from_state = serializers.CharField(source="from_status", read_only=True)
    to_state = serializers.CharField(source="to_status", read_only=True)

    actor: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = RolloutTransition
        fields = ("id", "from_state", "to_state", "actor", "reason", "at")
        read_only_fields = fields
