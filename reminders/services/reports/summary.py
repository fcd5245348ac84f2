"""The farm's automation summary for a period: commands by final state, uncertain commands,
devices with the most timeouts, reminders sent, and each endpoint's readings. Built at
execution time from the ledger (never stored on the scheduler row) and handed over as a
rendered body plus a CSV.

Readings (in the body and the CSV) always come from the hourly rollups, never the raw
telemetry: a period is days long, so one grouped read of at most 24 rows per endpoint and
day replaces reading every reading, and a report of a period whose raw telemetry is pruned
says the same as one run the day after. They cover the UTC hours starting in the period (a
zone offset by a half hour shifts the span by that half hour) and miss readings stored in
the last minute or two before the run (``devices.services.rollups``)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Count

from automation.models import DeviceCommand, DeviceCommandReceipt, ReceiptType
from automation.states import CommandStatus
from devices.models import Farm
from devices.selectors import EndpointReadings, farm_readings_summary
from reminders.models import ReminderOccurrence
from reminders.services.reports.periods import ReportPeriod
from scheduler.models import AutomationType, DueWork
from scheduler.states import SchedulerStatus

UNCERTAIN_LISTED = 20
TIMEOUT_DEVICES_LISTED = 5


@dataclass(frozen=True)
class UncertainCommand:
    command_id: int
    device_serial: str
    endpoint_key: str
    created_at: datetime
    reason: str


@dataclass(frozen=True)
class FarmReport:
    farm_id: int
    farm_name: str
    time_zone: str
    period: ReportPeriod
    commands_by_state: list[tuple[str, int]]
    uncertain_total: int
    uncertain: list[UncertainCommand] = field(default_factory=list)
    timeout_devices: list[tuple[str, int]] = field(default_factory=list)
    reminders_sent: int = 0
    readings: list[EndpointReadings] = field(default_factory=list)

    @property
    def commands_total(self) -> int:
        return sum(n for _, n in self.commands_by_state)


def farm_report_build(*, farm_id: int, period: ReportPeriod) -> FarmReport:
    farm = Farm.objects.get(pk=farm_id)
    span = (period.start_utc, period.end_utc)
    commands = DeviceCommand.objects.filter(
        target_device__farm_id=farm_id, created_at__gte=span[0], created_at__lt=span[1]
    )
    counts = dict(commands.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    by_state = [(s, counts.get(s, 0)) for s in CommandStatus.values]
    uncertain = commands.filter(status=CommandStatus.UNCERTAIN)
    listed = uncertain.select_related("target_device_endpoint__profile_endpoint").order_by(
        "created_at", "id"
    )[:UNCERTAIN_LISTED]
    return FarmReport(
        farm_id=farm_id,
        farm_name=farm.name,
        time_zone=farm.time_zone,
        period=period,
        commands_by_state=by_state,
        uncertain_total=uncertain.count(),
        uncertain=[
            UncertainCommand(
                i.pk,
                i.target_serial_number,
                i.target_device_endpoint.profile_endpoint.key,
                i.created_at,
                i.status_reason,
            )
            for i in listed
        ],
        timeout_devices=_timeout_devices(farm_id, span),
        reminders_sent=_reminders_sent(farm_id, span),
        readings=farm_readings_summary(farm_id=farm_id, start=span[0], end=span[1]),
    )


def _timeout_devices(farm_id: int, span: tuple[datetime, datetime]) -> list[tuple[str, int]]:
    rows = (
        DeviceCommandReceipt.objects.filter(
            receipt_type=ReceiptType.TIMEOUT_MARK,
            device__farm_id=farm_id,
            received_at__gte=span[0],
            received_at__lt=span[1],
        )
        .values("serial_number")
        .annotate(n=Count("id"))
        .order_by("-n", "serial_number")
        .values_list("serial_number", "n")
    )
    return list(rows[:TIMEOUT_DEVICES_LISTED])


def _reminders_sent(farm_id: int, span: tuple[datetime, datetime]) -> int:
    """Reminder rows of the farm completed (delivery queued) in the period."""
    keys = ReminderOccurrence.objects.filter(farm_id=farm_id).values("scheduler_key")
    return DueWork.objects.filter(
        automation_type=AutomationType.REMINDER,
        status=SchedulerStatus.COMPLETED,
        completed_on__gte=span[0],
        completed_on__lt=span[1],
        scheduler_key__in=keys,
    ).count()


def farm_report_context(report: FarmReport) -> dict[str, Any]:
    """Every variable of the ``farm_report`` templates (times stay aware: rendered in the
    farm's zone by the notification pipeline)."""
    return {
        "farm_name": report.farm_name,
        "period_start": report.period.start,
        "period_last_day": report.period.last_day,
        "commands_total": report.commands_total,
        "commands_by_state": [{"state": s, "count": n} for s, n in report.commands_by_state],
        "uncertain_total": report.uncertain_total,
        "uncertain_commands": [
            {
                # The key queued notifications store and the templates read: kept.
                "intent_id": u.command_id,
                "device_serial": u.device_serial,
                "endpoint_key": u.endpoint_key,
                "created_at": u.created_at,
                "reason": u.reason,
            }
            for u in report.uncertain
        ],
        "timeout_devices": [{"serial": s, "timeouts": n} for s, n in report.timeout_devices],
        "reminders_sent": report.reminders_sent,
        "readings": [
            {
                "device_serial": r.device_serial,
                "endpoint_key": r.key,
                "data_type": r.data_type,
                "count": r.count,
                "min": r.minimum,
                "avg": r.average,
                "max": r.maximum,
            }
            for r in report.readings
        ],
    }


def farm_report_csv(report: FarmReport) -> str:
    """One ``section,name,value`` table: readable by a spreadsheet, stable for tests."""
    zone = ZoneInfo(report.time_zone)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["section", "name", "value"])
    writer.writerow(["period", "farm", report.farm_name])
    writer.writerow(["period", "first_day", report.period.start.isoformat()])
    writer.writerow(["period", "last_day", report.period.last_day.isoformat()])
    writer.writerow(["period", "time_zone", report.time_zone])
    for state, n in report.commands_by_state:
        writer.writerow(["commands_by_state", state, n])
    writer.writerow(["commands", "total", report.commands_total])
    writer.writerow(["commands", "uncertain", report.uncertain_total])
    for u in report.uncertain:
        local = u.created_at.astimezone(zone).isoformat(timespec="seconds")
        writer.writerow(
            ["uncertain_command", u.command_id, f"{u.device_serial}/{u.endpoint_key} {local}"]
        )
    for serial, n in report.timeout_devices:
        writer.writerow(["timeouts_by_device", serial, n])
    writer.writerow(["reminders", "sent", report.reminders_sent])
    for r in report.readings:
        name = f"{r.device_serial}/{r.key}"
        writer.writerow(["readings_count", name, r.count])
        for stat, value in (("min", r.minimum), ("avg", r.average), ("max", r.maximum)):
            writer.writerow([f"readings_{stat}", name, f"{value:.6g}"])
    return out.getvalue()
