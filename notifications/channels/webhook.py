"""Signed webhooks: POST JSON to the contact's URL with ``X-Farm-Signature: t=<unix>,v1=<hex>``
(HMAC-SHA256 with the contact's secret over ``<t>.<body>``; the secret is recomputed from its
salt, never stored: ``notifications.webhook_secrets``), a timeout, and a verdict on what to
retry: network errors, 5xx and 429 (honouring Retry-After) are transient; other 4xx and
redirects are permanent. It connects only to an address ``notifications.destinations`` checked
for this send (the host name is resolved once), with the TLS server name and certificate check
and the Host header of the URL's host name; a refused destination fails at once
(``destination_forbidden``)."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import ssl
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import cache
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
from notifications.destinations import (
    WebhookDestination,
    WebhookDestinationForbidden,
    webhook_connect,
    webhook_destination_resolve,
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


class PinnedHTTPConnection(http.client.HTTPConnection):
    """HTTP to one of the destination's checked addresses; the host name is only what the
    request names (the Host header), never resolved again. A redirect is an answer like any
    other: never followed (the POST would silently become a GET elsewhere)."""

    def __init__(self, destination: WebhookDestination, *, timeout_s: float) -> None:
        super().__init__(destination.host, destination.port, timeout=timeout_s)
        self.destination = destination
        self.timeout_s = timeout_s

    def connect(self) -> None:
        self.sock = webhook_connect(self.destination, self.timeout_s)


class PinnedHTTPSConnection(PinnedHTTPConnection):
    """HTTPS the same way: TLS over the connection to the checked address, with the URL's host
    name as the server name and the name the certificate must match."""

    default_port = http.client.HTTPS_PORT

    def __init__(
        self, destination: WebhookDestination, *, timeout_s: float, context: ssl.SSLContext
    ) -> None:
        super().__init__(destination, timeout_s=timeout_s)
        self.tls_context = context

    def connect(self) -> None:
        super().connect()
        self.sock = self.tls_context.wrap_socket(self.sock, server_hostname=self.destination.host)


@cache
def tls_context() -> ssl.SSLContext:
    """The system's trust store, with certificate and host name checks (created once)."""
    return ssl.create_default_context()


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
        try:
            destination = webhook_destination_resolve(delivery.address)
        except WebhookDestinationForbidden as exc:
            return SendResult.permanent(str(exc), reason=NotificationReason.DESTINATION_FORBIDDEN)
        except OSError as exc:  # the name does not resolve (now)
            return SendResult.transient(f"network error: {type(exc).__name__}: {exc}")
        body = json.dumps(_payload(delivery), cls=DjangoJSONEncoder, sort_keys=True).encode()
        headers = _headers(delivery, secret, body)
        timeout_s = float(settings.NOTIFY_WEBHOOK_TIMEOUT_S)
        return _post(destination, body=body, headers=headers, timeout_s=timeout_s)


def _headers(delivery: Delivery, secret: str, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "farm-core-notifications/1",
        "Connection": "close",
        SIGNATURE_HEADER: webhook_signature_header(secret, int(time.time()), body),
        "X-Farm-Notification-Id": str(delivery.notification_id),
        "X-Farm-Attempt": str(delivery.attempt),
    }


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


def _post(
    destination: WebhookDestination, *, body: bytes, headers: dict[str, str], timeout_s: float
) -> SendResult:
    connection = _connection(destination, timeout_s)
    try:
        connection.request("POST", destination.target, body=body, headers=headers)
        response = connection.getresponse()
        text = response.read(ERROR_BODY_MAX_CHARS)
    except (http.client.HTTPException, OSError) as exc:  # timeouts and TLS errors included
        return SendResult.transient(f"network error: {type(exc).__name__}: {exc}")
    finally:
        connection.close()
    return _verdict(response.status, text, response.getheader("Retry-After"))


def _connection(destination: WebhookDestination, timeout_s: float) -> PinnedHTTPConnection:
    if destination.scheme == "https":
        return PinnedHTTPSConnection(destination, timeout_s=timeout_s, context=tls_context())
    return PinnedHTTPConnection(destination, timeout_s=timeout_s)


def _verdict(code: int, text: bytes, retry_after: str | None) -> SendResult:
    if 200 <= code < 300:
        return SendResult.sent(code)
    error = f"HTTP {code}: {text.decode('utf-8', 'replace')}".strip()
    if code >= 500 or code == 429:
        return SendResult.transient(
            error, status_code=code, retry_after_s=_retry_after_s(retry_after)
        )
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
