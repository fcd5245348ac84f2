"""A device's endpoint values over a window as a server-rendered inline SVG (no script, no
library): one panel per endpoint, its values in the endpoint's unit, the commands sent to it as
marks coloured by how they ended. Unless asked for one, the window is the smallest of 1 h,
24 h, 7 d and 60 d that holds the data (``chart_window_fitting``), so a fresh farm's first
readings fill the chart rather than a line at its right edge. Readings are downsampled to at
most ``MAX_BUCKETS`` buckets per endpoint, each keeping its lowest and highest value, so a
spike survives and the markup stays bounded; three queries whatever the number of readings.

A window shorter than ``ROLLUPS_FROM`` reads the stored telemetry (``devices.readings``: every
reading, evaluated or not); a longer one reads the hourly rollups (``TelemetryRollup``): its
buckets are an hour or wider, so each hour's lowest and highest reading lose nothing the chart
shows, and rollups outlive the raw readings (pruned after ``RETENTION_TELEMETRY_DAYS``).
Enum endpoints are not rolled up: their panels are empty over a long window."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max, Min, Q
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from automation.models import DeviceCommand
from automation.states import CommandStatus
from devices.display import endpoint_value_text, value_text
from devices.models import (
    Device,
    DeviceInstanceEndpoint,
    EndpointDataType,
    Telemetry,
    TelemetryRollup,
)
from devices.readings import device_readings
from devices.selectors import endpoint_rollups_hourly

WINDOW = timedelta(hours=24)
# The windows a device page offers, smallest first: the first that holds the data is the default.
WINDOWS = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "60d": timedelta(days=60),
}
MAX_BUCKETS = 96  # 15-minute buckets over 24 h: at most 2 points each per series
ROLLUPS_FROM = timedelta(hours=MAX_BUCKETS)  # buckets of an hour or more: hourly rollups
MAX_MARKS = 200
WIDTH, PANEL_H, PAD_L, PAD_R, GAP = 640, 70, 80, 12, 22
AXIS_H = 16  # the time labels under the last panel
LABEL_CHARS = 12  # an enum's value longer than this is cut on the axis (whole in the title)
Y_PAD = 0.1  # of the values' span, above and below, so no line runs on the frame
MARK_COLOURS: dict[str, str] = {
    CommandStatus.APPLIED: "#2e7d32",
    CommandStatus.FAILED: "#c62828",
    CommandStatus.EXPIRED: "#c62828",
    CommandStatus.UNCERTAIN: "#ef6c00",
}
LIVE_COLOUR = "#1565c0"


@dataclass
class Series:
    """One endpoint's readings in the window: (time, y) points, y numeric."""

    endpoint_id: int
    label: str
    data_type: str
    unit: str = ""
    points: list[tuple[datetime, float]] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)  # enum values, by y


@dataclass(frozen=True)
class Mark:
    endpoint_id: int
    at: datetime
    status: str
    title: str


def _y(series: Series, value: Any) -> float | None:
    """A reading as a number on the panel's axis: bool as 0/1, an enum value by its index."""
    if series.data_type == EndpointDataType.BOOL:
        return float(value) if isinstance(value, bool) else None
    if series.data_type == EndpointDataType.NUMBER:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok else None
    if not isinstance(value, str):
        return None
    if value not in series.categories:
        series.categories.append(value)
    return float(series.categories.index(value))


def _bucketed(
    series: Series, rows: list[tuple[datetime, Any]], start: datetime, window: timedelta
) -> None:
    """Keep each bucket's lowest and highest reading, in time order."""
    width = window / MAX_BUCKETS
    buckets: dict[int, list[tuple[datetime, float]]] = {}
    for at, value in rows:
        y = _y(series, value)
        if y is None:
            continue
        kept = buckets.setdefault(int((at - start) / width), [])
        if len(kept) < 2:
            kept.append((at, y))
        else:
            low, high = min(kept, key=lambda p: p[1]), max(kept, key=lambda p: p[1])
            if y < low[1]:
                low = (at, y)
            elif y > high[1]:
                high = (at, y)
            kept[:] = sorted({low, high})
    series.points = [p for key in sorted(buckets) for p in sorted(buckets[key])]


def _readings(
    device_id: int, series: dict[int, Series], start: datetime, now: datetime, window: timedelta
) -> dict[int, list[tuple[datetime, Any]]]:
    """Each endpoint's readings in time order: the stored telemetry's, or for a long window
    each hour's lowest and highest from its rollup (at the middle of the hour, bool as bool)."""
    readings: dict[int, list[tuple[datetime, Any]]] = {pk: [] for pk in series}
    if window >= ROLLUPS_FROM:
        hourly = endpoint_rollups_hourly(endpoint_ids=list(series), start=start, end=now)
        for endpoint_id, hour, low, high in hourly:
            typed = bool if series[endpoint_id].data_type == EndpointDataType.BOOL else float
            at = hour + timedelta(minutes=30)
            readings[endpoint_id] += [(at, typed(low)), (at, typed(high))]
        return readings
    endpoint_of = {one.label: pk for pk, one in series.items()}
    types = {(device_id, one.label): one.data_type for one in series.values()}
    for r in device_readings(device_ids=[device_id], types=types, start=start, end=now):
        readings[endpoint_of[r.key]].append((r.at, r.value))
    return readings


