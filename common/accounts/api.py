"""The caller's own API token: ``GET /api/v1/auth/token/`` (metadata, never the key) and
``POST /api/v1/auth/token/rotate/`` (a new key, shown in this answer only; the old key stops
working at once). Not idempotent by ``Idempotency-Key`` on purpose: a stored replay would keep
the key in clear."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common import schema_docs
from common.accounts.selectors import api_token_of_user
from common.accounts.serializers import ApiTokenSerializer, IssuedTokenSerializer
from common.accounts.services import api_token_issue
from common.roles import Need


@schema_docs.API_TOKEN
class ApiTokenApi(APIView):
    """The caller's own token: its metadata, never its key."""

    required_roles = {"get": Need.SIGNED_IN}  # the caller's own token

    @extend_schema(
        responses={
            200: ApiTokenSerializer,
            404: OpenApiResponse(description="not_found: the caller has no token yet"),
        }
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        token = api_token_of_user(user_id=request.user.pk)  # type: ignore[arg-type]
        if token is None:
            raise NotFound("You have no API token yet: POST auth/token/rotate/ issues one.")
        return Response(ApiTokenSerializer(token).data)


@schema_docs.API_TOKEN_ROTATE
class ApiTokenRotateApi(APIView):
    """Issue the caller a new key, shown once."""

    required_roles = {"post": Need.SIGNED_IN}

    @extend_schema(request=None, responses={201: IssuedTokenSerializer})
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Issue the caller a new key (their first, or in place of the current one)."""
        issued = api_token_issue(user=request.user)  # type: ignore[arg-type]
        body = IssuedTokenSerializer(issued.token, context={"key": issued.key}).data
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


urlpatterns = [
    path("auth/token/", ApiTokenApi.as_view(), name="api-token"),
    path("auth/token/rotate/", ApiTokenRotateApi.as_view(), name="api-token-rotate"),
]
