"""The API's authentication classes (``REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]``):
hashed tokens, Basic (development only) with failures throttled per client address, and a
last entry that throttles anonymous requests before any permission refuses them."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from rest_framework.authentication import (
    BaseAuthentication,
    BasicAuthentication,
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from common.accounts.models import ApiToken
from common.accounts.selectors import api_token_for_key
from common.accounts.services import api_token_used
from common.accounts.throttles import ClientAddressThrottle

AUTH_FAILURE_SCOPE = "auth_failure"
ANONYMOUS_SCOPE = "anon"


class _FailuresThrottled(BaseAuthentication):
    """A client address past ``auth_failure`` refused credentials is answered 429 before its
    next credentials are checked, right or wrong, until the window ends (a guess costs the
    guesser, not the account); requests without this scheme's header are not counted."""

    scheme = b""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.scheme:
            return super().authenticate(request)  # type: ignore[safe-super]
        throttle = ClientAddressThrottle(AUTH_FAILURE_SCOPE)
        throttle.refuse_if_exhausted(request)
        try:
            return super().authenticate(request)  # type: ignore[safe-super]
        except AuthenticationFailed:
            throttle.count(request)
            raise


class ApiTokenAuthentication(_FailuresThrottled, TokenAuthentication):
    """``Authorization: Token <key>`` against the digests of ``ApiToken``."""

    keyword = "Token"
    scheme = b"token"

    def authenticate_credentials(self, key: str) -> tuple[AbstractBaseUser, ApiToken]:
        now = timezone.now()
        token = api_token_for_key(key=key, now=now)
        if token is None:
            raise AuthenticationFailed("Invalid or expired token.")
        if not token.user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        api_token_used(token=token, now=now)
        return token.user, token


class ThrottledBasicAuthentication(_FailuresThrottled, BasicAuthentication):
    """Username and password on every request: for development (the production settings
    leave it out), with failures throttled like tokens."""

    scheme = b"basic"


class AnonymousRequestThrottle(BaseAuthentication):
    """Last in the list, so reached only by a request no authenticator accepted: counts it
    against ``anon`` per client address (429 past the rate) and leaves it anonymous."""

    def authenticate(self, request: Request) -> None:
        ClientAddressThrottle(ANONYMOUS_SCOPE).count_or_refuse(request)
        return None
