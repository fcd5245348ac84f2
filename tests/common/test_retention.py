"""Retention (``common.retention``): every append-only table is pruned past its setting, in
bounded batches of a fixed number of statements, oldest first, and never a row still needed:
a live command, an event not yet processed, a notification not final, or anything a kept row
points to. A command goes with its transitions and receipts; one run frees a whole chain."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation.models import (
    AutomationEndpointEvent,
    AutomationRuleExecution,
    CommandTransition,
    DeviceCommand,
)
from automation.services.commands import command_transition
from automation.services.ingest import telemetry_ingest
from automation.states import COMMAND_LIVE, CommandStatus, ReasonCode
from common.retention import retention_prune, retentions
from devices.models import DeviceMessageRejection, Telemetry
from devices.mqtt.messages import InboundTelemetry
from devices.services.rollups import telemetry_rollups_advance
from events.models import EventInbox
from notifications.models import Notification, NotificationAttempt, NotificationTransition
from tests.automation.conftest import dispatch, make_intent
from tests.conftest import Tenant
from tests.devices.factories import make_farm
from tests.notifications.test_support import _notification

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clock_at_fixture_dates")]
DAY = timedelta(days=1)


def _later(days: int) -> datetime:
    return timezone.now() + days * DAY


def _rolled_up() -> None:
    """The hourly rollups fold every reading in (a raw reading they have not reached stays)."""
    for _ in range(2):  # the first run may only take its horizon
        telemetry_rollups_advance(settle_s=0)


def _ended_command(t: Tenant) -> DeviceCommand:
    intent = dispatch(make_intent(t.kit))
    assert command_transition(intent, CommandStatus.FAILED, ReasonCode.MANUAL)
    return DeviceCommand.objects.get(pk=intent.pk)


def _rejection() -> DeviceMessageRejection:
    return DeviceMessageRejection.objects.create(
        serial_number="x-1",
        kind="telemetry",
        raw_payload="{",
        reason_code="invalid_json",
        received_at=timezone.now(),
    )


def test_every_append_only_table_has_a_retention() -> None:
    labels = {r.label for r in retentions()}
    assert labels == {
        "devices.Telemetry",
        "devices.DeviceMessageRejection",
        "devices.TelemetryRollup",
        "devices.DeviceHealthTransition",
        "automation.AutomationEndpointEvent",
        "automation.AutomationRuleExecution",
        "automation.DeviceCommand",
        "notifications.Notification",
        "events.EventInbox",
        "rollouts.Rollout",
        "alarms.Alarm",
        "audit.AuditEntry",
    }


def test_nothing_live_is_pruned(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    alpha.kit.rule()
    live = dispatch(make_intent(alpha.kit))
    assert live.status in COMMAND_LIVE
    queued = _notification(alpha.kit.farm, "queued", key="q")
    retention_prune(now=_later(400))
    # The live command keeps its execution, event and reading, however old.
    assert DeviceCommand.objects.filter(pk=live.pk).exists()
    assert AutomationRuleExecution.objects.filter(pk=live.rule_execution_id).exists()
    event = AutomationEndpointEvent.objects.get(pk=live.rule_execution.event_id)
    assert Telemetry.objects.filter(pk=event.source_telemetry_id).exists()
    assert Notification.objects.filter(pk=queued.pk).exists()


def test_a_pending_event_and_its_reading_stay(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    alpha.kit.rule()  # reads temp: the reading waits for evaluation

    payload = '{"ts": "2026-11-29T11:59:00Z", "values": {"temp": 20}}'
    ingested = telemetry_ingest(
        messages=[InboundTelemetry(alpha.kit.sensor.serial_number, payload, timezone.now())]
    )
    pending = ingested.pending_event_ids
    assert pending
    retention_prune(now=_later(400))
    assert AutomationEndpointEvent.objects.filter(pk__in=pending).count() == len(pending)
    assert Telemetry.objects.count() == 1


def test_an_ended_command_goes_with_its_transitions_and_frees_its_chain(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, _ = tenants
    alpha.kit.rule()
    ended = _ended_command(alpha)
    assert CommandTransition.objects.filter(command=ended).exists()
    # Past the raw retention only: the command and its execution stay, its event goes (an
    # execution outlives its reading: 180 days against 30), the reading waits for the rollups.
    retention_prune(now=_later(31))
    assert DeviceCommand.objects.filter(pk=ended.pk).exists()
    assert AutomationRuleExecution.objects.filter(pk=ended.rule_execution_id).exists()
    assert not AutomationEndpointEvent.objects.exists()
    assert Telemetry.objects.count() == 1
    # Past every retention: one run frees the whole chain, oldest first.
    _rolled_up()
    result = retention_prune(now=_later(181))
    assert not DeviceCommand.objects.exists()
    assert not CommandTransition.objects.exists()
    assert not AutomationRuleExecution.objects.exists()
    assert not AutomationEndpointEvent.objects.exists()
    assert not Telemetry.objects.exists()
    assert result.deleted["automation.DeviceCommand"] == 1
    assert result.deleted["devices.Telemetry"] == 1


def test_readings_no_rule_used_go_after_the_raw_retention(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants

    payload = '{"ts": "2026-11-29T11:59:00Z", "values": {"temp": 20, "humidity": 50}}'
    ingested = telemetry_ingest(
        messages=[InboundTelemetry(alpha.kit.sensor.serial_number, payload, timezone.now())]
    )
    assert ingested.pending_event_ids == []  # no rule reads them: no event row
    retention_prune(now=_later(29))
    assert Telemetry.objects.count() == 1
    # Not yet folded into the rollups: the reading stays.
    result = retention_prune(now=_later(31))
    assert result.deleted.get("automation.AutomationEndpointEvent", 0) == 0
    assert Telemetry.objects.count() == 1
    _rolled_up()
    result = retention_prune(now=_later(31))
    assert not Telemetry.objects.exists()


def test_notifications_go_with_attempts_only_when_final(tenants: tuple[Tenant, Tenant]) -> None:
    alpha, _ = tenants
    sent = _notification(alpha.kit.farm, "sent", key="s")
    failing = _notification(alpha.kit.farm, "queued", key="f")
    NotificationAttempt.objects.create(
        notification=sent, attempt=1, started_at=timezone.now(), outcome="sent"
    )
    NotificationTransition.objects.create(
        notification=sent, to_status="sent", reason="sent", at=timezone.now()
    )
    retention_prune(now=_later(179))
    assert Notification.objects.count() == 2
    retention_prune(now=_later(181))
    assert list(Notification.objects.values_list("pk", flat=True)) == [failing.pk]
    assert not NotificationAttempt.objects.filter(notification_id=sent.pk).exists()
    assert not NotificationTransition.objects.filter(notification_id=sent.pk).exists()


def test_rejections_and_the_event_inbox_expire(db: None) -> None:
    _rejection()
    EventInbox.objects.create(
        handler="h",
        idempotency_key="k",
        event_type="t",
        event_id="e",
        version=1,
        processed_at=timezone.now(),
    )
    retention_prune(now=_later(13))
    assert DeviceMessageRejection.objects.count() == 1
    retention_prune(now=_later(15))
    assert not DeviceMessageRejection.objects.exists() and EventInbox.objects.count() == 1
    retention_prune(now=_later(31))
    assert not EventInbox.objects.exists()


def _statements_per_batch(rows: int) -> int:
    EventInbox.objects.all().delete()
    EventInbox.objects.bulk_create(
        EventInbox(
            handler="h",
            idempotency_key=f"k{i}",
            event_type="t",
            event_id=f"e{i}",
            version=1,
            processed_at=timezone.now(),
        )
        for i in range(rows)
    )
    with CaptureQueriesContext(connection) as queries:
        result = retention_prune(now=_later(31), batch=rows)
    assert result.deleted["events.EventInbox"] == rows
    inbox = [q["sql"] for q in queries.captured_queries if "events_eventinbox" in q["sql"]]
    return len(inbox)


def test_statements_per_batch_do_not_grow_with_the_batch(db: None) -> None:
    """A batch of 1, 10 or 200 rows costs the same statements (read, delete, and the next
    batch's empty read)."""
    counts = {rows: _statements_per_batch(rows) for rows in (1, 10, 200)}
    assert len(set(counts.values())) == 1, counts


def test_statements_per_command_batch_do_not_grow(tenants: tuple[Tenant, Tenant]) -> None:
    """n ended commands, each with its execution, event and reading, pruned in batches of n:
    the same statements for 1 as for 3."""
    alpha, _ = tenants
    counts = []
    # The moment's time partitions are made (and the expired ones dropped) by a first run:
    # their cost is per partition, not per row, and counted apart (test_partitions.py).
    retention_prune(now=_later(181))
    for n in (1, 3):
        for _ in range(n):
            kit = make_farm(farm=alpha.kit.farm)
            kit.rule()
            _ended_command(Tenant(kit=kit, user=alpha.user))
        _rolled_up()
        with CaptureQueriesContext(connection) as queries:
            result = retention_prune(now=_later(181), batch=n)
        assert result.deleted["automation.DeviceCommand"] == n
        counts.append(len(queries.captured_queries))
    assert counts[0] == counts[1], counts


def test_the_readme_lists_every_retention_with_its_default() -> None:
    from pathlib import Path

    from config.env_retention import RETENTION_DEFAULTS

    readme = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    for name, (days, _) in RETENTION_DEFAULTS.items():
        assert f"| `{name}` | {days} |" in readme, name
