"""A message's occurrences, computed from its schedule alone (no database): occurrence ``n``
falls on ``starts_on + n`` days (daily) or weeks (weekly) at the local send time, converted in
the farm's zone by the reminders' DST rule (a time in a gap moves forward by the gap, one in a
fold takes the first occurrence)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from common.localtime import LocalTimeRule, local_to_utc, local_today
from reminders.models import UserMessage, UserMessageRecurrence
from reminders.models.user_messages import USER_MESSAGE_OCCURRENCES_MAX

STEP_DAYS = {UserMessageRecurrence.DAILY: 1, UserMessageRecurrence.WEEKLY: 7}


@dataclass(frozen=True)
class Occurrence:
    sequence: int  # 0 is the first
    local_date: date
    utc: datetime
    rule: LocalTimeRule


@dataclass(frozen=True)
class MessageSchedule:
    recurrence: str
    starts_on: date
    send_time: time
    until: date | None
    count: int | None
    time_zone: str

    @classmethod
    def of(cls, message: UserMessage) -> MessageSchedule:
        return cls(
            recurrence=message.recurrence,
            starts_on=message.starts_on,
            send_time=message.send_time,
            until=message.until,
            count=message.count,
            time_zone=message.farm.time_zone,
        )

    @property
    def step_days(self) -> int:
        return STEP_DAYS.get(UserMessageRecurrence(self.recurrence), 0)

    def total(self) -> int:
        """How many occurrences the bounds allow (at most USER_MESSAGE_OCCURRENCES_MAX)."""
        if not self.step_days:
            return 1
        bounds = [USER_MESSAGE_OCCURRENCES_MAX]
        if self.count is not None:
            bounds.append(self.count)
        if self.until is not None:
            bounds.append(max(0, (self.until - self.starts_on).days // self.step_days + 1))
        return min(bounds)

    def at(self, sequence: int) -> Occurrence | None:
        if not 0 <= sequence < self.total():
            return None
        day = self.starts_on + timedelta(days=sequence * self.step_days)
        instant = local_to_utc(day, self.send_time, self.time_zone)
        return Occurrence(sequence, day, instant.utc, instant.rule)

    def last(self) -> Occurrence | None:
        return self.at(self.total() - 1)

    def between(self, start: datetime, end: datetime) -> list[Occurrence]:
        """Occurrences with ``start <= utc <= end``, in order."""
        if not self.step_days:
            only = self.at(0)
            return [only] if only is not None and start <= only.utc <= end else []
        first_day = local_today(start, self.time_zone) - timedelta(days=1)
        sequence = max(0, (first_day - self.starts_on).days // self.step_days)
        found: list[Occurrence] = []
        while (occurrence := self.at(sequence)) is not None and occurrence.utc <= end:
            if occurrence.utc >= start:
                found.append(occurrence)
            sequence += 1
        return found
