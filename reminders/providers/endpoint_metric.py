"""The ``endpoint_metric`` source: a metric over one endpoint's recent values (latest, or
max/min/avg over a window), e.g. silo level ≥ 90 % or battery ≤ 20 %. ThresholdCondition
reminders: true → ensure the occurrence the firing policy wants; false → deactivate."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet

from common.localtime import local_today
from reminders.models import (
    EndpointMetricSource,
    ReminderOccurrence,
    ReminderSetting,
    ReminderTrigger,
    SourceType,
    ThresholdOperator,
)
from reminders.providers.base import (
    Candidate,
    SourceRows,
    SourceState,
    WindowScan,
    reminder_providers_register,
)
from reminders.selectors import endpoint_metric_read, occurrence_completed_exists
from reminders.services.thresholds import (
    ThresholdDecision,
    threshold_base,
    threshold_evaluate,
    threshold_value,
)
from scheduler.keys import FiringPolicy, reminder_threshold_key
from scheduler.models import TriggerType
from scheduler.states import SchedulerReason

TRIGGER_KEY = "metric"
OPERATOR_SYMBOLS = {
    ThresholdOperator.GTE: "≥",
    ThresholdOperator.GT: ">",
    ThresholdOperator.LTE: "≤",
    ThresholdOperator.LT: "<",
}


class MetricProvider(SourceRows[EndpointMetricSource]):
    """At most one candidate: the occurrence the firing policy wants while the metric
    holds. OncePerSource also stays quiet once the source fired under an earlier threshold."""

    source_type = SourceType.ENDPOINT_METRIC
    trigger_type = ReminderTrigger.THRESHOLD_CONDITION
    source_model = EndpointMetricSource

    def load(self, guid: uuid.UUID, *, now: datetime) -> SourceState | None:
        source = (
            EndpointMetricSource.objects.select_related(
                "farm", "endpoint__device", "endpoint__profile_endpoint"
            )
            .filter(guid=guid)
            .first()
        )
        if source is None:
            return None
        value = endpoint_metric_read(
            endpoint=source.endpoint,
            aggregate=source.aggregate,
            window_minutes=source.window_minutes,
            now=now,
        )
        device = source.endpoint.device
        facts = {
            "metric_key": source.metric_key,
            "aggregate": source.aggregate,
            "window_minutes": source.window_minutes,
            "device_serial": device.serial_number,
            "endpoint_key": source.endpoint.profile_endpoint.key,
        }
        active = source.active and device.farm_id == source.farm_id
        return self.state(source, active=active, metric_value=value, facts=facts)

    def setting_applies(self, setting: ReminderSetting, source: SourceState) -> bool:
        return (
            setting.trigger_type == ReminderTrigger.THRESHOLD_CONDITION
            and setting.threshold_metric == source.facts["metric_key"]
        )

    def setting_selects(self, setting: ReminderSetting) -> Q:
        return Q(metric_key=setting.threshold_metric)

    def context(
        self, *, setting: ReminderSetting, source: SourceState, candidate: Candidate
    ) -> dict[str, Any]:
        return {
            "farm_name": source.farm_name,
            "metric_key": source.facts["metric_key"],
            "metric_value": source.metric_value,
            "aggregate": source.facts["aggregate"],
            "window_minutes": source.facts["window_minutes"],
            "operator": OPERATOR_SYMBOLS[ThresholdOperator(setting.threshold_operator)],
            "threshold_value": str(threshold_value(setting).normalize()),
            "firing_policy": setting.firing_policy,
            "device_serial": source.facts["device_serial"],
            "endpoint_key": source.facts["endpoint_key"],
        }

    def candidates(
        self, *, setting: ReminderSetting, source: SourceState, now: datetime
    ) -> list[Candidate]:
        decision = threshold_evaluate(setting=setting, source=source, now=now, record=True)
        return _candidates(setting, source, decision)

    def expected(
        self, *, setting: ReminderSetting, source: SourceState, now: datetime
    ) -> list[Candidate]:
        decision = threshold_evaluate(setting=setting, source=source, now=now, record=False)
        return _candidates(setting, source, decision)

    def stale_reason(
        self, occurrence: ReminderOccurrence, setting: ReminderSetting, source: SourceState | None
    ) -> SchedulerReason:
        if source is None or not source.active:
            return SchedulerReason.SOURCE_NO_LONGER_VALID
        if not setting.active:
            return SchedulerReason.REMINDER_SETTING_INACTIVE
        if not occurrence.threshold_key.startswith(f"{threshold_base(setting)}:"):
            return SchedulerReason.SETTING_CHANGED
        return SchedulerReason.SOURCE_NO_LONGER_VALID  # the metric is false again

    def window_rows(self, scan: WindowScan) -> QuerySet[EndpointMetricSource]:
        """Threshold rows are due the day they are wanted, so the window is today: sources
        whose endpoint reported since the last pass (less the longest metric window, so
        values ageing out of a window are seen too). The endpoint's newest reported time
        says it: a reading before the source existed has no endpoint event."""
        reach = scan.since - timedelta(minutes=settings.REMINDERS_METRIC_MAX_WINDOW_MINUTES)
        return EndpointMetricSource.objects.filter(endpoint__last_value_at__gt=reach)


def _candidates(
    setting: ReminderSetting, source: SourceState, decision: ThresholdDecision
) -> list[Candidate]:
    if not decision.condition or decision.scheduled_on is None:
        return []
    key = reminder_threshold_key(
        setting_guid=setting.guid,
        source_type=source.source_type,
        source_guid=source.guid,
        trigger_key=TRIGGER_KEY,
        threshold_key=decision.threshold_key,
    )
    candidate = Candidate(
        key=key,
        trigger_type=TriggerType.THRESHOLD_CONDITION,
        scheduled_on=decision.scheduled_on,
        scheduled_local_date=local_today(decision.scheduled_on, source.time_zone),
        time_zone_id=source.time_zone,
        input={
            "setting": setting.guid,
            "sourceType": source.source_type,
            "source": source.guid,
            "trigger": TRIGGER_KEY,
            "thresholdKey": decision.threshold_key,
        },
        threshold_key=decision.threshold_key,
    )
    if decision.policy == FiringPolicy.ONCE_PER_SOURCE:
        fired = occurrence_completed_exists(
            setting=setting, source_guid=source.guid, threshold_marker=":OncePerSource:"
        )
        if fired is not None and fired != candidate.key_text:
            return []
    return [candidate]


reminder_providers_register(MetricProvider())
