"""External contacts' channel preferences: one row per (contact, channel), no row meaning the
channel's default (on). An admin turns a channel on or off; the recipient's own opt-out
(``opted_out_at``) is theirs: turning the channel on does not lift it, and a row holding one
is not deleted."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from common.audit.writes import audited_update
from notifications.models import ChannelPreference
from notifications.states import Channel

# An external contact is told by email or webhook; the in-app inbox is for users.
CONTACT_CHANNELS = frozenset({Channel.EMAIL, Channel.WEBHOOK})


class PreferenceRefused(ValueError):
    """The change is not one this preference takes; ``field`` names what is at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def contact_channel_preference_set(
    *, contact_id: int, channel: str, enabled: bool
) -> tuple[ChannelPreference, bool]:
    """Turn ``channel`` on or off for the contact: (the row, whether it was created). A
    concurrent first set meets the unique constraint and becomes an update."""
    if channel not in CONTACT_CHANNELS:
        raise PreferenceRefused("channel", "an external contact is told by email or webhook")
    rows = ChannelPreference.objects.filter(contact_id=contact_id, channel=channel)
    if audited_update(rows, enabled=enabled, updated_at=timezone.now()):
        return rows.get(), False
    try:
        with transaction.atomic():
            made = ChannelPreference.objects.create(
                contact_id=contact_id, channel=channel, enabled=enabled
            )
        return made, True
    except IntegrityError:
        audited_update(rows, enabled=enabled, updated_at=timezone.now())
        return rows.get(), False


def channel_preference_enable(*, preference_id: int, enabled: bool) -> ChannelPreference:
    """Turn an existing preference's channel on or off (an opt-out stays)."""
    rows = ChannelPreference.objects.filter(pk=preference_id)
    audited_update(rows, enabled=enabled, updated_at=timezone.now())
    return rows.get()


def channel_preference_delete(*, preference_id: int) -> bool:
    """Back to the channel's default (on). Refused (``PreferenceRefused``) for a row that
    holds the recipient's opt-out; False when the row is gone already."""
    rows = ChannelPreference.objects.filter(pk=preference_id)
    deleted, _ = rows.filter(opted_out_at__isnull=True).delete()
    if not deleted and rows.exists():
        raise PreferenceRefused("opted_out_at", "the recipient opted out of this channel")
    return bool(deleted)
