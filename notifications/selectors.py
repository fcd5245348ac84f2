"""Reads of the notification pipeline: a user's inbox, and the external contacts and their
channel preferences an organisation's members see."""

from __future__ import annotations

from django.db.models import QuerySet

from common.tenancy import OrgScope, scope_filter
from notifications.models import ChannelPreference, ExternalContact, InboxItem


def inbox_items_for(*, user_id: int, unread_only: bool = False) -> QuerySet[InboxItem]:
    items = InboxItem.objects.filter(user_id=user_id)
    if unread_only:
        items = items.filter(read_at__isnull=True)
    return items.order_by("-created_at", "-pk")


def external_contacts_visible(*, scope: OrgScope) -> QuerySet[ExternalContact]:
    rows = ExternalContact.objects.select_related("farm")
    return scope_filter(rows, scope, "farm__organization_id").order_by("pk")


def contact_channel_preferences_visible(*, scope: OrgScope) -> QuerySet[ChannelPreference]:
    """External contacts' preferences (a user's own are not an organisation's to read)."""
    rows = ChannelPreference.objects.filter(contact__isnull=False).select_related("contact__farm")
    return scope_filter(rows, scope, "contact__farm__organization_id").order_by("pk")
