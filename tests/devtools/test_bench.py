"""`manage.py bench --quick` on the configured services (SQLite, the embedded MQTT broker and
the in-memory Celery broker by default; PostgreSQL, Redis and Mosquitto in CI): every table
prints its rows, at base and scaled sizes, and the bench leaves no row of its own behind.
Timings are the bench's output, not something a test can assert on a shared machine."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from automation.models import AutomationEndpointEvent, DeviceCommand
from common.models import Organization
from config.env import MqttConfig
from devices.models import Device, Telemetry
from devtools.bench import command_path, ingest, scheduler
from scheduler.models import DueWork

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

INGEST_ROWS = (ingest.BRIDGE, ingest.SERVICE, ingest.BARE_PAHO, ingest.BARE_INSERT)
COMMAND_ROWS = (command_path.TO_RPC, command_path.TO_APPLIED, command_path.BARE_RTT)
SCHEDULER_ROWS = (
    scheduler.BARE_CLAIM_PATH,
    scheduler.CLAIM_PATH,
    scheduler.BARE_FINISH_PATH,
    scheduler.EXECUTE_PATH,
)


def _lines(text: str, start: str, end: str | None = None) -> list[str]:
    """The lines of ``text`` from the one starting with ``start`` up to ``end``."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    last = next(
        (i for i, line in enumerate(lines[first + 1 :], first + 1) if end and line.startswith(end)),
        len(lines),
    )
    return lines[first:last]


def test_quick_bench_prints_every_table_at_both_sizes_and_cleans_up(
    mqtt_config: MqttConfig, on_postgres: bool
) -> None:
    out = io.StringIO()
    call_command("bench", "--quick", "--workers", "1,2", stdout=out)
    text = out.getvalue()

    assert text.startswith("command: manage.py bench --devices 4 --messages 40")
    for size, nxt in (("== base:", "== 2×:"), ("== 2×:", "Growth:")):
        section = "\n".join(_lines(text, size, nxt))
        for row in (*INGEST_ROWS, *COMMAND_ROWS):
            assert f"\n{row} " in section, f"{row!r} missing under {size}"
        assert "commands: applied" in section
        if on_postgres:
            for row in SCHEDULER_ROWS:
                assert f"      1  {row}" in section and f"      2  {row}" in section
    if not on_postgres:
        assert "scheduler skipped: it measures FOR UPDATE SKIP LOCKED" in text

    growth = "\n".join(_lines(text, "Growth: base vs 2×"))
    for row in INGEST_ROWS:
        assert f"ingest: {row} " in growth
    for row in COMMAND_ROWS:
        assert f"command: {row} p50" in growth and f"command: {row} p99" in growth
    assert ("scheduler: " in growth) is on_postgres

    assert not Organization.objects.filter(name__startswith="bench-").exists()
    assert not Device.objects.filter(serial_number__startswith="BENCH-").exists()
    assert not Telemetry.objects.exists()
    assert not AutomationEndpointEvent.objects.exists()
    assert not DeviceCommand.objects.exists()
    assert not DueWork.objects.exists()
