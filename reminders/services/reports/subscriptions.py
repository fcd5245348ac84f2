"""Report subscriptions on the due-work table (docs/spec.md §5: "a thin automation path"): one
ScheduledRun row per period, keyed by the period's start in UTC, and ManualRun rows keyed by
the run GUID the caller generated before asking. Same ensure, same claim, same hand-off."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import date, datetime, time
from typing import NotRequired, TypedDict, Unpack

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common.localtime import local_today
from common.validators import DATE_MAX, DATE_MIN, LOCAL_TIME_MESSAGE, time_zones_known
from notifications.states import Channel
from reminders.models import (
    RecipientsPolicy,
    Recurrence,
    ReportManualRun,
    ReportSubscription,
)
from reminders.services.reports.periods import (
    ReportPeriod,
    period_before,
    period_current,
    period_of,
)
from reminders.services.writes import RowWrites, stamp_updated
from scheduler.keys import (
    ReportScheduledKey,
    parse_scheduler_key,
    report_manual_key,
    report_scheduled_key,
    scheduler_input_hash,
    scheduler_key,
)
from scheduler.models import DueWork, TriggerType
from scheduler.services import (
    EnsureResult,
    scheduler_cancel,
    scheduler_deactivate_by_key,
    scheduler_ensure,
)
from scheduler.states import SCHEDULER_OPEN, SchedulerReason


class ReportSubscriptionChanges(TypedDict, total=False):
    name: str
    recurrence: str
    send_time: time
    recipients_policy: str
    template_name: str
    channels: list[str]
    active: bool


class ReportSubscriptionNew(TypedDict):
    """A new subscription's fields (``channels`` apart: any iterable of channel names)."""

    farm_id: int
    name: str
    recurrence: str
    send_time: time
    recipients_policy: NotRequired[str]  # the farm's managers when not given
    template_name: NotRequired[str]  # ``farm_report`` when not given


class ReportScheduledInput(TypedDict):
    subscription: uuid.UUID
    run: str
    periodStart: datetime


class ReportManualInput(TypedDict):
    subscription: uuid.UUID
    run: uuid.UUID
    periodStart: date
    periodEnd: date


EDITABLE_FIELDS = ReportSubscriptionChanges.__optional_keys__
SCHEDULE_FIELDS = frozenset({"recurrence", "send_time", "active"})


class ReportSubscriptionInvalid(ValueError):
    """A subscription that cannot be scheduled (refused, nothing saved)."""


def _validate(sub: ReportSubscription) -> None:
    Recurrence(sub.recurrence)
    RecipientsPolicy(sub.recipients_policy)
    if not sub.channels or any(c not in Channel.values for c in sub.channels):
        raise ReportSubscriptionInvalid(f"channels must be among {Channel.values}")
    if not sub.template_name.strip():
        raise ReportSubscriptionInvalid("a subscription needs a template")
    if sub.send_time.tzinfo is not None:
        raise ReportSubscriptionInvalid(f"the send time {LOCAL_TIME_MESSAGE}")
    if sub.farm.time_zone not in time_zones_known():
        raise ReportSubscriptionInvalid(
            f"the farm's time zone {sub.farm.time_zone[:64]!r} is not an IANA time zone"
        )


_SUBSCRIPTIONS = RowWrites(
    ReportSubscription, EDITABLE_FIELDS, ReportSubscriptionInvalid, _validate, stamp_updated
)


def report_subscription_create(
    *,
    channels: Iterable[str],
    now: datetime | None = None,
    **fields: Unpack[ReportSubscriptionNew],
) -> ReportSubscription:
    now = now or timezone.now()
    new = {**fields, "channels": list(channels)}
    return _SUBSCRIPTIONS.create(
        new, now=now, then=lambda s: report_subscription_ensure(subscription_id=s.pk, now=now)
    )


