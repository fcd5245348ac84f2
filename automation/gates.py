"""Safety gates of docs/spec.md §3.5 as one pure function, used at evaluation (what is known then)
and re-checked at dispatch (everything, including freshness)."""

from __future__ import annotations

from datetime import datetime, timedelta

from automation.models import AutomationRule
from automation.states import ReasonCode
from devices.models import DeviceInstanceEndpoint, DeviceStatus
from devices.values import value_violation


def target_failure(
    target: DeviceInstanceEndpoint, *, farm_id: int, value: object
) -> ReasonCode | None:
    """The configuration gates a rule's target must pass whatever the device's state: on the
    rule's farm, enabled, writable, ``value`` within its constraints. A rule is refused on
    these (``automation.services.rules``), and every command re-checks them."""
    profile_endpoint = target.profile_endpoint
    if not target.is_enabled:
        return ReasonCode.TARGET_DISABLED
    if not profile_endpoint.writable:
        return ReasonCode.TARGET_NOT_WRITABLE
    if target.device.farm_id != farm_id:
        return ReasonCode.TARGET_OTHER_FARM
    violation = value_violation(profile_endpoint, value)
    return None if violation is None else ReasonCode(violation)


def command_gate_failure(
    rule: AutomationRule | None,
    target: DeviceInstanceEndpoint,
    *,
    value: object = None,
    now: datetime | None = None,
    freshness_s: float | None = None,
) -> ReasonCode | None:
    """The first gate that forbids sending ``value`` (default: the rule's target value) to
    ``target``, or None. A manual command (``rule`` None) passes every gate but the rule's
    own: its value is given and its farm is the endpoint's.

    Every failure but ``target_offline`` is a configuration reason: never retried.
    ``now``/``freshness_s`` enable the online check, which only dispatch can make.
    """
    device = target.device
    if rule is not None and (not rule.is_active or rule.farm.archived_at is not None):
        return ReasonCode.RULE_INACTIVE  # an archived farm's rules are off
    if value is None and rule is not None:
        value = rule.target_value
    farm_id = device.farm_id if rule is None else rule.farm_id
    failure = target_failure(target, farm_id=farm_id, value=value)
    if failure is not None:
        return failure
    if device.status == DeviceStatus.RETIRED:
        return ReasonCode.TARGET_RETIRED
    if device.status == DeviceStatus.MAINTENANCE:
        return ReasonCode.TARGET_MAINTENANCE
    if not target.rpc_method or not target.rpc_param_key:
        return ReasonCode.BINDING_INVALID
    if (
        now is not None
        and freshness_s is not None
        and (
            device.last_seen_at is None
            or device.last_seen_at < now - timedelta(seconds=freshness_s)
        )
    ):
        return ReasonCode.TARGET_OFFLINE
    return None
