"""API clients signed in with a real token, issued through the token service."""

from __future__ import annotations

from django.contrib.auth.models import User
from rest_framework.test import APIClient

from common.accounts.keys import api_key_digest
from common.accounts.models import ApiToken
from common.accounts.services import api_token_issue


def api_key(user: User) -> str:
    """The user's key: issued once and reused while it is the user's current one (as a
    client holding one token would), issued again after a rotation or revocation."""
    key: str | None = getattr(user, "_test_api_key", None)
    token = ApiToken.objects.filter(user_id=user.pk).first()
    if key is None or token is None or token.digest != api_key_digest(key):
        key = api_token_issue(user=user).key
        user._test_api_key = key  # type: ignore[attr-defined]
    return key


def token_client(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key(user)}")
    return client
