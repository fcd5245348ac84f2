"""Alarm notifications through the pipeline: a sweep claims each due, unacknowledged alarm
(a compare-and-set on its version, ``alarms.services.alarm_notify_claim``) and hands repeat n
off under the source key ``alarm:{id}:{n}`` in the same transaction, so each repeat reaches
each recipient and channel exactly once, and a failed hand-off un-claims it. The farm's
people get email and the inbox, its external contacts email and their webhook; who, by
severity, is the farm's alarm policy (``everyone`` for critical and major alarms,
``farm_managers`` for minor ones and warnings, by default)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from alarms.selectors import alarms_notify_due
from alarms.services import AlarmNotice, alarm_notify_claim, alarm_policies_get
from notifications.channels import Recipient
from notifications.services.recipients import recipients_resolve
from notifications.services.schedule import notifications_create
from notifications.states import Channel

ALARM_TEMPLATE = "alarm"
PEOPLE_CHANNELS = (str(Channel.EMAIL), str(Channel.INBOX))
CONTACT_CHANNELS = (str(Channel.EMAIL), str(Channel.WEBHOOK))


def alarms_notify(*, now: datetime, batch: int | None = None) -> int:
    """Send the due notification of up to ``batch`` alarms; returns how many were claimed.
    Two sweeps at once claim each repeat once (the loser's compare-and-set changes nothing)."""
    batch = batch or int(settings.ALARMS_NOTIFY_BATCH)
    claimed = 0
    due = alarms_notify_due(now=now, batch=batch)
    policies = alarm_policies_get({alarm.farm_id for alarm in due}) if due else {}
    for alarm in due:
        with transaction.atomic():
            notice = alarm_notify_claim(alarm, now=now, policy=policies[alarm.farm_id])
            if notice is None:
                continue
            alarm_notice_send(notice, now=now)
        claimed += 1
    return claimed


def alarm_notice_send(notice: AlarmNotice, *, now: datetime) -> None:
    """Hand one claimed repeat off: people and contacts on their own channels."""
    if not notice.recipient_policy:
        return  # the farm's policy tells no one about this severity
    alarm = notice.alarm
    recipients = recipients_resolve(farm=alarm.farm, policy=notice.recipient_policy)
    people = [r for r in recipients if r.user_id is not None]
    contacts = [r for r in recipients if r.contact_id is not None]
    groups: list[tuple[list[Recipient], tuple[str, ...]]] = [
        (people, PEOPLE_CHANNELS),
        (contacts, CONTACT_CHANNELS),
    ]
    for group, channels in groups:
        if group:
            notifications_create(
                source_key=notice.source_key,
                farm=alarm.farm,
                recipients=group,
                recipient_policy=notice.recipient_policy,
                template_name=ALARM_TEMPLATE,
                channels=channels,
                context=_context(notice),
                now=now,
            )


def _context(notice: AlarmNotice) -> dict[str, str | int | datetime]:
    alarm = notice.alarm
    path = reverse("admin:alarms_alarm_change", args=[alarm.pk])
    return {
        "alarm_id": alarm.pk,
        "severity": alarm.severity,
        "farm": alarm.farm.name,
        "source": f"{alarm.source}:{alarm.source_id}",
        "type": alarm.type,
        "detail": alarm.detail,
        "first_raised_at": alarm.first_raised_at,
        "last_raised_at": alarm.last_raised_at,
        "count": alarm.count,
        "repeat": notice.repeat,
        "link": f"{settings.ALARMS_LINK_BASE_URL}{path}",
    }
