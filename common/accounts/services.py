"""Issuing, rotating and revoking API tokens, and recording their use. A key exists in clear
only in the value returned to the caller; the table keeps its prefix and digest."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from common.accounts.keys import api_key_digest, api_key_new, api_key_prefix
from common.accounts.models import ApiToken
from common.audit.writes import audited_update

# A use is written back at most this often per token: one UPDATE a minute, not per request.
LAST_USED_RESOLUTION_S = 60.0


@dataclass(frozen=True)
class IssuedToken:
    """The stored row and the key, which nothing can show again."""

    token: ApiToken
    key: str


def api_token_expiry(*, now: datetime) -> datetime | None:
    """``API_TOKEN_TTL_DAYS`` after ``now``; 0 means the token never expires."""
    days = float(getattr(settings, "API_TOKEN_TTL_DAYS", 0))
    return now + timedelta(days=days) if days > 0 else None


def api_token_issue(*, user: AbstractBaseUser, now: datetime | None = None) -> IssuedToken:
    """A new key for ``user``; the user's previous key, if any, stops working in the same
    transaction (this is rotation). Two concurrent calls leave one of the two keys valid."""
    now = now or timezone.now()
    key = api_key_new()
    fields = {
        "prefix": api_key_prefix(key),
        "digest": api_key_digest(key),
        "created_at": now,
        "last_used_at": None,
        "expires_at": api_token_expiry(now=now),
    }
    with transaction.atomic():
        if not audited_update(ApiToken.objects.filter(user_id=user.pk), **fields):
            try:
                with transaction.atomic():
                    ApiToken.objects.create(user_id=user.pk, **fields)
            except IntegrityError:  # a concurrent first issue won: replace its key
                audited_update(ApiToken.objects.filter(user_id=user.pk), **fields)
        token = ApiToken.objects.get(user_id=user.pk)
    return IssuedToken(token=token, key=key)


def api_token_revoke(*, user: AbstractBaseUser) -> bool:
    """The user's key stops working; False when they had none."""
    deleted, _ = ApiToken.objects.filter(user_id=user.pk).delete()
    return bool(deleted)


def api_token_used(*, token: ApiToken, now: datetime | None = None) -> None:
    """Record a use, at most once per ``LAST_USED_RESOLUTION_S`` per token."""
    now = now or timezone.now()
    last = token.last_used_at
    if last is not None and (now - last).total_seconds() < LAST_USED_RESOLUTION_S:
        return
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