def chart_window_fitting(*, device: Device, now: datetime) -> str:
    """The smallest of ``WINDOWS`` that holds the device's data: 1 h while every reading of
    the last day is under an hour old, else 24 h while there is one; past that 7 d or 60 d,
    to reach the newest reading (the rollups', once the raw readings are pruned). One query,
    two when the raw readings are gone."""
    endpoint_ids = DeviceInstanceEndpoint.objects.filter(device=device).values("pk")
    day_ago = now - WINDOWS["24h"]
    found = Telemetry.objects.filter(
        device=device, message_ts__gte=now - WINDOWS["60d"], message_ts__lte=now
    ).aggregate(
        oldest_today=Min("message_ts", filter=Q(message_ts__gte=day_ago)),
        newest=Max("message_ts"),
    )
    if found["oldest_today"] is not None:
        return "1h" if found["oldest_today"] >= now - WINDOWS["1h"] else "24h"
    newest = found["newest"]
    if newest is None:  # only rollups, if anything: a window long enough to read them
        newest = TelemetryRollup.objects.filter(
            endpoint_id__in=endpoint_ids, hour__gte=now - WINDOWS["60d"], hour__lte=now
        ).aggregate(newest=Max("hour"))["newest"]
        if newest is None:
            return "24h"
    return "7d" if newest >= now - WINDOWS["7d"] else "60d"


def device_chart_data(
    *, device: Device, now: datetime, window: timedelta = WINDOW
) -> tuple[list[Series], list[Mark]]:
    """The device's endpoints with their downsampled readings and the commands sent to them
    in the ``window`` before ``now``: three queries, however many readings."""
    start = now - window
    endpoints = {
        e.pk: e.profile_endpoint
        for e in DeviceInstanceEndpoint.objects.filter(device=device)
        .select_related("profile_endpoint")
        .order_by("profile_endpoint__key")
    }
    series = {
        pk: Series(pk, e.key, e.data_type, e.unit if e.data_type == EndpointDataType.NUMBER else "")
        for pk, e in endpoints.items()
    }
    readings = _readings(device.pk, series, start, now, window)
    for pk, one in series.items():
        _bucketed(one, readings[pk], start, window)
    commands = DeviceCommand.objects.filter(
        target_device=device, created_at__gte=start, created_at__lte=now
    ).order_by("-created_at", "-pk")[:MAX_MARKS]
    marks = [
        Mark(
            endpoint_id=c.target_device_endpoint_id,
            at=c.first_dispatched_at or c.created_at,
            status=c.status,
            title=f"command #{c.pk} → "
            f"{endpoint_value_text(c.target_value, endpoints.get(c.target_device_endpoint_id))} "
            f"({c.status}) {(c.first_dispatched_at or c.created_at):%H:%M:%S}",
        )
        for c in commands
    ]
    return list(series.values()), marks


def _y_range(series: Series) -> tuple[float, float, float, float]:
    """(lowest, highest) of the values, and the axis's range around them: padded, so a
    constant series draws a line across the middle, never one hidden on the frame."""
    ys = [y for _, y in series.points]
    if series.data_type == EndpointDataType.BOOL:
        low, high = 0.0, 1.0
    else:
        low, high = (min(ys), max(ys)) if ys else (0.0, 1.0)
    pad = (high - low) * Y_PAD or max(1.0, abs(high) * Y_PAD)
    return low, high, low - pad, high + pad


def _axis_text(series: Series, value: float) -> str:
    if series.data_type == EndpointDataType.BOOL:
        return value_text(value >= 0.5)
    if series.data_type == EndpointDataType.ENUM:
        index = round(value)
        text = series.categories[index] if 0 <= index < len(series.categories) else ""
        return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
    return value_text(value, unit=series.unit)


