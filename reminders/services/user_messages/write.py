"""Creating, editing and cancelling a user's scheduled message, and the beat's ensure. Every
write locks the message, changes it by compare-and-set on its version, and syncs its
scheduler rows in the same transaction (``rows``):

* subject, text, recipients, channels: no row changes (the handler reloads them at due time);
* the schedule (date, time, recurrence, bounds): pending rows move in place, rows of
  occurrences no longer wanted are deactivated, completed rows stay;
* cancel: open rows are deactivated, completed rows stay; cancelling twice is a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, time
from typing import TypedDict, Unpack

from django.db import models, transaction
from django.utils import timezone

from common.ledger import Ledger, Step, ledger_move_row
from common.validators import time_zones_known
from common.writes import row_create
from devices.models import Farm
from notifications.services import recipients_chosen
from notifications.states import Channel
from reminders.models import UserMessage, UserMessageRecurrence, UserMessageStatus
from reminders.models.user_messages import USER_MESSAGE_OCCURRENCES_MAX, UserMessageRecipients
from reminders.services.user_messages.rows import LATE_MAX, RowsSynced, user_message_rows_sync
from reminders.services.user_messages.schedule import MessageSchedule

CONTENT_FIELDS = frozenset({"subject", "text", "channels", "recipients_policy"})
RECIPIENT_FIELDS = frozenset({"recipient_users", "recipient_contacts"})
SCHEDULE_FIELDS = frozenset({"recurrence", "starts_on", "send_time", "until", "count"})
ENSURE_BATCH = 200
# An edit moves nothing but the version; a cancel is the one move, and the last.
USER_MESSAGES = Ledger(
    UserMessage,
    touched="updated_at",
    edges={UserMessageStatus.ACTIVE: frozenset({UserMessageStatus.CANCELLED})},
)


class UserMessageChanges(TypedDict, total=False):
    """An edit; ``recipient_users`` and ``recipient_contacts`` take ids."""

    subject: str
    text: str
    channels: list[str]
    recipients_policy: str
    recipient_users: Iterable[int]
    recipient_contacts: Iterable[int]
    recurrence: str
    starts_on: date
    send_time: time
    until: date | None
    count: int | None


class UserMessageInvalid(ValueError):
    """A message that cannot be scheduled as given; ``field`` names the input to blame."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class UserMessageCancelled(UserMessageInvalid):
    """A cancelled message is history: it cannot be edited."""


def user_message_create(
    *,
    farm_id: int,
    subject: str,
    text: str,
    channels: Iterable[str],
    starts_on: date,
    send_time: time,
    recurrence: str = UserMessageRecurrence.ONCE,
    until: date | None = None,
    count: int | None = None,
    recipients_policy: str = UserMessageRecipients.FARM_MEMBERS,
    recipient_users: Iterable[int] = (),
    recipient_contacts: Iterable[int] = (),
    author_id: int | None = None,
    now: datetime | None = None,
) -> UserMessage:
    """Validated, saved and its first occurrences ensured, in one transaction."""
    now = now or timezone.now()
    message = UserMessage(
        farm=Farm.objects.get(pk=farm_id),
        author_id=author_id,
        subject=subject,
        text=text,
        channels=list(channels),
        recurrence=recurrence,
        starts_on=starts_on,
        send_time=send_time,
        until=until,
        count=count,
        recipients_policy=recipients_policy,
        schedule_changed_at=now,
        created_at=now,
        updated_at=now,
    )
    users, contacts = list(recipient_users), list(recipient_contacts)

    def check(new: UserMessage) -> None:
        new.last_occurrence_on = _validate(new, users, contacts, now=now, schedule=True)

    def then(new: UserMessage) -> None:
        new.recipient_users.set(users)
        new.recipient_contacts.set(contacts)
        user_message_rows_sync(message=new, now=now)

    return row_create(message, validate=check, then=then)


def user_message_update(
    *, message_id: int, now: datetime | None = None, **changes: Unpack[UserMessageChanges]
) -> tuple[list[str], RowsSynced]:
    """The fields that changed and what happened to the rows."""
    unknown = set(changes) - CONTENT_FIELDS - RECIPIENT_FIELDS - SCHEDULE_FIELDS
    if unknown:
        raise UserMessageInvalid(sorted(unknown)[0], "cannot be changed")
    now = now or timezone.now()
    with transaction.atomic():
        message = UserMessage.objects.select_for_update().select_related("farm").get(pk=message_id)
        if message.status != UserMessageStatus.ACTIVE:
            raise UserMessageCancelled("status", "the message is cancelled; it cannot be edited")
        named = changes.get("recipients_policy", message.recipients_policy)
        keep = named == UserMessageRecipients.CHOSEN  # a policy names nobody: drop the names
        users = list(changes.get("recipient_users", _ids(message.recipient_users) if keep else []))
        contacts = list(
            changes.get("recipient_contacts", _ids(message.recipient_contacts) if keep else [])
        )
        given = {name: value for name, value in changes.items() if name not in RECIPIENT_FIELDS}
        changed = [name for name, value in given.items() if getattr(message, name) != value]
        if set(users) != set(_ids(message.recipient_users)):
            changed.append("recipient_users")
        if set(contacts) != set(_ids(message.recipient_contacts)):
            changed.append("recipient_contacts")
        if not changed:
            return [], RowsSynced()
        for name in changed:
            if name in given:
                setattr(message, name, given[name])
        retimed = bool(SCHEDULE_FIELDS & set(changed))
        last = _validate(message, users, contacts, now=now, schedule=retimed)
        fields = {name: given[name] for name in changed if name in given}
        if retimed:
            fields |= {"schedule_changed_at": now, "last_occurrence_on": last}
        # Not lost under the lock; kept as the compare-and-set's guard.
        if not ledger_move_row(USER_MESSAGES, message, sets=fields, now=now):
            return [], RowsSynced()
        message.recipient_users.set(users)
        message.recipient_contacts.set(contacts)
        if not retimed:
            return changed, RowsSynced()
        return changed, user_message_rows_sync(message=message, now=now)


