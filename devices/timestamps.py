"""How far a device's clock is trusted. A reading stamped years ahead would stay the newest
reading of its endpoint forever (every real one after it loses "latest decision wins"), and
one stamped in year 1 is noise: both are refused where device time enters, telemetry ``ts``
and a state report's ``appliedAt`` alike, with the bounds ``TELEMETRY_MAX_FUTURE_S`` and
``TELEMETRY_MAX_AGE_S`` relative to the server clock."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from devices.models import DeviceMessageRejectionReason


def device_time_violation(ts: datetime, now: datetime) -> DeviceMessageRejectionReason | None:
    """The reason ``ts`` (an aware device time) is not believable at server time ``now``,
    or None when it lies within the configured bounds."""
    if ts - now > timedelta(seconds=settings.TELEMETRY_MAX_FUTURE_S):
        return DeviceMessageRejectionReason.TIMESTAMP_IN_FUTURE
    if now - ts > timedelta(seconds=settings.TELEMETRY_MAX_AGE_S):
        return DeviceMessageRejectionReason.TIMESTAMP_TOO_OLD
    return None


def device_time_detail(field: str, ts: datetime, now: datetime) -> str:
    """The rejection's detail: the field, its value and how far it is from the server clock."""
    ahead_s = (ts - now).total_seconds()
    if ahead_s > 0:
        gap, limit_s = f"{ahead_s:.0f} s ahead of the server clock", settings.TELEMETRY_MAX_FUTURE_S
    else:
        gap, limit_s = f"{-ahead_s:.0f} s old", settings.TELEMETRY_MAX_AGE_S
    return f"{field}={ts.isoformat()} is {gap} (at most {limit_s:g} s)"