def _drawn(points: list[tuple[float, float]], *, step: bool, right: float) -> str:
    """The polyline's points: a state (bool, enum) holds until the next one, up to ``right``
    (now); a number's readings are joined."""
    if step and points:
        held = [points[0]]
        for x, y in points[1:]:
            held += [(x, held[-1][1]), (x, y)]
        points = [*held, (right, held[-1][1])]
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def _panel(
    index: int, series: Series, marks: list[Mark], start: datetime, window: timedelta
) -> SafeString:
    top = index * (PANEL_H + GAP) + GAP
    plot_w = WIDTH - PAD_L - PAD_R

    def x(at: datetime) -> float:
        return PAD_L + max(0.0, min(1.0, (at - start) / window)) * plot_w

    low, high, axis_low, axis_high = _y_range(series)

    def y(value: float) -> float:
        return top + PANEL_H - (value - axis_low) / (axis_high - axis_low) * PANEL_H

    step = series.data_type != EndpointDataType.NUMBER
    points = [(x(at), y(v)) for at, v in series.points]
    levels = [high] if high == low else [high, low]
    labels = format_html_join(
        "",
        '<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>',
        ((PAD_L - 4, f"{y(v) + 3.5:.1f}", _axis_text(series, v)) for v in levels),
    )
    ticks = format_html_join(
        "",
        '<line class="mark" x1="{0}" x2="{0}" y1="{1}" y2="{2}" stroke="{3}" stroke-width="2">'
        "<title>{4}</title></line>",
        (
            (f"{x(m.at):.1f}", top, top + PANEL_H, MARK_COLOURS.get(m.status, LIVE_COLOUR), m.title)
            for m in marks
            if m.endpoint_id == series.endpoint_id
        ),
    )
    if not points:
        body = format_html(
            '<text x="{}" y="{}" font-size="11" fill="#767676" text-anchor="middle">'
            "no readings in this window</text>",
            PAD_L + plot_w / 2,
            top + PANEL_H / 2 + 4,
        )
    elif len(points) == 1 and not step:  # one reading: a dot, a line needs two
        (cx, cy) = points[0]
        body = format_html(
            '<circle class="line" cx="{}" cy="{}" r="2.5" fill="#417690"/>',
            f"{cx:.1f}",
            f"{cy:.1f}",
        )
    else:
        body = format_html(
            '<polyline class="{}" points="{}" fill="none" stroke="#417690" stroke-width="1.5"/>',
            "step" if step else "line",
            _drawn(points, step=step, right=PAD_L + plot_w),
        )
    if points and not step:  # the last reading, dashed up to now: what the endpoint last said
        (last_x, last_y) = points[-1]
        body = format_html(
            '{}<line class="held" x1="{}" x2="{}" y1="{}" y2="{}" stroke="#417690" '
            'stroke-width="1" stroke-dasharray="3 3"/>',
            body,
            f"{last_x:.1f}",
            f"{PAD_L + plot_w:.1f}",
            f"{last_y:.1f}",
            f"{last_y:.1f}",
        )
    return format_html(
        '<g class="series" data-endpoint="{key}" data-points="{n}">'
        '<rect x="{l}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#ccc"/>'
        '<text class="series-label" x="{l}" y="{ly}" font-size="12">{label}</text>'
        "{labels}{body}{ticks}</g>",
        key=series.label,
        n=len(series.points),
        l=PAD_L,
        top=top,
        w=plot_w,
        h=PANEL_H,
        ly=top - 6,
        label=f"{series.label} ({series.unit})" if series.unit else series.label,
        labels=labels,
        body=body,
        ticks=ticks,
    )


def _window_shown(window: timedelta) -> str:
    hours = window / timedelta(hours=1)
    return f"{hours:g} h" if hours <= 48 else f"{hours / 24:g} d"


def chart_svg(
    series: list[Series], marks: list[Mark], *, now: datetime, window: timedelta = WINDOW
) -> SafeString:
    """One panel per series over the ``window`` before ``now``, the time axis at the bottom;
    every label inside the frame (the first time label starts at the plot's left edge, the
    last ends at its right)."""
    if not series:
        return mark_safe("<p>No endpoints.</p>")
    start = now - window
    height = len(series) * (PANEL_H + GAP) + AXIS_H
    panels = format_html_join(
        "", "{}", ((_panel(i, s, marks, start, window),) for i, s in enumerate(series))
    )
    tick = "%H:%M" if window <= timedelta(hours=48) else "%m-%d"
    anchors = ("start", "middle", "middle", "middle", "end")
    axis = format_html_join(
        "",
        '<text class="time" x="{}" y="{}" font-size="10" text-anchor="{}">{}</text>',
        (
            (
                f"{PAD_L + q / 4 * (WIDTH - PAD_L - PAD_R):.1f}",
                height - 4,
                anchors[q],
                f"{start + window * q / 4:{tick}}",
            )
            for q in range(5)
        ),
    )
    return format_html(
        '<svg class="endpoint-chart" xmlns="http://www.w3.org/2000/svg" width="{w}" '
        'height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{title}" data-window="{win}">'
        "<title>{title}</title>{panels}{axis}</svg>",
        w=WIDTH,
        h=height,
        win=_window_shown(window),
        title=f"endpoint values and commands, last {_window_shown(window)} (UTC)",
        panels=panels,
        axis=axis,
    )
