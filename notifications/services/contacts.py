"""External contacts: created, changed, deactivated, and their webhook secrets issued (or
rotated) and revoked. An issued secret is returned once, to be handed to the receiver; only
its salt is kept (``notifications.webhook_secrets``), so nothing can show it again. A webhook
URL is checked (``notifications.destinations``) whenever it is set, and again at every send.
A contact is deactivated, never deleted: its notifications keep pointing at it."""

from __future__ import annotations

from collections.abc import Mapping

from common.audit.writes import audited_update
from notifications.destinations import webhook_url_check
from notifications.models import ExternalContact
from notifications.webhook_secrets import (
    webhook_secret_derive,
    webhook_secret_key_id,
    webhook_secret_salt_new,
)


class ExternalContactNotFound(LookupError):
    pass


def external_contact_webhook_secret_issue(*, contact_id: int) -> str:
    """A new signing secret for the contact under the current key: deliveries sign with it
    from now on (the previous one stops at once). Returned once; never stored."""
    salt = webhook_secret_salt_new()
    changed = audited_update(
        ExternalContact.objects.filter(pk=contact_id),
        webhook_secret_salt=salt,
        webhook_secret_key_id=webhook_secret_key_id(),
    )
    if not changed:
        raise ExternalContactNotFound(f"no external contact {contact_id}")
    return webhook_secret_derive(contact_id=contact_id, salt=salt)


def external_contact_webhook_secret_revoke(*, contact_id: int) -> bool:
    """The contact's secret signs nothing more (its webhooks are skipped until a new one is
    issued); False when it had none."""
    changed = audited_update(
        ExternalContact.objects.filter(pk=contact_id).exclude(webhook_secret_salt=""),
        webhook_secret_salt="",
        webhook_secret_key_id="",
    )
    return bool(changed)


def external_contact_create(
    *,
    farm_id: int,
    name: str,
    email: str = "",
    webhook_url: str = "",
    with_webhook_secret: bool = False,
) -> tuple[ExternalContact, str | None]:
    """A contact and, when asked, its first webhook secret (returned once, with the row).
    Raises ``WebhookDestinationForbidden`` for a webhook URL no webhook may go to."""
    if webhook_url:
        webhook_url_check(webhook_url)
    salt = webhook_secret_salt_new() if with_webhook_secret else ""
    contact = ExternalContact.objects.create(
        farm_id=farm_id,
        name=name,
        email=email,
        webhook_url=webhook_url,
        webhook_secret_salt=salt,
        webhook_secret_key_id=webhook_secret_key_id() if salt else "",
    )
    if not salt:
        return contact, None
    return contact, webhook_secret_derive(contact_id=contact.pk, salt=salt)


CONTACT_CHANGEABLE = frozenset({"name", "email", "webhook_url", "is_active"})


def external_contact_update(*, contact_id: int, changes: Mapping[str, object]) -> ExternalContact:
    """Change the contact's name, addresses or active flag (``CONTACT_CHANGEABLE``). A new
    webhook URL is checked first (``WebhookDestinationForbidden``); the webhook secret stays
    as it is (a receiver at the new URL needs it: rotate for a new one)."""
    unknown = set(changes) - CONTACT_CHANGEABLE
    if unknown:
        raise ValueError(f"not changeable here: {', '.join(sorted(unknown))}")
    url = changes.get("webhook_url")
    if isinstance(url, str) and url:
        webhook_url_check(url)
    rows = ExternalContact.objects.filter(pk=contact_id)
    if changes and not audited_update(rows, **changes):
        raise ExternalContactNotFound(f"no external contact {contact_id}")
    found = rows.first()
    if found is None:
        raise ExternalContactNotFound(f"no external contact {contact_id}")
    return found


def external_contact_deactivate(*, contact_id: int) -> bool:
    """Tell the contact nothing more (recipient policies take active contacts only). Its row,
    preferences, secret and notifications stay; setting ``is_active`` again brings it back.
    False when it was inactive already."""
    active = ExternalContact.objects.filter(pk=contact_id, is_active=True)
    return bool(audited_update(active, is_active=False))
