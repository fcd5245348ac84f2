"""The demo's thin lanes beside the command path: a rule that outranks the vent rule on the
first relay (two conditions, two actions), a user message to the farm's members, and the
trace every scheduler execution leaves; each as a table and an invariant."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from django.contrib.auth import get_user_model
from django.db.models import Count, Q

from automation.models import AutomationRule, AutomationRuleExecution
from automation.services.rules import rule_create
from automation.states import ExecutionOutcome, ReasonCode
from config.tables import format_table
from devtools.demo import demo_endpoint
from notifications.models import Membership, MembershipRole, Notification
from notifications.states import Channel, NotificationStatus
from reminders.models import UserMessage
from reminders.services.user_messages.write import user_message_create
from scheduler.models import TraceRecord

STORM_PRIORITY = 10  # above the vent rules' 0
MESSAGE_CHANNELS = (Channel.INBOX, Channel.EMAIL)


def storm_rule_ensure(sensor_serial: str, relay_serial: str) -> AutomationRule:
    """ "Storm vent": temperature above 30 *and* humidity above 40 opens the vent and runs the
    fan. It decides the vent at the same reading as the plain vent rule, outranks it, and the
    plain rule's decision ends ``discarded``/``lower_priority``: one command, not two."""
    temp, humidity = demo_endpoint(sensor_serial, "temp"), demo_endpoint(sensor_serial, "humidity")
    io1, fan = demo_endpoint(relay_serial, "io1"), demo_endpoint(relay_serial, "fan")
    name = f"Storm vent {relay_serial}"
    rule = AutomationRule.objects.filter(farm=temp.device.farm, name=name).first()
    if rule is not None:
        return rule
    return rule_create(
        farm=temp.device.farm,
        name=name,
        priority=STORM_PRIORITY,
        trigger_endpoint=temp,
        operator="gt",
        threshold_value=30,
        target_endpoint=io1,
        target_value=True,
        conditions=[{"endpoint": humidity, "operator": "gt", "threshold_value": 40}],
        actions=[{"target_endpoint": fan, "target_value": 80}],
    )


def message_demo_create(relay_serial: str, at: datetime) -> UserMessage:
    """A one-off message to the farm's members at ``at`` (local to the farm), by inbox and
    email; the demo grower is the member it reaches."""
    farm = demo_endpoint(relay_serial, "io1").device.farm
    grower, _ = get_user_model()._default_manager.get_or_create(
        username="demo-grower", defaults={"email": "grower@demo.invalid"}
    )
    Membership.objects.get_or_create(user=grower, farm=farm, role=MembershipRole.MEMBER)
    local = at.astimezone(ZoneInfo(farm.time_zone))
    return user_message_create(
        farm_id=farm.pk,
        subject="Vents close for the night",
        text="The schedule closes the vents now; check the greenhouse doors.",
        channels=list(MESSAGE_CHANNELS),
        starts_on=local.date(),
        send_time=local.time().replace(tzinfo=None),
    )


def message_notifications(message: UserMessage) -> list[Notification]:
    keys = message.occurrences.values_list("scheduler_key", flat=True)
    return list(Notification.objects.filter(source_key__in=list(keys)))


def message_delivered(message: UserMessage) -> bool:
    """Every notification of the message is final (sent, skipped or failed)."""
    notes = message_notifications(message)
    return bool(notes) and all(
        n.status not in (NotificationStatus.QUEUED, NotificationStatus.SENDING) for n in notes
    )


@dataclass
class LaneSummary:
    """The lanes' tables, printed by the demo, and their invariants."""

    tables: list[tuple[str, str]]
    checks: list[tuple[str, bool]]


def lanes_summary(
    since: datetime, storm: AutomationRule, message: UserMessage, occurrence_ids: list[int]
) -> LaneSummary:
    decisions = (
        AutomationRuleExecution.objects.filter(created_at__gte=since)
        .values_list("outcome", "failure_reason")
        .annotate(n=Count("pk"))
        .order_by("outcome", "failure_reason")
    )
    discarded = AutomationRuleExecution.objects.filter(
        created_at__gte=since,
        outcome=ExecutionOutcome.DISCARDED,
        failure_reason=ReasonCode.LOWER_PRIORITY,
    )
    notes = message_notifications(message)
    by_channel = Counter((n.channel, n.status) for n in notes)
    executed = [*occurrence_ids, *message.occurrences.values_list("scheduler_id", flat=True)]
    traces = Counter(
        TraceRecord.objects.filter(scheduler_id__in=executed).values_list("scheduler_id", flat=True)
    )
    jobs = (
        TraceRecord.objects.filter(started_at__gte=since)
        .values_list("automation_type", "outcome")
        .annotate(n=Count("pk"), blobs=Count("pk", filter=~Q(trace_blob_name="")))
        .order_by("automation_type", "outcome")
    )
    tables = [
        (
            "Rule decisions (lower_priority: a rule of higher priority won the endpoint; "
            "newer_reading: the same rule decided it from a newer reading)",
            format_table(
                ["outcome", "reason", "decisions"], [(o, r or "-", n) for o, r, n in decisions]
            ),
        ),
        (
            f"User message {message.guid} to the farm's members",
            format_table(
                ["channel", "state", "notifications"],
                [(c, s, n) for (c, s), n in sorted(by_channel.items())],
            ),
        ),
        (
            "Scheduler executions, from their trace (TraceRecord)",
            format_table(["type", "outcome", "executions", "trace blobs"], list(jobs)),
        ),
    ]
    winners = {d.won_by_id for d in discarded if d.won_by_id is not None}
    checks = [
        (
            "a lower-priority decision lost to the storm rule's",
            discarded.exists()
            and AutomationRuleExecution.objects.filter(pk__in=winners, rule=storm).count()
            == len(winners),
        ),
        (
            "the user message reached each recipient once per channel",
            bool(notes)
            and all(n.status == NotificationStatus.SENT for n in notes)
            and len({(n.recipient_key, n.channel) for n in notes}) == len(notes),
        ),
        (
            "each scheduler execution left one trace record",
            bool(executed) and all(traces[i] == 1 for i in executed),
        ),
    ]
    return LaneSummary(tables, checks)
