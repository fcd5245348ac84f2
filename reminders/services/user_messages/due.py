"""A user-message row at due time: reload the message, check that it is active and that the
row is still the occurrence the schedule wants (its link, its instant, its input hash), then
hand its current subject and text to notifications, keyed by the row's SchedulerKey: one
Notification per (key, recipient, channel), so a redelivered or re-claimed row queues nothing
twice. Recipients are resolved now: a member who left the farm is not told."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reminders.models import RecipientsPolicy, UserMessage, UserMessageOccurrence
from reminders.models.user_messages import UserMessageRecipients, UserMessageStatus
from reminders.services.delivery import delivery_check, notification_hand_off, notifications_handed
from reminders.services.user_messages.rows import user_message_input, user_message_occurrence_key
from reminders.services.user_messages.schedule import MessageSchedule, Occurrence
from scheduler.keys import (
    SchedulerKeyError,
    UserMessageKey,
    parse_scheduler_key,
    scheduler_input_hash,
    scheduler_key,
)
from scheduler.registry import (
    Deactivate,
    HandlerResult,
    HoldForSupport,
    PermanentFailure,
    ReminderSettingInactive,
    SchedulerJob,
    SourceNoLongerValid,
)
from scheduler.states import SchedulerReason

USER_MESSAGE_TEMPLATE = "user_message"


@dataclass(frozen=True)
class UserMessageDue:
    message: UserMessage
    occurrence: Occurrence
    total: int


def user_message_due_resolve(job: SchedulerJob) -> UserMessageDue:
    """Raise the typed outcome when the row may no longer run; else what it needs."""
    try:
        spec = parse_scheduler_key(job.scheduler_key)
    except SchedulerKeyError as exc:
        raise PermanentFailure(str(exc)) from None
    if not isinstance(spec, UserMessageKey):
        raise PermanentFailure(f"not a user-message key: {job.scheduler_key[:80]}")
    message = (
        UserMessage.objects.select_related("farm", "author").filter(guid=spec.message_guid).first()
    )
    if message is None:
        raise SourceNoLongerValid(f"user message {spec.message_guid} is gone")
    if message.status != UserMessageStatus.ACTIVE:
        raise ReminderSettingInactive(f"user message {message.guid} is cancelled")
    link = UserMessageOccurrence.objects.filter(
        message=message, scheduler_id=job.scheduler_id
    ).first()
    schedule = MessageSchedule.of(message)
    occurrence = None if link is None else schedule.at(link.sequence)
    if (
        occurrence is None
        or occurrence.utc < message.schedule_changed_at
        or scheduler_key(user_message_occurrence_key(message, occurrence)) != job.scheduler_key
    ):
        raise Deactivate(
            "the schedule no longer wants this occurrence", reason=SchedulerReason.SETTING_CHANGED
        )
    if scheduler_input_hash(user_message_input(message, occurrence)) != job.input_hash:
        raise HoldForSupport("the reloaded occurrence hashes differently")
    chosen = message.recipients_policy == UserMessageRecipients.CHOSEN
    delivery_check(
        template_name=USER_MESSAGE_TEMPLATE,
        channels=message.channels,
        # Named recipients are no policy of the pipeline's; the channels and template still are.
        recipient_policy=RecipientsPolicy.FARM_MEMBERS if chosen else message.recipients_policy,
    )
    return UserMessageDue(message, occurrence, schedule.total())


def user_message_context(due: UserMessageDue) -> dict[str, Any]:
    message = due.message
    author = message.author
    return {
        "farm_name": message.farm.name,
        "subject": message.subject,
        "text": message.text,
        "author_name": (author.get_full_name() or author.get_username()) if author else "",
        "scheduled_for": due.occurrence.utc,
        "occurrence": due.occurrence.sequence + 1,
        "occurrences": due.total,
    }


def user_message_due_run(job: SchedulerJob) -> HandlerResult:
    """Queue the message's notifications with the subject and text as they are now."""
    from notifications.services import notifications_create, recipients_chosen

    due = user_message_due_resolve(job)
    message = due.message
    if message.recipients_policy != UserMessageRecipients.CHOSEN:
        return notification_hand_off(
            source_key=job.scheduler_key,
            farm_id=message.farm_id,
            recipient_policy=message.recipients_policy,
            template_name=USER_MESSAGE_TEMPLATE,
            channels=message.channels,
            context=user_message_context(due),
            now=job.now,
        )
    recipients = recipients_chosen(
        farm=message.farm,
        user_ids=message.recipient_users.values_list("pk", flat=True),
        contact_ids=message.recipient_contacts.values_list("pk", flat=True),
    )
    queued = notifications_create(
        source_key=job.scheduler_key,
        farm=message.farm,
        recipients=recipients,
        recipient_policy=UserMessageRecipients.CHOSEN,
        template_name=USER_MESSAGE_TEMPLATE,
        channels=message.channels,
        context=user_message_context(due),
        now=job.now,
    )
    return notifications_handed(queued)
