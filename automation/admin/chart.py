"""A device's endpoint values over a window (the last 24 h by default) as a server-rendered
inline SVG (no script, no library): one panel per endpoint, the commands sent to it as marks
coloured by how they ended. Readings are downsampled to at most ``MAX_BUCKETS`` buckets per
endpoint, each keeping its lowest and highest value, so a spike survives and the markup stays
bounded; three queries whatever the number of readings.

A window shorter than ``ROLLUPS_FROM`` reads the endpoint events (``AutomationEndpointEvent``,
the normalised readings); a longer one reads the hourly rollups (``TelemetryRollup``): its
buckets are an hour or wider, so each hour's lowest and highest reading lose nothing the chart
shows, and rollups outlive the raw readings (pruned after ``RETENTION_ENDPOINT_EVENTS_DAYS``).
Enum endpoints are not rolled up: their panels are empty over a long window."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from automation.models import AutomationEndpointEvent, DeviceCommand
from automation.states import CommandStatus
from devices.models import Device, DeviceInstanceEndpoint, EndpointDataType
from devices.selectors import endpoint_rollups_hourly

WINDOW = timedelta(hours=24)
MAX_BUCKETS = 96  # 15-minute buckets over 24 h: at most 2 points each per series
ROLLUPS_FROM = timedelta(hours=MAX_BUCKETS)  # buckets of an hour or more: hourly rollups
MAX_MARKS = 200
WIDTH, PANEL_H, PAD_L, PAD_R, GAP = 640, 70, 110, 10, 18
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
    series: dict[int, Series], start: datetime, now: datetime, window: timedelta
) -> dict[int, list[tuple[datetime, Any]]]:
    """Each endpoint's readings in time order: the raw events, or for a long window each
    hour's lowest and highest from its rollup (at the middle of the hour, bool as bool)."""
    readings: dict[int, list[tuple[datetime, Any]]] = {pk: [] for pk in series}
    if window >= ROLLUPS_FROM:
        hourly = endpoint_rollups_hourly(endpoint_ids=list(series), start=start, end=now)
        for endpoint_id, hour, low, high in hourly:
            typed = bool if series[endpoint_id].data_type == EndpointDataType.BOOL else float
            at = hour + timedelta(minutes=30)
            readings[endpoint_id] += [(at, typed(low)), (at, typed(high))]
        return readings
    events = AutomationEndpointEvent.objects.filter(
        device_instance_endpoint_id__in=list(series),
        event_timestamp__gte=start,
        event_timestamp__lte=now,
    ).order_by("event_timestamp", "pk")
    for endpoint_id, at, value in events.values_list(
        "device_instance_endpoint_id", "event_timestamp", "normalized_value"
    ).iterator(chunk_size=2000):
        readings[endpoint_id].append((at, value))
    return readings


def device_chart_data(
    *, device: Device, now: datetime, window: timedelta = WINDOW
) -> tuple[list[Series], list[Mark]]:
    """The device's endpoints with their downsampled readings and the commands sent to them
    in the ``window`` before ``now``: three queries, however many readings."""
    start = now - window
    endpoints = list(
        DeviceInstanceEndpoint.objects.filter(device=device)
        .select_related("profile_endpoint")
        .order_by("profile_endpoint__key")
    )
    series = {
        e.pk: Series(e.pk, e.profile_endpoint.key, e.profile_endpoint.data_type) for e in endpoints
    }
    readings = _readings(series, start, now, window)
    for pk, one in series.items():
        _bucketed(one, readings[pk], start, window)
    intents = DeviceCommand.objects.filter(
        target_device=device, created_at__gte=start, created_at__lte=now
    ).order_by("-created_at", "-pk")[:MAX_MARKS]
    marks = [
        Mark(
            endpoint_id=i.target_device_endpoint_id,
            at=i.first_dispatched_at or i.created_at,
            status=i.status,
            title=f"command #{i.pk} → {_shown(i.target_value)} ({i.status}) "
            f"{(i.first_dispatched_at or i.created_at):%H:%M:%S}",
        )
        for i in intents
    ]
    return list(series.values()), marks


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _panel(
    index: int, series: Series, marks: list[Mark], start: datetime, window: timedelta
) -> SafeString:
    top = index * (PANEL_H + GAP) + GAP
    plot_w = WIDTH - PAD_L - PAD_R

    def x(at: datetime) -> float:
        return PAD_L + max(0.0, min(1.0, (at - start) / window)) * plot_w

    ys = [y for _, y in series.points]
    low, high = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if series.data_type == EndpointDataType.BOOL:
        low, high = 0.0, 1.0
    span = (high - low) or 1.0

    def y(value: float) -> float:
        return top + PANEL_H - (value - low) / span * PANEL_H

    points = " ".join(f"{x(at):.1f},{y(v):.1f}" for at, v in series.points)
    top_label, bottom_label = _axis_labels(series, low, high)
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
    shape = "step" if series.data_type != EndpointDataType.NUMBER else "line"
    return format_html(
        '<g class="series" data-endpoint="{label}" data-points="{n}">'
        '<rect x="{l}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#ccc"/>'
        '<text x="4" y="{mid}" font-size="12">{label}</text>'
        '<text x="{tx}" y="{ty1}" font-size="10" text-anchor="end">{hi}</text>'
        '<text x="{tx}" y="{ty2}" font-size="10" text-anchor="end">{lo}</text>'
        '<polyline class="{shape}" points="{points}" fill="none" stroke="#417690" '
        'stroke-width="1.5"/>{ticks}</g>',
        label=series.label,
        n=len(series.points),
        l=PAD_L,
        top=top,
        w=plot_w,
        h=PANEL_H,
        mid=top + PANEL_H / 2,
        tx=PAD_L - 4,
        ty1=top + 10,
        ty2=top + PANEL_H,
        hi=top_label,
        lo=bottom_label,
        shape=shape,
        points=points,
        ticks=ticks,
    )


def _axis_labels(series: Series, low: float, high: float) -> tuple[str, str]:
    if series.data_type == EndpointDataType.BOOL:
        return "true", "false"
    if series.data_type == EndpointDataType.ENUM and series.categories:
        return series.categories[int(high)], series.categories[int(low)]
    return f"{high:g}", f"{low:g}"


def _window_shown(window: timedelta) -> str:
    hours = window / timedelta(hours=1)
    return f"{hours:g} h" if hours <= 48 else f"{hours / 24:g} d"


def chart_svg(
    series: list[Series], marks: list[Mark], *, now: datetime, window: timedelta = WINDOW
) -> SafeString:
    """One panel per series over the ``window`` before ``now``, the time axis at the bottom."""
    if not series:
        return mark_safe("<p>No endpoints.</p>")
    start = now - window
    height = len(series) * (PANEL_H + GAP) + GAP + 14
    panels = format_html_join(
        "", "{}", ((_panel(i, s, marks, start, window),) for i, s in enumerate(series))
    )
    tick = "%H:%M" if window <= timedelta(hours=48) else "%m-%d"
    axis = format_html_join(
        "",
        '<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>',
        (
            (
                f"{PAD_L + q / 4 * (WIDTH - PAD_L - PAD_R):.1f}",
                height - 2,
                f"{start + window * q / 4:{tick}}",
            )
            for q in range(5)
        ),
    )
    return format_html(
        '<svg class="endpoint-chart" xmlns="http://www.w3.org/2000/svg" width="{w}" '
        'height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{title}">'
        "<title>{title}</title>{panels}{axis}</svg>",
        w=WIDTH,
        h=height,
        title=f"endpoint values and commands, last {_window_shown(window)} (UTC)",
        panels=panels,
        axis=axis,
    )
