"""The parts of a SchedulerKey (``scheduler.keys``): each component validated and spelled one
way (GUIDs canonical, numbers normalised, times in UTC), so the same occurrence always renders
the same key; and the hash of a row's normalised input."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

_TOKEN = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
_TAIL = re.compile(r"^[A-Za-z0-9_.\-:]{1,200}$")  # last component: may contain ':'
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SchedulerKeyError(ValueError):
    """A key component that would make the key ambiguous or non-deterministic."""


def epoch_ms(moment: datetime) -> int:
    """Milliseconds since the Unix epoch (UTC) of a timezone-aware time."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise SchedulerKeyError("times in scheduler keys must be timezone-aware")
    delta = moment.astimezone(UTC) - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000


def epoch_ms_time(value: int) -> datetime:
    """The inverse of :func:`epoch_ms` (to the millisecond)."""
    return _EPOCH + timedelta(milliseconds=value)


def non_negative_id(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SchedulerKeyError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def utc_stamp_parse(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SchedulerKeyError(f"not a UTC stamp: {text[:40]!r}") from None


def scheduler_input_hash(value: Any) -> str:
    """sha256 of the normalised input (sorted keys, UTC times, canonical GUIDs and numbers)."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default
    )
    return hashlib.sha256(text.encode()).hexdigest()


def utc_stamp(moment: datetime) -> str:
    """``2026-01-31T22:00:00Z`` (microseconds only when present); naive times are refused."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise SchedulerKeyError("times in scheduler keys must be timezone-aware")
    utc = moment.astimezone(UTC)
    micro = f".{utc.microsecond:06d}" if utc.microsecond else ""
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + micro + "Z"


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return utc_stamp(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return number(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"cannot hash {type(value).__name__} in scheduler input")


def token(value: str, name: str) -> str:
    if not isinstance(value, str) or not _TOKEN.match(value):
        raise SchedulerKeyError(f"{name} must match [A-Za-z0-9_.-]{{1,100}}, got {value!r}")
    return value


def tail(value: str, name: str) -> str:
    if not isinstance(value, str) or not _TAIL.match(value):
        raise SchedulerKeyError(f"{name} must match [A-Za-z0-9_.:-]{{1,200}}, got {value!r}")
    return value


def guid(value: uuid.UUID | str, name: str) -> str:
    """Canonical lowercase hyphenated form, however the GUID was spelled."""
    if isinstance(value, uuid.UUID):
        return str(value)
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise SchedulerKeyError(f"{name} must be a GUID, got {value!r}") from None


def ident(value: uuid.UUID | str | int, name: str) -> str:
    """A source's identity: a GUID (canonicalised), a non-negative integer id or a token."""
    if isinstance(value, bool):
        raise SchedulerKeyError(f"{name} must be a GUID, id or token, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise SchedulerKeyError(f"{name} must not be negative")
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    try:
        return str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        return token(value, name)


def number(value: int | float | Decimal | str) -> str:
    if isinstance(value, bool):
        raise SchedulerKeyError("threshold value must be a number")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise SchedulerKeyError(f"threshold value must be a number, got {value!r}") from None
    if not number.is_finite():
        raise SchedulerKeyError("threshold value must be finite")
    text = format(number.normalize(), "f")
    return "0" if text in {"-0", "0"} else text
