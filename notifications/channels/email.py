"""Email through Django's email backend (SMTP in production, locmem in tests), with the
report CSV attached when the hand-off carried one."""

from __future__ import annotations

import smtplib
from typing import ClassVar

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection

from notifications.channels.base import (
    Delivery,
    NotificationChannel,
    Recipient,
    SendResult,
    channel_register,
)
from notifications.states import Channel, NotificationReason


class EmailChannel(NotificationChannel):
    name: ClassVar[str] = Channel.EMAIL
    carries_attachments: ClassVar[bool] = True

    def unreachable(self, recipient: Recipient) -> tuple[NotificationReason, str] | None:
        if not recipient.email:
            return NotificationReason.NO_ADDRESS, f"{recipient.key} has no email address"
        return None

    def address(self, recipient: Recipient) -> str:
        return recipient.email

    def send(self, delivery: Delivery) -> SendResult:
        message_id = f"<notification-{delivery.notification_id}@{settings.NOTIFY_MAIL_DOMAIN}>"
        message = EmailMultiAlternatives(
            subject=delivery.subject,
            body=delivery.body,
            from_email=settings.NOTIFY_FROM_EMAIL,
            to=[delivery.address],
            # The same Message-ID on every retry lets mail systems drop a duplicate.
            headers={
                "Message-ID": message_id,
                "X-Farm-Notification-Id": str(delivery.notification_id),
            },
            connection=get_connection(fail_silently=False),
        )
        if delivery.body_html:
            message.attach_alternative(delivery.body_html, "text/html")
        for attachment in delivery.attachments:
            message.attach(attachment.filename, attachment.content, attachment.content_type)
        try:
            message.send(fail_silently=False)
        except smtplib.SMTPRecipientsRefused as exc:
            return SendResult.permanent(f"recipient refused: {exc}")
        except smtplib.SMTPResponseException as exc:
            if 500 <= exc.smtp_code < 600:
                return SendResult.permanent(
                    f"SMTP {exc.smtp_code}: {exc.smtp_error!r}", status_code=exc.smtp_code
                )
            return SendResult.transient(
                f"SMTP {exc.smtp_code}: {exc.smtp_error!r}", status_code=exc.smtp_code
            )
        except (smtplib.SMTPException, OSError) as exc:
            return SendResult.transient(f"{type(exc).__name__}: {exc}")
        return SendResult.sent()


channel_register(EmailChannel())
