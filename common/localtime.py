"""Local wall-clock time → UTC instant in a farm's zone, with the rule that applied recorded
(docs/spec.md §5): a nonexistent local time (a DST gap, a skipped day) moves forward by the gap; an
ambiguous one (a DST fold) takes the first occurrence. Pure functions; no database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.db import models


class LocalTimeRule(models.TextChoices):
    """How a local time became an instant (recorded on every date-based occurrence)."""

    EXACT = "exact"
    GAP_SHIFTED_FORWARD = "gap_shifted_forward"
    FOLD_FIRST_OCCURRENCE = "fold_first_occurrence"


@dataclass(frozen=True)
class LocalInstant:
    """The UTC instant a local (date, time) means, and which rule produced it."""

    utc: datetime
    rule: LocalTimeRule


def local_to_utc(local_date: date, local_time: time, time_zone: str) -> LocalInstant:
    """PEP 495: ``fold=0`` takes the offset in force *before* a transition, which is the first
    occurrence in a fold and, in a gap, the instant the clock would show had it not jumped
    (so the wall time moves forward by exactly the gap: 02:30 → 03:30 in Berlin, a whole day
    in Apia on 2011-12-30)."""
    zone = ZoneInfo(time_zone)
    naive = datetime.combine(local_date, local_time.replace(tzinfo=None))
    first = naive.replace(tzinfo=zone, fold=0)
    second = naive.replace(tzinfo=zone, fold=1)
    utc = first.astimezone(UTC)
    if first.utcoffset() == second.utcoffset():
        return LocalInstant(utc, LocalTimeRule.EXACT)
    if utc.astimezone(zone).replace(tzinfo=None) == naive:
        return LocalInstant(utc, LocalTimeRule.FOLD_FIRST_OCCURRENCE)
    return LocalInstant(utc, LocalTimeRule.GAP_SHIFTED_FORWARD)


def local_today(now: datetime, time_zone: str) -> date:
    """The farm's calendar date at ``now``."""
    return now.astimezone(ZoneInfo(time_zone)).date()


def local_day_start(local_date: date, time_zone: str) -> datetime:
    """The first instant of a local day (midnight, or the end of a gap that swallowed it)."""
    return local_to_utc(local_date, time(0, 0), time_zone).utc


def date_minus_days(target: date, days: int) -> date:
    """Calendar arithmetic (never 24-hour steps): the same wall date ``days`` earlier."""
    return target - timedelta(days=days)
