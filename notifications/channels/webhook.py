"""Signed webhooks: POST JSON to the contact's URL with ``X-Farm-Signature: t=<unix>,v1=<hex>``
(HMAC-SHA256 with the contact's secret over ``<t>.<body>``; the secret is recomputed from its
salt, never stored: ``notifications.webhook_secrets``), a timeout, and a verdict on what to
retry: network errors, 5xx and 429 (honouring Retry-After) are transient; other 4xx and
redirects are permanent."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder

from notifications.channels.base import (
    Delivery,
    NotificationChannel,
    Recipient,
    SendResult,
    channel_register,
)
from notifications.models import ExternalContact
from notifications.states import Channel, NotificationReason
from notifications.webhook_secrets import WebhookSecretUnusable, webhook_secret_recompute

SIGNATURE_HEADER = "X-Farm-Signature"
ERROR_BODY_MAX_CHARS = 500


def webhook_signature(secret: str, timestamp: int, body: bytes) -> str:
    """The v1 signature: hex HMAC-SHA256 over ``<timestamp>.<body>``."""
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def webhook_signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={webhook_signature(secret, timestamp, body)}"


def webhook_signature_verify(
    secret: str, header: str, body: bytes, *, now: float | None = None, tolerance_s: float = 300
) -> bool:
    """What a receiver does (and the tests' server): parse, check the age, compare in constant
    time."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
        given = parts["v1"]
    except (KeyError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(given, webhook_signature(secret, timestamp, body))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error (the POST would silently become a GET elsewhere)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


class WebhookChannel(NotificationChannel):
    name: ClassVar[str] = Channel.WEBHOOK

    def unreachable(self, recipient: Recipient) -> tuple[NotificationReason, str] | None:
        if not recipient.webhook_url or not recipient.has_webhook_secret:
            return NotificationReason.NO_ADDRESS, f"{recipient.key} has no webhook URL and secret"
        return None

    def address(self, recipient: Recipient) -> str:
        return recipient.webhook_url

    def send(self, delivery: Delivery) -> SendResult:
        if urlsplit(delivery.address).scheme not in {"http", "https"}:
            return SendResult.permanent(f"not an http(s) URL: {delivery.address!r}")
        if delivery.contact_id is None:
            return SendResult.permanent(
                "webhooks go to external contacts only", reason=NotificationReason.RECIPIENT_GONE
            )
        issued = (
            ExternalContact.objects.filter(pk=delivery.contact_id)
            .values_list("webhook_secret_salt", "webhook_secret_key_id")
            .first()
        )
        if issued is None:
            return SendResult.permanent(
                "the contact is gone", reason=NotificationReason.RECIPIENT_GONE
            )
        try:
            secret = webhook_secret_recompute(
                contact_id=delivery.contact_id, salt=issued[0], key_id=issued[1]
            )
        except WebhookSecretUnusable as exc:
            return SendResult.permanent(str(exc), reason=NotificationReason.NO_ADDRESS)
        body = json.dumps(_payload(delivery), cls=DjangoJSONEncoder, sort_keys=True).encode()
        request = urllib.request.Request(
            delivery.address,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": "farm-core-notifications/1",
                SIGNATURE_HEADER: webhook_signature_header(secret, int(time.time()), body),
                "X-Farm-Notification-Id": str(delivery.notification_id),
                "X-Farm-Attempt": str(delivery.attempt),
            },
        )
        return _post(request, timeout_s=float(settings.NOTIFY_WEBHOOK_TIMEOUT_S))


def _payload(delivery: Delivery) -> dict[str, Any]:
    return {
        "notification_id": delivery.notification_id,
        "source_key": delivery.source_key,
        "recipient": delivery.recipient_key,
        "farm_id": delivery.farm_id,
        "template": delivery.template_name,
        "subject": delivery.subject,
        "body": delivery.body,
        "context": delivery.context,
    }


def _post(request: urllib.request.Request, *, timeout_s: float) -> SendResult:
    try:
        with _opener.open(request, timeout=timeout_s) as response:
            response.read(ERROR_BODY_MAX_CHARS)
            return SendResult.sent(response.status)
    except urllib.error.HTTPError as exc:
        return _http_error(exc)
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        return SendResult.transient(f"network error: {type(reason).__name__}: {reason}")
    except (http.client.HTTPException, OSError) as exc:
        return SendResult.transient(f"network error: {type(exc).__name__}: {exc}")


def _http_error(exc: urllib.error.HTTPError) -> SendResult:
    code = exc.code
    try:
        text = exc.read(ERROR_BODY_MAX_CHARS).decode("utf-8", "replace")
    except Exception:
        text = ""
    error = f"HTTP {code}: {text}".strip()
    if code >= 500 or code == 429:
        retry_after = _retry_after_s(exc.headers.get("Retry-After") if exc.headers else None)
        return SendResult.transient(error, status_code=code, retry_after_s=retry_after)
    return SendResult.permanent(error, status_code=code)


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


channel_register(WebhookChannel())
