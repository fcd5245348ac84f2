"""Webhook secrets are never stored: the row holds a salt and a key id, the secret is derived
from WEBHOOK_SECRET_KEY, shown once when issued, and recomputed to sign each delivery; a
changed key is reported, not signed with; the migration drops stored plain-text secrets."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from notifications.models import ExternalContact, Notification
from notifications.services.contacts import (
    external_contact_create,
    external_contact_webhook_secret_issue,
    external_contact_webhook_secret_revoke,
)
from notifications.webhook_secrets import (
    WebhookSecretUnusable,
    webhook_secret_derive,
    webhook_secret_recompute,
)
from tests.devices.factories import FarmFactory
from tests.migrating import migrate_to
from tests.notifications.test_webhook import deliver_when_due, hand_off

pytestmark = pytest.mark.django_db


def _stored_text(contact: ExternalContact) -> str:
    """Every column of the contact's row as the database holds it."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT * FROM {ExternalContact._meta.db_table} WHERE id = %s", [contact.pk]
        )
        return " ".join(str(value) for value in cursor.fetchone())


def test_an_issued_secret_is_shown_once_and_not_stored(team) -> None:
    assert team.hook_secret.startswith("whsec_") and len(team.hook_secret) == 6 + 64
    assert team.hook_secret not in _stored_text(team.hook)
    assert team.hook_secret.removeprefix("whsec_") not in _stored_text(team.hook)
    rotated = external_contact_webhook_secret_issue(contact_id=team.hook.pk)
    assert rotated != team.hook_secret and rotated not in _stored_text(team.hook)


def test_deliveries_sign_with_the_issued_secret_and_not_the_previous_one(
    hooked, due_template, webhook_server
) -> None:
    first = hand_off(hooked, due_template, key="rem:one")
    assert deliver_when_due(first) == "sent" and webhook_server.calls[-1].verified
    external_contact_webhook_secret_issue(contact_id=hooked.hook.pk)  # the receiver keeps the old
    second = hand_off(hooked, due_template, key="rem:two")
    assert deliver_when_due(second) == "failed"  # its 401: the old secret signs no more
    assert not webhook_server.calls[-1].verified


def test_a_salt_copied_to_another_contact_signs_nothing_it_signed(team) -> None:
    other, _ = external_contact_create(farm_id=team.farm.pk, name="Other")
    hook = ExternalContact.objects.get(pk=team.hook.pk)
    copied = webhook_secret_derive(contact_id=other.pk, salt=hook.webhook_secret_salt)
    assert copied != team.hook_secret


def test_a_changed_key_is_reported_and_a_listed_fallback_still_signs(
    hooked, due_template, webhook_server, settings
) -> None:
    issued_under = settings.WEBHOOK_SECRET_KEY
    settings.WEBHOOK_SECRET_KEY = "k" * 10 + "another key altogether" * 3
    notification_id = hand_off(hooked, due_template, key="rem:rekeyed")
    assert deliver_when_due(notification_id) == "failed"
    row = Notification.objects.get(pk=notification_id)
    assert row.status_reason == "no_address"
    assert "WEBHOOK_SECRET_KEY_FALLBACKS" in row.last_error and webhook_server.calls == []

    settings.WEBHOOK_SECRET_KEY_FALLBACKS = [issued_under]
    again = hand_off(hooked, due_template, key="rem:fallback")
    assert deliver_when_due(again) == "sent" and webhook_server.calls[-1].verified


def test_a_revoked_or_never_issued_secret_signs_nothing(team) -> None:
    assert external_contact_webhook_secret_revoke(contact_id=team.hook.pk) is True
    assert external_contact_webhook_secret_revoke(contact_id=team.hook.pk) is False
    hook = ExternalContact.objects.get(pk=team.hook.pk)
    with pytest.raises(WebhookSecretUnusable, match="webhook_secret_issue"):
        webhook_secret_recompute(
            contact_id=hook.pk, salt=hook.webhook_secret_salt, key_id=hook.webhook_secret_key_id
        )


def test_the_command_prints_a_new_secret_once(team) -> None:
    out, err = StringIO(), StringIO()
    call_command("webhook_secret_issue", str(team.hook.pk), stdout=out, stderr=err)
    secret = out.getvalue().strip()
    hook = ExternalContact.objects.get(pk=team.hook.pk)
    assert secret == webhook_secret_recompute(
        contact_id=hook.pk, salt=hook.webhook_secret_salt, key_id=hook.webhook_secret_key_id
    )
    assert secret != team.hook_secret and "cannot be shown again" in err.getvalue()


@pytest.mark.django_db(transaction=True)
def test_the_migration_drops_stored_plain_text_secrets() -> None:
    before = [("notifications", "0003_notification_time_zone_validated")]
    after = [("notifications", "0004_webhook_secrets_derived_not_stored")]
    executor = migrate_to(before)
    try:
        old_apps = executor.loader.project_state(before).apps
        farm = FarmFactory()
        legacy = old_apps.get_model("notifications", "ExternalContact").objects.create(
            farm_id=farm.pk, name="Legacy", webhook_url="https://x.test/h", webhook_secret="pl4in"
        )
    finally:
        executor = migrate_to(after)
        # Back to every app's latest: going back to ``before`` also unapplied the migrations
        # of other apps that depend on notifications' later ones.
        migrate_to()
    contact = ExternalContact.objects.get(pk=legacy.pk)
    assert "pl4in" not in _stored_text(contact)
    assert contact.webhook_secret_salt == ""  # no secret until one is issued and handed over
