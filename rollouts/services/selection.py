"""Which endpoints a rollout targets and what it does with each at selection: the selector
read as one query, each endpoint's configuration gates checked with the value (the same
function dispatch runs), so a target that cannot take the value is ``skipped``, not failed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from automation.gates import command_gate_failure
from automation.states import ReasonCode
from common.sql import insert_ignore_returning
from devices.models import DeviceInstanceEndpoint
from rollouts.models import Rollout, RolloutTarget
from rollouts.states import ROLLOUT_ENDED, SkipReason, TargetStep

# A gate's refusal at selection, as the target's skip reason.
_SKIPS: dict[ReasonCode, SkipReason] = {
    ReasonCode.VALUE_OUT_OF_RANGE: SkipReason.INVALID_VALUE,
    ReasonCode.VALUE_NOT_ALLOWED: SkipReason.INVALID_VALUE,
    ReasonCode.VALUE_WRONG_TYPE: SkipReason.INVALID_VALUE,
    ReasonCode.TARGET_NOT_WRITABLE: SkipReason.INVALID_VALUE,
    ReasonCode.BINDING_INVALID: SkipReason.INVALID_VALUE,
    ReasonCode.TARGET_DISABLED: SkipReason.TARGET_DISABLED,
    ReasonCode.TARGET_RETIRED: SkipReason.TARGET_RETIRED,
    ReasonCode.TARGET_MAINTENANCE: SkipReason.TARGET_MAINTENANCE,
}


@dataclass(frozen=True)
class Selector:
    farm_ids: Sequence[int]
    profile_id: int
    endpoint_key: str
    device_ids: Sequence[int] = ()


def selector_endpoints(selector: Selector) -> QuerySet[DeviceInstanceEndpoint]:
    endpoints = DeviceInstanceEndpoint.objects.filter(
        device__farm_id__in=list(selector.farm_ids),
        device__profile_id=selector.profile_id,
        profile_endpoint__key=selector.endpoint_key,
    )
    if selector.device_ids:
        endpoints = endpoints.filter(device_id__in=list(selector.device_ids))
    return endpoints.select_related("device", "profile_endpoint").order_by("pk")


def rollout_selector(rollout: Rollout) -> Selector:
    return Selector(
        farm_ids=[f.pk for f in rollout.farms.all()],
        profile_id=rollout.profile_id,
        endpoint_key=rollout.endpoint_key,
        device_ids=[d.pk for d in rollout.devices.all()],
    )


def endpoints_in_other_rollouts(endpoint_ids: Sequence[int], *, but: int | None) -> dict[int, int]:
    """Endpoint → the unended rollout other than ``but`` that already targets it (one query)."""
    rows = RolloutTarget.objects.filter(endpoint_id__in=list(endpoint_ids)).exclude(
        rollout__status__in=ROLLOUT_ENDED
    )
    if but is not None:
        rows = rows.exclude(rollout_id=but)
    return dict(rows.values_list("endpoint_id", "rollout_id"))


def targets_insert(
    rollout: Rollout, endpoints: Sequence[DeviceInstanceEndpoint], now: datetime
) -> int:
    """Add ``endpoints`` as targets (one INSERT; a target already there is absorbed by its
    unique key): pending, or skipped with the gate that refuses the value, or, for a
    continuous rollout's pick-up, the other rollout that already targets the endpoint."""
    if not endpoints:
        return 0
    taken = endpoints_in_other_rollouts([e.pk for e in endpoints], but=rollout.pk)
    rows = []
    for endpoint in endpoints:
        refused = command_gate_failure(None, endpoint, value=rollout.value)
        reason = SkipReason.OTHER_ROLLOUT if endpoint.pk in taken else skip_reason(refused)
        rows.append(
            {
                "rollout": rollout.pk,
                "endpoint": endpoint.pk,
                "step": TargetStep.SKIPPED if reason else TargetStep.PENDING,
                "reason": reason or "",
                "updated_at": now,
            }
        )
    return len(insert_ignore_returning(RolloutTarget, rows))


def skip_reason(refused: ReasonCode | None) -> SkipReason | None:
    """The skip reason of a gate's refusal (None: the gate lets it through, or the refusal
    is one dispatch decides, such as an offline device)."""
    return _SKIPS.get(refused) if refused is not None else None
