"""The bounds on what callers may write, in one place: how deep and how large a JSON value may
be, which dates and time zones exist, that a local time carries no offset. The serializers, the
model fields (so the admin), the services and the device-message parsers all check through
these, so a value outside a bound is refused with a message naming it, before it reaches the
encoder or the arithmetic that would fail on it (``RecursionError``, ``OverflowError``,
``ZoneInfoNotFoundError``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, time
from functools import cache
from zoneinfo import available_timezones

from django.core.exceptions import ValidationError

# Arrays and objects inside one another. Device payloads and rule values use two or three;
# the bound keeps every recursive encoder and walker far from Python's recursion limit.
JSON_MAX_DEPTH = 16
# The compact UTF-8 encoding of one JSON value: as large as a whole device message may be.
JSON_MAX_BYTES = 64 * 1024
ID_MAX = 2**63 - 1  # the largest value a (big) integer column or primary key can hold
# Dates a caller may give (a report period, a document's expiry). Far enough from the
# calendar's ends (years 1 and 9999) that period, offset and zone arithmetic cannot
# overflow; wide enough for any real farm date.
DATE_MIN = date(1970, 1, 1)
DATE_MAX = date(2999, 12, 31)


@dataclass(frozen=True)
class JsonBoundsViolation:
    code: str  # json_too_deep | json_too_large
    message: str


def _deeper_than(value: object, max_depth: int) -> bool:
    """Walks with an explicit stack, so a value of any depth is measured without recursing."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            continue
        if depth >= max_depth:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def json_bounds_violation(
    value: object, *, max_depth: int = JSON_MAX_DEPTH, max_bytes: int | None = JSON_MAX_BYTES
) -> JsonBoundsViolation | None:
    """None when ``value`` (parsed JSON) nests at most ``max_depth`` arrays/objects and encodes
    to at most ``max_bytes`` (None: the caller bounded the raw bytes already)."""
    if _deeper_than(value, max_depth):
        return JsonBoundsViolation("json_too_deep", f"nested deeper than {max_depth} levels")
    if max_bytes is None:
        return None
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # not JSON at all: the field's own checks say what is wrong
        return None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return JsonBoundsViolation("json_too_large", f"{size} bytes encoded, at most {max_bytes}")
    return None


def validate_json_bounds(value: object) -> None:
    """Model and serializer validator of every JSON field a caller writes."""
    violation = json_bounds_violation(value)
    if violation is not None:
        raise ValidationError(violation.message, code=violation.code)


@cache
def time_zones_known() -> frozenset[str]:
    """The IANA zones this interpreter can load (``zoneinfo``); read once per process."""
    return frozenset(available_timezones())


def validate_time_zone(value: str) -> None:
    """A farm's zone must load everywhere it is used (periods, reminders, renders)."""
    if value not in time_zones_known():
        raise ValidationError(
            "%(value)s is not an IANA time zone (e.g. Europe/Berlin, UTC)",
            code="invalid_time_zone",
            params={"value": str(value)[:64]},
        )


def validate_date_bounds(value: date) -> None:
    if not DATE_MIN <= value <= DATE_MAX:
        raise ValidationError(
            "must lie between %(first)s and %(last)s",
            code="date_out_of_range",
            params={"first": DATE_MIN.isoformat(), "last": DATE_MAX.isoformat()},
        )


LOCAL_TIME_MESSAGE = "is a local time in the farm's zone: give it without a UTC offset (e.g. 09:00)"


def validate_local_time(value: time) -> None:
    """A send time is local to the farm by definition; an offset would be silently dropped."""
    if value.tzinfo is not None:
        raise ValidationError(LOCAL_TIME_MESSAGE, code="time_has_offset")
