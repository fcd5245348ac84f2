"""Finding the token a presented key belongs to."""

from __future__ import annotations

import hmac
from datetime import datetime

from common.accounts.keys import api_key_digest, api_key_prefix
from common.accounts.models import ApiToken


def api_token_for_key(*, key: str, now: datetime) -> ApiToken | None:
    """The live token whose digest matches ``key``, with its user; None for an unknown, wrong
    or expired key. The prefix only narrows the rows (it is not secret: a known prefix leaves
    ~208 random bits); the digest is compared in constant time."""
    digest = api_key_digest(key).encode()
    found = None
    for candidate in ApiToken.objects.select_related("user").filter(prefix=api_key_prefix(key)):
        if hmac.compare_digest(candidate.digest.encode(), digest):
            found = candidate
    if found is None or (found.expires_at is not None and found.expires_at <= now):
        return None
    return found


def api_token_of_user(*, user_id: int) -> ApiToken | None:
    return ApiToken.objects.filter(user_id=user_id).first()