def user_message_cancel(
    *, message_id: int, now: datetime | None = None, actor: str = "", reason: str = ""
) -> bool:
    """Active → cancelled; its open rows are deactivated (the audit rows name ``actor`` and
    ``reason`` when given). False: it was cancelled already."""
    now = now or timezone.now()
    with transaction.atomic():
        message = UserMessage.objects.select_for_update().select_related("farm").get(pk=message_id)
        cancel = Step(UserMessageStatus.CANCELLED)
        sets = {"cancelled_at": now}
        if not ledger_move_row(USER_MESSAGES, message, steps=[cancel], sets=sets, now=now):
            return False
        who = f" by {actor}" if actor else ""
        detail = f"user message cancelled{who}" + (f": {reason}" if reason else "")
        user_message_rows_sync(message=message, now=now, detail=detail[:500])
    return True


def user_message_ensure(*, message_id: int, now: datetime) -> RowsSynced:
    """Extend one message's rows to the horizon (idempotent)."""
    with transaction.atomic():
        message = UserMessage.objects.select_for_update().select_related("farm").get(pk=message_id)
        return user_message_rows_sync(message=message, now=now)


def user_messages_ensure_due(*, now: datetime, batch: int = ENSURE_BATCH) -> int:
    """Beat: active messages with occurrences left, in bounded id-ordered batches; how many
    rows were ensured."""
    live = UserMessage.objects.filter(
        status=UserMessageStatus.ACTIVE, last_occurrence_on__gte=now - LATE_MAX
    )
    after, ensured = 0, 0
    while True:
        ids = list(live.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:batch])
        for pk in ids:
            ensured += len(user_message_ensure(message_id=pk, now=now).ensured)
        if len(ids) < batch:
            return ensured
        after = ids[-1]


def _ids(related: models.Manager[models.Model]) -> list[int]:
    return list(related.values_list("pk", flat=True))


def _validate(
    message: UserMessage, users: list[int], contacts: list[int], *, now: datetime, schedule: bool
) -> datetime:
    """Refuse what cannot be sent; the UTC instant of the message's last occurrence."""
    if not message.subject.strip():
        raise UserMessageInvalid("subject", "a message needs a subject")
    if not message.text.strip():
        raise UserMessageInvalid("text", "a message needs a text")
    if not message.channels or any(c not in Channel.values for c in message.channels):
        raise UserMessageInvalid("channels", f"channels must be among {Channel.values}")
    _validate_recipients(message, users, contacts)
    if message.farm.time_zone not in time_zones_known():
        raise UserMessageInvalid("farm", "the farm's time zone is not an IANA time zone")
    return _validate_schedule(message, now=now, future=schedule)


def _validate_recipients(message: UserMessage, users: list[int], contacts: list[int]) -> None:
    UserMessageRecipients(message.recipients_policy)
    if message.recipients_policy != UserMessageRecipients.CHOSEN:
        if users or contacts:
            raise UserMessageInvalid(
                "recipients_policy", "name recipients only with the policy 'chosen'"
            )
        return
    if not users and not contacts:
        raise UserMessageInvalid("recipient_users", "name at least one user or contact")
    found = recipients_chosen(farm=message.farm, user_ids=users, contact_ids=contacts)
    missing_users = set(users) - {r.user_id for r in found}
    if missing_users:
        raise UserMessageInvalid(
            "recipient_users", f"not members of the farm: {sorted(missing_users)[:10]}"
        )
    missing_contacts = set(contacts) - {r.contact_id for r in found}
    if missing_contacts:
        raise UserMessageInvalid(
            "recipient_contacts",
            f"not active contacts of the farm: {sorted(missing_contacts)[:10]}",
        )


def _validate_schedule(message: UserMessage, *, now: datetime, future: bool) -> datetime:
    recurrence = UserMessageRecurrence(message.recurrence)
    if message.send_time.tzinfo is not None:
        raise UserMessageInvalid("send_time", "is a local time: give it without an offset")
    if recurrence == UserMessageRecurrence.ONCE:
        if message.until is not None or message.count is not None:
            raise UserMessageInvalid("until", "a one-off message has no until or count")
    elif message.until is None and message.count is None:
        raise UserMessageInvalid("until", "a recurring message needs an until date or a count")
    if message.count is not None and not 1 <= message.count <= USER_MESSAGE_OCCURRENCES_MAX:
        raise UserMessageInvalid("count", f"from 1 to {USER_MESSAGE_OCCURRENCES_MAX}")
    if message.until is not None and message.until < message.starts_on:
        raise UserMessageInvalid("until", "must not be before starts_on")
    schedule = MessageSchedule.of(message)
    if message.count is None and message.until is not None and schedule.step_days:
        spanned = (message.until - message.starts_on).days // schedule.step_days + 1
        if spanned > USER_MESSAGE_OCCURRENCES_MAX:
            raise UserMessageInvalid(
                "until", f"at most {USER_MESSAGE_OCCURRENCES_MAX} occurrences; set a count"
            )
    last = schedule.last()
    if last is None:  # not reachable with the bounds above
        raise UserMessageInvalid("count", "the schedule has no occurrence")
    if future and last.utc <= now:
        field = "starts_on" if recurrence == UserMessageRecurrence.ONCE else "until"
        raise UserMessageInvalid(field, "the schedule has no occurrence after now")
    return last.utc
