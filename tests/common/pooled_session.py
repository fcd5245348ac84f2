"""The paths transaction pooling could break, run in a process of its own whose connection
goes through a transaction-pooling PgBouncer (``tests/common/test_transaction_pooling.py``
starts both). The pooler hands this process's transactions to its server sessions in turn,
so a prepared statement or a cursor that outlives a transaction is missing from the next
one: each check fails here, with PostgreSQL's error, if the settings let one through.

``python -m tests.common.pooled_session CHECK...`` runs the named checks and prints
``ok CHECK`` for each; a failed one exits non-zero with its traceback."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from datetime import timedelta

SESSIONS_WAIT_S = 30.0


def sessions_alternate() -> None:
    """Two transactions in a row run on two server sessions (the pooler's round robin over
    its minimum pool), so what the checks below prove is not luck of the draw."""
    from django.db import connection

    from tests.waiting import wait_for

    def pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    wait_for(lambda: pid() != pid(), "two server sessions in turn", SESSIONS_WAIT_S)


def hot_path() -> None:
    """A crossing on each farm of a small fleet, ingested and evaluated through the
    hand-written hot SQL (``common.hot_sql``), then a hot write rolled back: statements
    the same text runs again and again, as a worker runs them."""
    from django.db import transaction
    from django.utils import timezone

    from automation.services.evaluate import endpoint_events_evaluate
    from automation.services.ingest import telemetry_ingest
    from automation.services.rule_cache import rule_set
    from common.hot_sql import hot_rows, hot_run
    from devices.models import Farm
    from devices.mqtt.messages import InboundTelemetry
    from tests.devices.factories import make_farm

    kits = [make_farm(prefix=f"pool{i}") for i in range(3)]
    for kit in kits:
        kit.rule(threshold_value=30, target_value=True)
    now = timezone.now()
    ts = (now - timedelta(seconds=5)).isoformat()
    for _ in range(2):  # the second round runs every statement's text again
        messages = [
            InboundTelemetry(
                k.sensor.serial_number, json.dumps({"ts": ts, "values": {"temp": 35}}), now
            )
            for k in kits
        ]
        ingested = telemetry_ingest(messages=messages)
        assert ingested.rejections == 0, ingested.rejected
        rule_set()
        evaluated = endpoint_events_evaluate(event_ids=ingested.pending_event_ids)
        assert evaluated.processed == len(ingested.pending_event_ids), evaluated
        ts = (now - timedelta(seconds=4)).isoformat()
    assert len(evaluated.pending_command_ids) <= len(kits)
    farm = kits[0].farm
    try:
        with transaction.atomic():
            for _ in range(6):
                assert hot_run("UPDATE devices_farm SET name = %s WHERE id = %s", ["x", farm.pk])
            raise LookupError
    except LookupError:
        pass
    assert hot_rows("SELECT name FROM devices_farm WHERE id = %s", [farm.pk]) != [("x",)]
    assert Farm.objects.filter(pk=farm.pk).exclude(name="x").exists()


def admin_chart() -> None:
    """A device's admin page with its 24-hour chart, which streams the readings
    (``devices.readings.device_readings``, ``.iterator()``): a server-side cursor would be
    declared in one transaction and fetched in the next."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.utils import timezone

    from tests.devices.factories import make_farm, stored_reading

    setup_test_environment()
    kit = make_farm(prefix="poolchart")
    now = timezone.now()
    for minutes in range(1, 6):
        stored_reading(kit.temp, now - timedelta(minutes=minutes), 20 + minutes)
    user = get_user_model().objects.create_superuser("poolsupport", "p@example.com", "pw")
    client = Client()
    client.force_login(user)
    page = client.get(f"/admin/devices/device/{kit.sensor.pk}/change/?chart=24h")
    assert page.status_code == 200, page.status_code
    (points,) = re.findall(r'data-endpoint="temp" data-points="(\d+)"', page.content.decode())
    assert int(points) > 0, points


CHECKS: dict[str, Callable[[], None]] = {
    "sessions_alternate": sessions_alternate,
    "hot_path": hot_path,
    "admin_chart": admin_chart,
}


def main(names: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    import django

    django.setup()
    for name in names:
        CHECKS[name]()
        print(f"ok {name}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