def report_subscription_update(
    *,
    subscription_id: int,
    now: datetime | None = None,
    **changes: Unpack[ReportSubscriptionChanges],
) -> list[str]:
    """Recurrence or send time: deactivate the rows of periods no longer wanted first, then
    ensure (a moved send time updates the same key in place). Deactivated: open rows are
    cancelled. Template, channels and recipients: nothing to do, execution reloads them."""
    now = now or timezone.now()

    def then(sub: ReportSubscription, changed: list[str]) -> None:
        if not sub.active:
            report_subscription_cancel_open(subscription=sub, now=now)
        elif SCHEDULE_FIELDS & set(changed):
            report_subscription_ensure(subscription_id=sub.pk, now=now)

    return _SUBSCRIPTIONS.update(subscription_id, changes, now=now, then=then)[1]


def report_period_of(sub: ReportSubscription, *, now: datetime) -> ReportPeriod:
    return period_current(
        now, recurrence=sub.recurrence, send_time=sub.send_time, time_zone=sub.farm.time_zone
    )


def report_scheduled_input(sub: ReportSubscription, period: ReportPeriod) -> ReportScheduledInput:
    """Identity only: recurrence, send time and delivery may change under a pending row."""
    return {"subscription": sub.guid, "run": "scheduled", "periodStart": period.start_utc}


def report_subscription_ensure(*, subscription_id: int, now: datetime) -> list[EnsureResult]:
    """The row of the current period (due when it ends), and of the previous one if the
    subscription already existed when it ended (a beat outage must not lose a period).
    Older rows of periods no longer wanted (the recurrence changed) are deactivated first."""
    sub = ReportSubscription.objects.select_related("farm").get(pk=subscription_id)
    if not sub.active:
        return []
    zone = sub.farm.time_zone
    current = report_period_of(sub, now=now)
    periods = [current]
    previous = period_before(
        current, recurrence=sub.recurrence, send_time=sub.send_time, time_zone=zone
    )
    if previous.end_utc > sub.created_at:
        periods.insert(0, previous)
    wanted = {
        p.start_utc: report_scheduled_key(subscription_guid=sub.guid, period_start_utc=p.start_utc)
        for p in periods
    }
    _deactivate_unwanted(sub, {scheduler_key(k) for k in wanted.values()}, now)
    return [
        scheduler_ensure(
            key=wanted[p.start_utc],
            scheduled_on=p.run_on,
            input_hash=scheduler_input_hash(report_scheduled_input(sub, p)),
            time_zone_id=zone,
            scheduled_local_date=p.end,
            trigger_type=TriggerType.SCHEDULED_RUN,
            farm_id=sub.farm_id,
            now=now,
        )
        for p in periods
    ]


def _open_keys(prefix: str) -> list[tuple[int, str, int, str]]:
    rows = DueWork.objects.filter(scheduler_key__startswith=prefix, status__in=SCHEDULER_OPEN)
    return list(rows.values_list("pk", "status", "version", "scheduler_key"))


def _deactivate_unwanted(sub: ReportSubscription, wanted: set[str], now: datetime) -> None:
    """Open scheduled rows whose period is not one of the subscription's periods any more
    (the recurrence changed). Older periods still pending are wanted: they run late."""
    for _, _, _, key in _open_keys(f"report-subscription:{sub.guid}:scheduled:"):
        spec = parse_scheduler_key(key)
        if key in wanted or not isinstance(spec, ReportScheduledKey):
            continue
        if report_period_starting(sub, spec.period_start_utc) is None:
            scheduler_deactivate_by_key(
                scheduler_key=key, reason=SchedulerReason.SETTING_CHANGED, now=now
            )


def report_period_starting(sub: ReportSubscription, start_stamp: str) -> ReportPeriod | None:
    """The subscription's period that starts at ``start_stamp`` (a key's UTC stamp), or None
    when its recurrence has no period starting there."""
    zone = sub.farm.time_zone
    start_utc = datetime.fromisoformat(start_stamp.replace("Z", "+00:00"))
    period = period_of(
        local_today(start_utc, zone),
        recurrence=sub.recurrence,
        send_time=sub.send_time,
        time_zone=zone,
    )
    return period if period.start_utc == start_utc else None


