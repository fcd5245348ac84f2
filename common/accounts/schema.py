"""How the OpenAPI schema names the API's credentials: the token scheme (``tokenAuth``) a
generated client and Swagger UI's Authorize send, and Basic (development only). The classes
register themselves with drf-spectacular when this module is imported (``common.schema``
imports it); ``ApiAutoSchema.get_auth`` lets these subclasses of DRF's classes through."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

from common.accounts.authentication import ApiTokenAuthentication

TOKEN_SCHEME = "tokenAuth"
# The header's value as the scheme describes it: a client reads the prefix from here.
TOKEN_FORMAT = f"{ApiTokenAuthentication.keyword} <key>"


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """An API key in the Authorization header, its value the keyword, a space and the key
    (OpenAPI 3.0's bearer scheme would send ``Bearer``, which the API does not take)."""

    target_class = "common.accounts.authentication.ApiTokenAuthentication"
    name = TOKEN_SCHEME
    priority = 1  # before drf-spectacular's own scheme for TokenAuthentication's subclasses

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": (
                f"`{TOKEN_FORMAT}`: the word {ApiTokenAuthentication.keyword}, a space, then "
                "the key. POST /api/v1/auth/token/rotate/ (signed in) or `manage.py api_token "
                "<username>` issues a key; it is shown once."
            ),
        }


class ThrottledBasicScheme(OpenApiAuthenticationExtension):
    """Username and password (the development settings only)."""

    target_class = "common.accounts.authentication.ThrottledBasicAuthentication"
    name = "basicAuth"
    priority = 1

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "basic"}


AUTH_SCHEMES = (ApiTokenScheme, ThrottledBasicScheme)
