"""Report periods in the farm's calendar: a day, a Monday-to-Sunday week or a calendar month.
A period's run is on the day it ends (its exclusive end date) at the subscription's local send
time; both its start and its run are converted with the farm's zone by the DST rules."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from common.localtime import local_day_start, local_to_utc, local_today
from reminders.models import Recurrence


@dataclass(frozen=True)
class ReportPeriod:
    start: date  # local, inclusive
    end: date  # local, exclusive
    start_utc: datetime
    end_utc: datetime
    run_on: datetime  # UTC instant of the run
    run_rule: str

    @property
    def last_day(self) -> date:
        return self.end - timedelta(days=1)


def period_bounds(day: date, recurrence: str) -> tuple[date, date]:
    """The [start, end) local dates of the period containing ``day``."""
    kind = Recurrence(recurrence)
    if kind == Recurrence.DAILY:
        return day, day + timedelta(days=1)
    if kind == Recurrence.WEEKLY:
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    start = day.replace(day=1)
    following = (start + timedelta(days=32)).replace(day=1)
    return start, following


def period_of(day: date, *, recurrence: str, send_time: time, time_zone: str) -> ReportPeriod:
    start, end = period_bounds(day, recurrence)
    run = local_to_utc(end, send_time, time_zone)
    return ReportPeriod(
        start=start,
        end=end,
        start_utc=local_day_start(start, time_zone),
        end_utc=local_day_start(end, time_zone),
        run_on=run.utc,
        run_rule=run.rule,
    )


def period_current(
    now: datetime, *, recurrence: str, send_time: time, time_zone: str
) -> ReportPeriod:
    """The period the farm's calendar is in at ``now``."""
    return period_of(
        local_today(now, time_zone),
        recurrence=recurrence,
        send_time=send_time,
        time_zone=time_zone,
    )


def period_before(
    period: ReportPeriod, *, recurrence: str, send_time: time, time_zone: str
) -> ReportPeriod:
    return period_of(
        period.start - timedelta(days=1),
        recurrence=recurrence,
        send_time=send_time,
        time_zone=time_zone,
    )
