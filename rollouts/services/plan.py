"""Creating a rollout: every field checked against its documented bounds and the fleet
before anything is written, then the rollout, its selector and its targets in one
transaction, so a refused request leaves nothing behind (docs/rollouts.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from automation.models.rules import PRIORITY_MAX, PRIORITY_MIN
from automation.services.manual import Actor
from common.json_types import JsonValue
from common.ledger import ledger_created
from common.localtime import local_to_utc
from common.models import Organization
from devices.models import Device, DeviceProfile, DeviceProfileEndpoint, Farm
from devices.values import value_has_type
from rollouts import models as m
from rollouts.models import Rollout
from rollouts.services.moves import ROLLOUTS, rollout_step
from rollouts.services.selection import (
    Selector,
    endpoints_in_other_rollouts,
    selector_endpoints,
    targets_insert,
)
from rollouts.states import AbortOutcome, EndBehaviour, RolloutStatus, TargetMode


class RolloutInvalid(ValueError):
    """Field → messages, as the API answers them (a 400 naming each field)."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))


@dataclass
class RolloutSpec:
    """What a caller asks for; defaults are the documented ones."""

    name: str
    farm_ids: Sequence[int]
    profile_id: int
    endpoint_key: str
    value: JsonValue
    reason: str
    device_ids: Sequence[int] = ()
    mode: str = TargetMode.SNAPSHOT
    priority: int = 0
    start_local: str = ""
    end_local: str = ""
    end_behaviour: str = EndBehaviour.STOP
    canary_size: int | None = None  # settings.ROLLOUTS.canary_size
    base_rate_per_minute: float = 10.0
    increment_factor: float = 2.0
    ramp_every_applied: int = 10
    max_rate_per_minute: float = 100.0
    max_live_per_farm: int = 10
    abort_criteria: list[dict[str, JsonValue]] = field(default_factory=list)


def _bounds(spec: RolloutSpec, canary: int) -> dict[str, str]:
    checks = {
        "canary_size": (canary, 1, m.CANARY_MAX),
        "base_rate_per_minute": (spec.base_rate_per_minute, m.RATE_MIN, m.RATE_MAX),
        "increment_factor": (spec.increment_factor, m.FACTOR_MIN, m.FACTOR_MAX),
        "ramp_every_applied": (spec.ramp_every_applied, 1, m.RAMP_EVERY_MAX),
        "max_rate_per_minute": (spec.max_rate_per_minute, m.RATE_MIN, m.RATE_MAX),
        "max_live_per_farm": (spec.max_live_per_farm, 1, m.LIVE_PER_FARM_MAX),
        "priority": (spec.priority, PRIORITY_MIN, PRIORITY_MAX),
    }
    errors = {
        name: f"must be between {low:g} and {high:g}"
        for name, (value, low, high) in checks.items()
        if not low <= value <= high
    }
    if "max_rate_per_minute" not in errors and spec.max_rate_per_minute < spec.base_rate_per_minute:
        errors["max_rate_per_minute"] = "must be at least base_rate_per_minute"
    return errors


def abort_criteria_errors(criteria: object) -> str | None:
    """None when ``criteria`` is a valid list of {outcome, min_finished, threshold_pct}."""
    if not isinstance(criteria, list) or len(criteria) > m.ABORT_CRITERIA_MAX:
        return f"must be a list of at most {m.ABORT_CRITERIA_MAX} criteria"
    for i, c in enumerate(criteria):
        if not isinstance(c, dict) or set(c) != {"outcome", "min_finished", "threshold_pct"}:
            return f"[{i}] must have exactly outcome, min_finished and threshold_pct"
        if c["outcome"] not in AbortOutcome.values:
            return f"[{i}].outcome must be one of {', '.join(AbortOutcome.values)}"
        finished, pct = c["min_finished"], c["threshold_pct"]
        if not isinstance(finished, int) or isinstance(finished, bool) or finished < 1:
            return f"[{i}].min_finished must be an integer of at least 1"
        if not isinstance(pct, int | float) or isinstance(pct, bool) or not 0 < pct <= 100:
            return f"[{i}].threshold_pct must be above 0 and at most 100"
    return None


