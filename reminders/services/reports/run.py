"""A report row at due time: reload the subscription (and the manual run), rebuild the
period from the key with the same helpers, compare the input hash, then build the farm's
summary and queue it with notifications as a rendered body plus a CSV attachment."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reminders.models import ReportManualRun, ReportSubscription
from reminders.services.delivery import ReportAttachment, delivery_check, notification_hand_off
from reminders.services.reports.periods import ReportPeriod, period_of
from reminders.services.reports.subscriptions import (
    report_manual_input,
    report_period_starting,
    report_scheduled_input,
)
from reminders.services.reports.summary import (
    farm_report_build,
    farm_report_context,
    farm_report_csv,
)
from scheduler.keys import (
    ReportManualKey,
    ReportScheduledKey,
    SchedulerKeyError,
    parse_scheduler_key,
    scheduler_input_hash,
)
from scheduler.registry import (
    BatchResults,
    Deactivate,
    HandlerResult,
    HoldForSupport,
    PermanentFailure,
    ReminderSettingInactive,
    SchedulerJob,
    SourceNoLongerValid,
    scheduler_batch_each,
)
from scheduler.states import SchedulerReason


@dataclass(frozen=True)
class ReportDue:
    subscription: ReportSubscription
    period: ReportPeriod
    kind: str  # "scheduled" or "manual"


def _report_key(job: SchedulerJob) -> ReportScheduledKey | ReportManualKey:
    try:
        spec = parse_scheduler_key(job.scheduler_key)
    except SchedulerKeyError as exc:
        raise PermanentFailure(str(exc)) from None
    if not isinstance(spec, ReportScheduledKey | ReportManualKey):
        raise PermanentFailure(f"not a report key: {job.scheduler_key[:80]}")
    return spec


# By GUID as a key spells it: keys are parsed through the builders, which write every GUID
# in its one canonical form, the form ``str(uuid)`` gives.
Subscriptions = Mapping[str, ReportSubscription]


def report_subscriptions_load(jobs: Sequence[SchedulerJob]) -> Subscriptions:
    """The subscriptions a batch of report rows names, in one read (a key that does not
    parse names none: its row fails on resolving)."""
    guids = set()
    for job in jobs:
        with contextlib.suppress(PermanentFailure):
            guids.add(_report_key(job).subscription_guid)
    rows = ReportSubscription.objects.select_related("farm").filter(guid__in=guids)
    return {str(row.guid): row for row in rows}


def report_due_resolve(
    job: SchedulerJob, *, subscriptions: Subscriptions | None = None
) -> ReportDue:
    """What the row is due for, revalidated; ``subscriptions`` (a batch's, from
    ``report_subscriptions_load``) saves the read of its subscription."""
    spec = _report_key(job)
    if subscriptions is not None:
        sub = subscriptions.get(spec.subscription_guid)
    else:
        sub = (
            ReportSubscription.objects.select_related("farm")
            .filter(guid=spec.subscription_guid)
            .first()
        )
    if sub is None:
        raise SourceNoLongerValid(f"subscription {spec.subscription_guid} is gone")
    if not sub.active:
        raise ReminderSettingInactive(f"subscription {sub.guid} is inactive")
    if isinstance(spec, ReportScheduledKey):
        due = _scheduled(job, sub, spec)
    else:
        due = _manual(job, sub, spec)
    delivery_check(
        template_name=sub.template_name,
        channels=sub.channels,
        recipient_policy=sub.recipients_policy,
    )
    return due


def _scheduled(job: SchedulerJob, sub: ReportSubscription, spec: ReportScheduledKey) -> ReportDue:
    period = report_period_starting(sub, spec.period_start_utc)
    if period is None:
        raise Deactivate(
            "the recurrence no longer has a period starting here",
            reason=SchedulerReason.SETTING_CHANGED,
        )
    if scheduler_input_hash(report_scheduled_input(sub, period)) != job.input_hash:
        raise HoldForSupport("the reloaded scheduled run hashes differently")
    return ReportDue(sub, period, "scheduled")


def _manual(job: SchedulerJob, sub: ReportSubscription, spec: ReportManualKey) -> ReportDue:
    run = (
        ReportManualRun.objects.select_related("subscription")
        .filter(guid=spec.manual_run_guid, subscription=sub)
        .first()
    )
    if run is None:
        raise SourceNoLongerValid(f"manual run {spec.manual_run_guid} is gone")
    if scheduler_input_hash(report_manual_input(run)) != job.input_hash:
        raise HoldForSupport("the reloaded manual run hashes differently")
    zone = sub.farm.time_zone
    period = period_of(
        run.period_start, recurrence=sub.recurrence, send_time=sub.send_time, time_zone=zone
    )
    if (period.start, period.end) != (run.period_start, run.period_end):
        # The recurrence changed since the request: report exactly what was asked for.
        period = _span(run, zone, sub)
    return ReportDue(sub, period, "manual")


def _span(run: ReportManualRun, zone: str, sub: ReportSubscription) -> ReportPeriod:
    first = period_of(run.period_start, recurrence="daily", send_time=sub.send_time, time_zone=zone)
    last = period_of(run.period_end, recurrence="daily", send_time=sub.send_time, time_zone=zone)
    return ReportPeriod(
        start=run.period_start,
        end=run.period_end,
        start_utc=first.start_utc,
        end_utc=last.start_utc,
        run_on=run.requested_at,
        run_rule=first.run_rule,
    )


def report_due_batch(jobs: Sequence[SchedulerJob]) -> BatchResults:
    """A batch of report rows: their subscriptions in one read, then each valid row's
    summary built and queued as ``report_due_run`` does."""
    subscriptions = report_subscriptions_load(jobs)
    return scheduler_batch_each(
        jobs,
        resolve=lambda job: report_due_resolve(job, subscriptions=subscriptions),
        run=lambda job, due: report_due_run(job, due=due),
    )


def report_due_run(job: SchedulerJob, *, due: ReportDue | None = None) -> HandlerResult:
    """Build the summary and queue its notification, keyed by the row's SchedulerKey
    (``due``: the row already resolved)."""
    due = due or report_due_resolve(job)
    sub = due.subscription
    report = farm_report_build(farm_id=sub.farm_id, period=due.period)
    attachment = ReportAttachment(
        filename=f"farm-{sub.farm_id}-report-{due.period.start.isoformat()}.csv",
        content_type="text/csv",
        content=farm_report_csv(report),
    )
    return notification_hand_off(
        source_key=job.scheduler_key,
        farm_id=sub.farm_id,
        recipient_policy=sub.recipients_policy,
        template_name=sub.template_name,
        channels=sub.channels,
        context={**farm_report_context(report), "run_kind": due.kind},
        attachments=[attachment],
        now=job.now,
    )
