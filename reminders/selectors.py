"""Reads of reminder settings, occurrences and the scheduler rows they point at."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import Avg, Count, Max, Min, OuterRef, Q, QuerySet, Subquery

from devices.models import DeviceInstanceEndpoint, EndpointDataType
from devices.readings import numeric_readings
from reminders.models import (
    EndpointMetricSource,
    MetricAggregate,
    ReminderOccurrence,
    ReminderSetting,
    UserMessage,
    UserMessageOccurrence,
)
from reminders.providers.base import ReminderProvider, SourceState
from scheduler.models import DueWork
from scheduler.states import SCHEDULER_OPEN, SchedulerStatus


def reminder_settings_for_source(
    source: SourceState, provider: ReminderProvider
) -> list[ReminderSetting]:
    """Active settings that select the source. A farm's own settings replace its
    organisation's for the source type (the organisation's are the default)."""
    rows = ReminderSetting.objects.filter(source_type=source.source_type, active=True).filter(
        Q(farm_id=source.farm_id) | Q(farm__isnull=True, organization_id=source.organization_id)
    )
    applicable = [s for s in rows.order_by("id") if provider.setting_applies(s, source)]
    own = [s for s in applicable if s.farm_id is not None]
    return own or applicable


def reminder_setting_by_guid(guid: uuid.UUID | str) -> ReminderSetting | None:
    return ReminderSetting.objects.filter(guid=guid).first()


def occurrences_of_source(source_type: str, source_guid: uuid.UUID) -> list[ReminderOccurrence]:
    return list(
        ReminderOccurrence.objects.filter(source_type=source_type, source_guid=source_guid)
        .select_related("setting")
        .order_by("id")
    )


def occurrence_sources_open(setting: ReminderSetting) -> list[uuid.UUID]:
    """Sources that still have open rows (Pending, Processing, Failed) of the setting."""
    keys = DueWork.objects.filter(
        scheduler_key__startswith=f"reminder:{setting.guid}:", status__in=SCHEDULER_OPEN
    ).values_list("scheduler_key", flat=True)
    rows = ReminderOccurrence.objects.filter(setting=setting, scheduler_key__in=list(keys))
    return sorted(set(rows.values_list("source_guid", flat=True)), key=str)


def scheduler_statuses(keys: Iterable[str]) -> dict[str, str]:
    """The scheduler status of each key that has a row."""
    wanted = list(keys)
    if not wanted:
        return {}
    rows = DueWork.objects.filter(scheduler_key__in=wanted)
    return dict(rows.values_list("scheduler_key", "status"))


def occurrences_open(occurrences: Iterable[ReminderOccurrence]) -> list[ReminderOccurrence]:
    """Those whose scheduler row may still run (Pending, Processing, Failed)."""
    listed = list(occurrences)
    statuses = scheduler_statuses(o.scheduler_key for o in listed)
    return [o for o in listed if statuses.get(o.scheduler_key) in SCHEDULER_OPEN]


def occurrence_completed_exists(
    *, setting: ReminderSetting, source_guid: uuid.UUID, threshold_marker: str
) -> str | None:
    """The key of a completed threshold occurrence of (setting, source) whose threshold key
    contains ``threshold_marker`` (e.g. ``:OncePerSource:``), if any."""
    keys = ReminderOccurrence.objects.filter(
        setting=setting, source_guid=source_guid, threshold_key__contains=threshold_marker
    ).values_list("scheduler_key", flat=True)
    done = DueWork.objects.filter(scheduler_key__in=list(keys), status=SchedulerStatus.COMPLETED)
    return done.values_list("scheduler_key", flat=True).first()


def endpoint_metric_read(
    *, endpoint: DeviceInstanceEndpoint, aggregate: str, window_minutes: int, now: datetime
) -> float | None:
    """The metric at ``now``: the latest numeric value, or max/min/avg of the numeric values
    in (now − window, now]. Non-numeric values (booleans, enums) are ignored; no values is
    None. Reads the stored telemetry (``devices.readings``) through its (device, message_ts)
    key, bounded by the window: the readings from before the source was made count too.
    ``endpoint`` comes with its ``profile_endpoint``."""
    profile = endpoint.profile_endpoint
    if profile.data_type != EndpointDataType.NUMBER:
        return None
    latest = aggregate == MetricAggregate.LATEST
    # "latest" reads back through what is kept; a window is (start, now].
    start = None if latest else now - timedelta(minutes=window_minutes)
    rows = numeric_readings(
        device_id=endpoint.device_id,
        key=profile.key,
        data_type=profile.data_type,
        start=start,
        end=now + timedelta(microseconds=1),
    )
    if latest:
        newest = rows.order_by("-message_ts", "-pk").values_list("v", flat=True).first()
        return None if newest is None else float(newest)
    found = rows.exclude(message_ts=start).aggregate(
        n=Count("v"), high=Max("v"), low=Min("v"), mean=Avg("v")
    )
    if not found["n"]:
        return None
    if aggregate == MetricAggregate.MAX:
        return float(found["high"])
    if aggregate == MetricAggregate.MIN:
        return float(found["low"])
    return float(found["mean"])


def user_messages_with_next_occurrence(rows: QuerySet[UserMessage]) -> QuerySet[UserMessage]:
    """``next_occurrence`` on each message, computed in the list's own query (a lookup per
    row would make a page of messages cost a query each)."""
    links = UserMessageOccurrence.objects.filter(message_id=OuterRef(OuterRef("pk"))).values(
        "scheduler_id"
    )
    pending = (
        DueWork.objects.filter(pk__in=Subquery(links), status=SchedulerStatus.PENDING)
        .order_by("scheduled_on")
        .values("scheduled_on")[:1]
    )
    return rows.annotate(next_occurrence=Subquery(pending))


def user_message_next_occurrence(*, message_id: int) -> datetime | None:
    """When the message's earliest pending row is due (None: nothing pending)."""
    links = UserMessageOccurrence.objects.filter(message_id=message_id).values("scheduler_id")
    pending = DueWork.objects.filter(pk__in=links, status=SchedulerStatus.PENDING)
    return pending.order_by("scheduled_on").values_list("scheduled_on", flat=True).first()


def metric_endpoints_active() -> frozenset[int]:
    """The endpoints an active threshold reminder's metric reads: ingest keeps their readings
    for evaluation, and the spine hands them on to threshold reminders."""
    rows = EndpointMetricSource.objects.filter(active=True).values_list("endpoint_id", flat=True)
    return frozenset(rows)
