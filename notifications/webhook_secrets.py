"""Webhook signing secrets, stored as nothing a reader of the database could sign with.

A contact's secret is derived: ``whsec_`` + hex HMAC-SHA256(``WEBHOOK_SECRET_KEY``, contact id
and a random per-contact salt). The table keeps the salt and the id of the key it was issued
under; the secret itself is shown once, when issued (``external_contact_webhook_secret_issue``),
and recomputed for each delivery. A copied salt signs nothing on another row, and a database
dump without the environment's key signs nothing at all.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.conf import settings

SECRET_PREFIX = "whsec_"
SALT_BYTES = 32  # hex-encoded: 64 characters
KEY_ID_CHARS = 16
_KEY_ID_MESSAGE = b"farm-webhook-key-id:v1"


class WebhookSecretUnusable(Exception):
    """The contact has no secret this deployment can recompute (never issued, or issued under
    a key no longer configured); the message says what to do."""


def _key_bytes(key: str | None) -> bytes:
    key = key if key is not None else str(settings.WEBHOOK_SECRET_KEY)
    if not key:
        raise WebhookSecretUnusable("WEBHOOK_SECRET_KEY is not set")
    return key.encode()


def webhook_secret_salt_new() -> str:
    return secrets.token_hex(SALT_BYTES)


def webhook_secret_key_id(key: str | None = None) -> str:
    """A short public fingerprint of the key (default: the current one), stored with each salt
    so a changed key is reported instead of signing with a secret the receiver never had."""
    return hmac.new(_key_bytes(key), _KEY_ID_MESSAGE, hashlib.sha256).hexdigest()[:KEY_ID_CHARS]


def webhook_secret_derive(*, contact_id: int, salt: str, key: str | None = None) -> str:
    """The signing secret of one contact under ``key`` (default: the current key)."""
    message = f"farm-webhook-secret:v1:{contact_id}:{salt}".encode()
    return SECRET_PREFIX + hmac.new(_key_bytes(key), message, hashlib.sha256).hexdigest()


def webhook_secret_recompute(*, contact_id: int, salt: str, key_id: str) -> str:
    """The secret a contact was issued, under the current key or a listed fallback; raises
    ``WebhookSecretUnusable`` when neither is the key it was issued under."""
    if not salt:
        raise WebhookSecretUnusable(
            f"contact {contact_id} has no webhook secret: issue one "
            f"(manage.py webhook_secret_issue {contact_id})"
        )
    for key in (settings.WEBHOOK_SECRET_KEY, *settings.WEBHOOK_SECRET_KEY_FALLBACKS):
        if hmac.compare_digest(webhook_secret_key_id(key), key_id):
            return webhook_secret_derive(contact_id=contact_id, salt=salt, key=key)
    raise WebhookSecretUnusable(
        f"contact {contact_id}'s webhook secret was issued under a WEBHOOK_SECRET_KEY no longer "
        f"configured: list that key in WEBHOOK_SECRET_KEY_FALLBACKS or issue a new secret "
        f"(manage.py webhook_secret_issue {contact_id})"
    )