def report_subscription_cancel_open(*, subscription: ReportSubscription, now: datetime) -> int:
    """A deactivated subscription: its open rows (scheduled and manual) are Cancelled; the
    completed ones stay as history."""
    cancelled = 0
    for pk, status, version, _ in _open_keys(f"report-subscription:{subscription.guid}:"):
        cancelled += scheduler_cancel(
            scheduler_id=pk, token=version, from_status=status, now=now, detail="unsubscribed"
        )
    return cancelled


def report_subscriptions_ensure_due(*, now: datetime, batch: int | None = None) -> int:
    """Beat: ensure every active subscription's current rows, in bounded id-ordered batches."""
    size = batch or settings.REMINDERS_REPORT_BATCH
    after, ensured = 0, 0
    while True:
        ids = list(
            ReportSubscription.objects.filter(active=True, pk__gt=after)
            .order_by("pk")
            .values_list("pk", flat=True)[:size]
        )
        for pk in ids:
            ensured += len(report_subscription_ensure(subscription_id=pk, now=now))
        if len(ids) < size:
            return ensured
        after = ids[-1]


def report_manual_input(run: ReportManualRun) -> ReportManualInput:
    return {
        "subscription": run.subscription.guid,
        "run": run.guid,
        "periodStart": run.period_start,
        "periodEnd": run.period_end,
    }


def report_manual_run_request(
    *,
    subscription_id: int,
    run_guid: uuid.UUID,
    now: datetime | None = None,
    period_start: date | None = None,
) -> EnsureResult:
    """Run the report now. ``run_guid`` is generated by the caller before asking: asking again
    with it (a retry, a double click) lands on the same row. The period defaults to the last
    complete one; ``period_start`` picks the period containing that local date."""
    now = now or timezone.now()
    if period_start is not None and not DATE_MIN <= period_start <= DATE_MAX:
        raise ReportSubscriptionInvalid(f"period_start must lie between {DATE_MIN} and {DATE_MAX}")
    sub = ReportSubscription.objects.select_related("farm").get(pk=subscription_id)
    zone = sub.farm.time_zone
    with transaction.atomic():
        run = _manual_run(sub, run_guid, now, period_start)
        return scheduler_ensure(
            key=report_manual_key(subscription_guid=sub.guid, manual_run_guid=run.guid),
            scheduled_on=run.requested_at,
            input_hash=scheduler_input_hash(report_manual_input(run)),
            time_zone_id=zone,
            scheduled_local_date=local_today(run.requested_at, zone),
            trigger_type=TriggerType.MANUAL_RUN,
            farm_id=sub.farm_id,
            now=now,
        )


def _manual_run(
    sub: ReportSubscription, run_guid: uuid.UUID, now: datetime, period_start: date | None
) -> ReportManualRun:
    """The run as first requested: a repeat keeps its period and request time."""
    run = ReportManualRun.objects.filter(guid=run_guid).select_related("subscription").first()
    if run is not None:
        if run.subscription_id != sub.pk:
            raise ReportSubscriptionInvalid(f"run {run_guid} belongs to another subscription")
        return run
    zone = sub.farm.time_zone
    if period_start is None:
        period = period_before(
            report_period_of(sub, now=now),
            recurrence=sub.recurrence,
            send_time=sub.send_time,
            time_zone=zone,
        )
    else:
        period = period_of(
            period_start, recurrence=sub.recurrence, send_time=sub.send_time, time_zone=zone
        )
    run, _ = ReportManualRun.objects.get_or_create(
        guid=run_guid,
        defaults={
            "subscription": sub,
            "period_start": period.start,
            "period_end": period.end,
            "requested_at": now,
        },
    )
    return run
