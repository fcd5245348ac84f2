"""ThresholdCondition reminders (docs/spec.md §5): compare a metric with the setting's threshold and
decide which occurrence, if any, the firing policy wants.

``thresholdKey = {metricKey}:{value}:{firingPolicy}:{scopeKey}``; the scope is what makes a
policy fire again (a completed key never sends twice):

| policy           | scopeKey          | fires again                        | never again for    |
|------------------|-------------------|------------------------------------|--------------------|
| OncePerSource    | ``source``        | for a new source                   | the source, even   |
|                  |                   |                                    | after the threshold|
|                  |                   |                                    | value changes      |
| OncePerThreshold | ``threshold``     | when the threshold changes (a new  | the same threshold |
|                  |                   | metric/value/operator identity)    |                    |
| OncePerDay       | ``day-<local>``   | on the next local day it is true   | the same day       |
| FalseToTrue      | ``episode-<n>``   | after the metric was false again   | the same episode   |

The metric key carries the operator (``silo_level.gte``), so flipping ≥ to ≤ is a new
threshold like a new value. A false metric deactivates the pending rows (the event path).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from common.localtime import local_day_start, local_today
from reminders.models import ReminderSetting, ThresholdOperator, ThresholdState
from reminders.providers.base import SourceState
from scheduler.keys import FiringPolicy, threshold_key

_COMPARE = {
    ThresholdOperator.GTE: lambda v, t: v >= t,
    ThresholdOperator.GT: lambda v, t: v > t,
    ThresholdOperator.LTE: lambda v, t: v <= t,
    ThresholdOperator.LT: lambda v, t: v < t,
}


@dataclass(frozen=True)
class ThresholdDecision:
    """The condition now, and (when true) the scope and start of the occurrence it wants."""

    condition: bool
    base: str  # {metricKey}:{value}:{firingPolicy}
    policy: FiringPolicy
    value: float | None
    scope_key: str = ""
    scheduled_on: datetime | None = None

    @property
    def threshold_key(self) -> str:
        return f"{self.base}:{self.scope_key}"


def threshold_metric_key(setting: ReminderSetting) -> str:
    return f"{setting.threshold_metric}.{setting.threshold_operator}"


def threshold_base(setting: ReminderSetting) -> str:
    """The threshold key without its scope: the identity of the threshold itself."""
    full = threshold_key(
        metric_key=threshold_metric_key(setting),
        threshold_value=threshold_value(setting),
        firing_policy=setting.firing_policy,
        scope_key="base",
    )
    return full.rsplit(":", 1)[0]


def threshold_value(setting: ReminderSetting) -> Decimal:
    if setting.threshold_value is None:
        raise ValueError(f"reminder setting {setting.guid} has no threshold value")
    return Decimal(setting.threshold_value)


def threshold_holds(value: float | None, setting: ReminderSetting) -> bool:
    """No data is not a breach: a metric without values is false."""
    if value is None:
        return False
    compare = _COMPARE[ThresholdOperator(setting.threshold_operator)]
    return bool(compare(Decimal(str(value)), threshold_value(setting)))


def threshold_evaluate(
    *, setting: ReminderSetting, source: SourceState, now: datetime, record: bool
) -> ThresholdDecision:
    """Compare the source's metric (loaded at ``now``) with the threshold. ``record`` saves
    the evaluation (the event and reconciliation paths); revalidation only reads."""
    base = threshold_base(setting)
    policy = FiringPolicy(setting.firing_policy)
    condition = threshold_holds(source.metric_value, setting)
    rows = ThresholdState.objects.filter(
        setting=setting, source_guid=source.guid, threshold_base=base
    )
    state = (rows.select_for_update() if record else rows).first()
    was_true = bool(state and state.is_true)
    episode = state.episode if state else 0
    true_since = state.true_since if state and was_true else None
    if condition and (not was_true or true_since is None):
        episode, true_since = episode + 1, now
    if record:
        ThresholdState.objects.update_or_create(
            setting=setting,
            source_guid=source.guid,
            threshold_base=base,
            defaults={
                "is_true": condition,
                "episode": episode,
                "true_since": true_since if condition else None,
                "last_value": source.metric_value,
                "evaluated_at": now,
            },
        )
    if not condition or true_since is None:
        return ThresholdDecision(False, base, policy, source.metric_value)
    scope, start = _scope(policy, episode, true_since, now, source.time_zone)
    return ThresholdDecision(True, base, policy, source.metric_value, scope, start)


def _scope(
    policy: FiringPolicy, episode: int, true_since: datetime, now: datetime, zone: str
) -> tuple[str, datetime]:
    """The scope key and the (stable) instant the occurrence is due: re-evaluating an
    unchanged condition lands on the same row at the same time."""
    if policy == FiringPolicy.ONCE_PER_DAY:
        today = local_today(now, zone)
        return f"day-{today.isoformat()}", max(true_since, local_day_start(today, zone))
    if policy == FiringPolicy.FALSE_TO_TRUE:
        return f"episode-{episode}", true_since
    if policy == FiringPolicy.ONCE_PER_SOURCE:
        return "source", true_since
    return "threshold", true_since