def _local(text: str) -> datetime | None:
    """A wall-clock time without a zone, or None; ValueError for anything else."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is not None:
        raise ValueError("must be a local time without a zone (each farm reads it in its own)")
    return moment


def local_instant(text: str, time_zone: str) -> datetime | None:
    """The UTC instant wall-clock ``text`` means in ``time_zone`` (None for no time)."""
    return local_instant_of(text, time_zone) if text else None


def local_instant_of(text: str, time_zone: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return local_to_utc(moment.date(), moment.time(), time_zone).utc


def _window_errors(spec: RolloutSpec, farms: Sequence[Farm], now: datetime) -> dict[str, str]:
    errors: dict[str, str] = {}
    parsed: dict[str, datetime | None] = {}
    for name in ("start_local", "end_local"):
        text = getattr(spec, name)
        try:
            parsed[name] = _local(text) if text else None
        except ValueError as exc:
            errors[name] = str(exc) if "zone" in str(exc) else "must be YYYY-MM-DDTHH:MM[:SS]"
    if errors:
        return errors
    start, end = parsed["start_local"], parsed["end_local"]
    if start is not None and end is not None and end <= start:
        errors["end_local"] = "must be after start_local"
    grace = timedelta(seconds=settings.ROLLOUTS.start_grace_s)
    for farm in farms:
        if start is not None and local_instant_of(spec.start_local, farm.time_zone) < now - grace:
            errors["start_local"] = f"is in the past for farm {farm.pk} ({farm.time_zone})"
        if end is not None and local_instant_of(spec.end_local, farm.time_zone) <= now:
            errors["end_local"] = f"is in the past for farm {farm.pk} ({farm.time_zone})"
    return errors


def _selector_errors(
    spec: RolloutSpec, organization: Organization
) -> tuple[dict[str, str], list[Farm]]:
    errors: dict[str, str] = {}
    farms = list(
        Farm.objects.filter(
            organization=organization, pk__in=list(spec.farm_ids), archived_at__isnull=True
        )
    )
    if not spec.farm_ids:
        errors["farm_ids"] = "must name at least one farm"
    elif len(farms) != len(set(spec.farm_ids)):
        errors["farm_ids"] = "names a farm that is not this organisation's or is archived"
    visible = Q(organization=organization) | Q(organization__isnull=True)
    if not DeviceProfile.objects.filter(visible, pk=spec.profile_id).exists():
        errors["profile_id"] = "is not a profile of this organisation"
        return errors, farms
    endpoint = DeviceProfileEndpoint.objects.filter(
        profile_id=spec.profile_id, key=spec.endpoint_key
    ).first()
    if endpoint is None:
        errors["endpoint_key"] = f"the profile has no endpoint {spec.endpoint_key!r}"
    elif not endpoint.writable:
        errors["endpoint_key"] = f"endpoint {spec.endpoint_key!r} is not writable"
    elif not value_has_type(endpoint.data_type, spec.value):
        errors["value"] = f"is not a {endpoint.data_type}, the endpoint's type"
    if spec.device_ids:
        if spec.mode == TargetMode.CONTINUOUS:
            errors["device_ids"] = "a continuous rollout selects by farm and profile, not devices"
        found = Device.objects.filter(
            pk__in=list(spec.device_ids), farm__in=farms, profile_id=spec.profile_id
        ).count()
        if found != len(set(spec.device_ids)):
            errors["device_ids"] = "names a device outside the farms or of another profile"
    return errors, farms


def rollout_create(
    *, organization: Organization, actor: Actor, spec: RolloutSpec, now: datetime | None = None
) -> Rollout:
    """Check everything, then write the rollout and its targets at once. Raises
    ``RolloutInvalid`` naming every field that is wrong; nothing is written then."""
    now = now or timezone.now()
    canary = spec.canary_size if spec.canary_size is not None else settings.ROLLOUTS.canary_size
    errors = _bounds(spec, canary)
    for name, text in (("name", spec.name), ("reason", spec.reason)):
        if not text.strip():
            errors[name] = "may not be blank"
    if spec.mode not in TargetMode.values:
        errors["mode"] = f"must be one of {', '.join(TargetMode.values)}"
    if spec.end_behaviour not in EndBehaviour.values:
        errors["end_behaviour"] = f"must be one of {', '.join(EndBehaviour.values)}"
    criteria_error = abort_criteria_errors(spec.abort_criteria)
    if criteria_error:
        errors["abort_criteria"] = criteria_error
    selector_errors, farms = _selector_errors(spec, organization)
    errors |= selector_errors
    errors |= _window_errors(spec, farms, now)
    selector = Selector([f.pk for f in farms], spec.profile_id, spec.endpoint_key, spec.device_ids)
    endpoints = list(selector_endpoints(selector)) if not errors else []
    if not errors and not endpoints:
        errors["farm_ids"] = "the selector matches no device endpoint"
    if not errors:
        taken = endpoints_in_other_rollouts([e.pk for e in endpoints], but=None)
        if taken:
            others = ", ".join(f"#{pk}" for pk in sorted(set(taken.values())))
            errors["endpoint_key"] = (
                f"{len(taken)} of these endpoints are already targeted by rollout {others}, "
                "still live: cancel it first or leave them out (device_ids)"
            )
    if errors:
        raise RolloutInvalid({k: [v] for k, v in errors.items()})
    user_id = actor.pk if actor.is_authenticated else None
    status = RolloutStatus.SCHEDULED if spec.start_local else RolloutStatus.RUNNING
    with transaction.atomic():
        rollout = Rollout.objects.create(
            organization=organization,
            name=spec.name.strip()[:120],
            status=status,
            mode=spec.mode,
            profile_id=spec.profile_id,
            endpoint_key=spec.endpoint_key,
            value=spec.value,
            priority=spec.priority,
            start_local=spec.start_local,
            end_local=spec.end_local,
            end_behaviour=spec.end_behaviour,
            canary_size=canary,
            base_rate_per_minute=spec.base_rate_per_minute,
            increment_factor=spec.increment_factor,
            ramp_every_applied=spec.ramp_every_applied,
            max_rate_per_minute=spec.max_rate_per_minute,
            max_live_per_farm=spec.max_live_per_farm,
            abort_criteria=spec.abort_criteria,
            reason=spec.reason.strip()[:400],
            requested_by_id=user_id,
            canary_left=canary,
            rate_per_minute=spec.base_rate_per_minute,
            ramp_next_applied=spec.ramp_every_applied,
            targets_through_endpoint=max(e.pk for e in endpoints),
            created_at=now,
            updated_at=now,
        )
        rollout.farms.set(farms)
        if spec.device_ids:
            rollout.devices.set(list(spec.device_ids))
        targets_insert(rollout, endpoints, now)
        reason = f"created: {len(endpoints)} targets; {rollout.reason}"
        ledger_created(
            ROLLOUTS, [(rollout.pk, rollout_step(status, reason=reason, actor_id=user_id))], now=now
        )
    return rollout
