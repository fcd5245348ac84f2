"""Who is told: a recipient policy names the people (resolved when the hand-off runs, i.e. at
due time); each recipient's channel preferences decide how."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import Q

from devices.models import Farm
from notifications.channels.base import Recipient
from notifications.models import ChannelPreference, ExternalContact, MembershipRole
from notifications.states import NotificationReason

MANAGER_ROLES = (MembershipRole.MANAGER, MembershipRole.OWNER)


def _users(query: Q) -> list[Recipient]:
    users = get_user_model().objects.filter(query, is_active=True).distinct().order_by("pk")
    return [
        Recipient(
            key=f"user:{u.pk}",
            name=u.get_full_name() or u.get_username(),
            user_id=u.pk,
            email=u.email or "",
        )
        for u in users
    ]


def _farm_scope(farm: Farm) -> Q:
    return Q(farm_memberships__farm_id=farm.pk) | Q(
        farm_memberships__organization_id=farm.organization_id
    )


def _members(farm: Farm) -> list[Recipient]:
    return _users(_farm_scope(farm))


def _managers(farm: Farm) -> list[Recipient]:
    # One filter() call: the role and the scope refer to the same membership row.
    roles = Q(farm_memberships__role__in=MANAGER_ROLES)
    return _users(roles & _farm_scope(farm))


def _contacts(farm: Farm) -> list[Recipient]:
    contacts = ExternalContact.objects.filter(farm=farm, is_active=True).order_by("pk")
    return [
        Recipient(
            key=f"contact:{c.pk}",
            name=c.name,
            contact_id=c.pk,
            email=c.email,
            webhook_url=c.webhook_url,
            has_webhook_secret=bool(c.webhook_secret_salt),
        )
        for c in contacts
    ]


def _everyone(farm: Farm) -> list[Recipient]:
    return _members(farm) + _contacts(farm)


RECIPIENT_POLICIES: dict[str, Callable[[Farm], list[Recipient]]] = {
    "farm_members": _members,
    "farm_managers": _managers,
    "external_contacts": _contacts,
    "everyone": _everyone,
}


def recipients_resolve(*, farm: Farm, policy: str) -> list[Recipient]:
    """The recipients ``policy`` names for ``farm``; ValueError naming an unknown policy."""
    resolve = RECIPIENT_POLICIES.get(policy)
    if resolve is None:
        known = ", ".join(sorted(RECIPIENT_POLICIES))
        raise ValueError(f"unknown recipient policy {policy!r} (known: {known})")
    return resolve(farm)


def recipients_chosen(
    *, farm: Farm, user_ids: Iterable[int], contact_ids: Iterable[int]
) -> list[Recipient]:
    """The named users who are (still) members of ``farm`` and its named active contacts: a
    sender picks people, but only the farm's own people are told."""
    users = _users(Q(pk__in=list(user_ids)) & _farm_scope(farm))
    wanted = set(contact_ids)
    contacts = [c for c in _contacts(farm) if c.contact_id in wanted]
    return users + contacts


def operators_resolve() -> list[Recipient]:
    """Who hears about platform trouble: users with the operator role on an organisation,
    and staff users."""
    return _users(Q(farm_memberships__role=MembershipRole.OPERATOR) | Q(is_staff=True))


@dataclass(frozen=True)
class ChannelChoice:
    """A recipient's stance on one channel: None means send."""

    skip_reason: NotificationReason | None = None
    detail: str = ""


def channel_choices(
    recipients: Iterable[Recipient], channels: Iterable[str]
) -> dict[tuple[str, str], ChannelChoice]:
    """Preferences of ``recipients`` for ``channels`` in two queries; no row means send."""
    recipients = list(recipients)
    channels = list(channels)
    user_ids = [r.user_id for r in recipients if r.user_id is not None]
    contact_ids = [r.contact_id for r in recipients if r.contact_id is not None]
    rows = ChannelPreference.objects.filter(
        Q(user_id__in=user_ids) | Q(contact_id__in=contact_ids), channel__in=channels
    )
    choices: dict[tuple[str, str], ChannelChoice] = {}
    for pref in rows:
        key = f"user:{pref.user_id}" if pref.user_id else f"contact:{pref.contact_id}"
        if pref.opted_out_at is not None:
            detail = f"opted out of {pref.channel} at {pref.opted_out_at.isoformat()}"
            choices[(key, pref.channel)] = ChannelChoice(NotificationReason.OPTED_OUT, detail)
        elif not pref.enabled:
            detail = f"{pref.channel} disabled in the recipient's preferences"
            choices[(key, pref.channel)] = ChannelChoice(
                NotificationReason.CHANNEL_DISABLED, detail
            )
    return choices


def channel_choice(*, recipient_key: str, channel: str) -> ChannelChoice:
    """One recipient's current stance (delivery re-checks it: an opt-out after the hand-off
    still stops a pending message)."""
    kind, _, raw_id = recipient_key.partition(":")
    if kind not in {"user", "contact"} or not raw_id.isdigit():
        return ChannelChoice()
    recipient = (
        Recipient(key=recipient_key, user_id=int(raw_id))
        if kind == "user"
        else Recipient(key=recipient_key, contact_id=int(raw_id))
    )
    return channel_choices([recipient], [channel]).get((recipient_key, channel), ChannelChoice())
