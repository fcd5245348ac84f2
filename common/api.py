"""What every part of the REST API shares: the caller's organisation scope, strict query
parameters, scoped read-only viewsets and idempotent POST.

``idempotent_post`` gives every create an ``Idempotency-Key`` header: the first response is
stored per (user, key) and returned again for a retry, so a gateway that lost a reply cannot
create twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter
from rest_framework import status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from common.models import ApiIdempotencyRecord
from common.tenancy import OrgScope, organization_scope

IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_KEY_MAX_CHARS = 200
IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    str,
    OpenApiParameter.HEADER,
    description="Replaying the same key returns the first response instead of creating again.",
)


def request_scope(request: Request) -> OrgScope:
    return organization_scope(request.user)


ID_MAX = 2**63 - 1  # the largest id a (big) integer primary key can hold


def int_param(request: Request, name: str) -> int | None:
    """An integer query filter; a malformed or out-of-range one is a 400 naming the parameter
    (ASCII digits only: ``"²".isdigit()`` is true, and a huge id overflows the database)."""
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or int(raw) > ID_MAX:
        raise ValidationError({name: "must be an integer id"})
    return int(raw)


def text_param(request: Request, name: str) -> str | None:
    """A text query filter (empty means none); a NUL character, which PostgreSQL refuses in
    text, is a 400 naming the parameter."""
    raw = request.query_params.get(name)
    if not raw:
        return None
    if "\x00" in raw:
        raise ValidationError({name: "must not contain NUL characters"})
    return raw


class _Replay(Exception):
    def __init__(self, record: ApiIdempotencyRecord) -> None:
        self.record = record


def _replayed(record: ApiIdempotencyRecord, request: Request) -> Response:
    if record.method != request.method or record.path != request.path:
        return Response(
            {"detail": f"{IDEMPOTENCY_HEADER} was already used for another request."},
            status=status.HTTP_422_UNPROCESSABLE_ENTITY,
        )
    response = Response(record.response_body, status=record.status_code)
    response["Idempotent-Replayed"] = "true"
    return response


def idempotent_post(request: Request, handle: Callable[[], Response]) -> Response:
    """Run ``handle`` once per (user, Idempotency-Key); later calls get the stored response.
    Two concurrent first calls: one commits, the other rolls back and replays the winner."""
    key = request.headers.get(IDEMPOTENCY_HEADER, "").strip()
    if not key:
        return handle()
    if len(key) > IDEMPOTENCY_KEY_MAX_CHARS:
        raise ValidationError({IDEMPOTENCY_HEADER: "at most 200 characters"})
    user_id = cast(int, request.user.pk)  # the views that call this require a login
    found = ApiIdempotencyRecord.objects.filter(user_id=user_id, key=key).first()
    if found is not None:
        return _replayed(found, request)
    try:
        with transaction.atomic():
            response = handle()
            if response.status_code < 500:
                body = json.loads(JSONRenderer().render(response.data) or b"null")
                try:
                    with transaction.atomic():
                        ApiIdempotencyRecord.objects.create(
                            user_id=user_id,
                            key=key,
                            method=request.method or "POST",
                            path=request.path[:300],
                            status_code=response.status_code,
                            response_body=body,
                        )
                except IntegrityError:
                    winner = ApiIdempotencyRecord.objects.get(user_id=user_id, key=key)
                    raise _Replay(winner) from None
    except _Replay as replay:
        return _replayed(replay.record, request)
    return response


class ScopedViewSet(viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """Rows outside the caller's organisations do not exist for them (404)."""

    def scoped(self, scope: OrgScope) -> QuerySet[Any]:
        raise NotImplementedError

    def get_queryset(self) -> QuerySet[Any]:
        return self.scoped(request_scope(self.request))
