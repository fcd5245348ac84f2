"""What every part of the REST API shares: the caller's organisation scope and the
organisations they may write for, scoped viewsets and idempotent POST (query filters are
FilterSets built from ``common.filters``).

``idempotent_post`` gives every create an ``Idempotency-Key`` header: the first response is
stored per (user, key) with a hash of the request and returned again for a retry of the same
request, so a gateway that lost a reply cannot create twice; the same key with another method,
path or body is a 422. A key counts for ``API_IDEMPOTENCY_TTL_S`` (24 h); beat prunes older
records (``idempotency_records_prune``).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import QueryDict
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.fields import empty
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from common.models import ApiIdempotencyRecord
from common.tenancy import OrgScope, organization_scope

IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_KEY_MAX_CHARS = 200
IDEMPOTENCY_PRUNE_BATCH = 1000  # rows per DELETE
IDEMPOTENCY_PRUNE_MAX_BATCHES = 50  # per prune run: the next run takes the rest
IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    str,
    OpenApiParameter.HEADER,
    description=(
        "Repeating the same request with the same key within API_IDEMPOTENCY_TTL_S (24 hours "
        "by default) returns the first response instead of creating again; the key with a "
        "different method, path or body is a 422."
    ),
)


def request_scope(request: Request) -> OrgScope:
    return organization_scope(request.user)


class IdempotencyKeyReused(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"
    default_detail = (
        f"{IDEMPOTENCY_HEADER} was already used for a different request (method, path or "
        "body); send a new key for a new request."
    )


def request_hash(request: Request) -> str:
    """sha256 over the method, the path and the body in canonical form (keys sorted, compact),
    so the same JSON sent with other spacing or key order is the same request."""
    data = request.data
    if isinstance(data, QueryDict):
        data = {name: data.getlist(name) for name in data}
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    digest = hashlib.sha256()
    for part in (request.method or "POST", request.path, body):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    return digest.hexdigest()


def _idempotency_cutoff(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.API_IDEMPOTENCY_TTL_S)


class _Replay(Exception):
    def __init__(self, record: ApiIdempotencyRecord) -> None:
        self.record = record


def _replayed(record: ApiIdempotencyRecord, request: Request, fingerprint: str) -> Response:
    """The stored response, if this is the request it answered (a record from before hashes
    were kept is compared on method and path only)."""
    if record.method != request.method or record.path != request.path[:300]:
        raise IdempotencyKeyReused()
    if record.request_hash and record.request_hash != fingerprint:
        raise IdempotencyKeyReused()
    response = Response(record.response_body, status=record.status_code)
    response["Idempotent-Replayed"] = "true"
    return response


def idempotent_post(
    request: Request,
    handle: Callable[[], Response],
    stored: Callable[[Any], Any] | None = None,
) -> Response:
    """Run ``handle`` once per (user, Idempotency-Key); later calls with the same request get
    the stored response. Two concurrent first calls: one commits, the other rolls back and
    replays the winner (or is a 422 if its request differs). ``stored`` maps the response
    body to what is kept for replays: a secret shown once (a device's password) is left out
    of the record, so a replay never shows it again."""
    key = request.headers.get(IDEMPOTENCY_HEADER, "").strip()
    if not key:
        return handle()
    if len(key) > IDEMPOTENCY_KEY_MAX_CHARS:
        raise ValidationError({IDEMPOTENCY_HEADER: "at most 200 characters"})
    user_id = cast(int, request.user.pk)  # the views that call this require a login
    fingerprint = request_hash(request)
    mine = ApiIdempotencyRecord.objects.filter(user_id=user_id, key=key)
    mine.filter(created_at__lt=_idempotency_cutoff(timezone.now())).delete()  # expired: new
    found = mine.first()
    if found is not None:
        return _replayed(found, request, fingerprint)
    try:
        with transaction.atomic():
            response = handle()
            if response.status_code < 500:
                body = json.loads(JSONRenderer().render(response.data) or b"null")
                if stored is not None:
                    body = stored(body)
                try:
                    with transaction.atomic():
                        ApiIdempotencyRecord.objects.create(
                            user_id=user_id,
                            key=key,
                            method=request.method or "POST",
                            path=request.path[:300],
                            request_hash=fingerprint,
                            status_code=response.status_code,
                            response_body=body,
                        )
                except IntegrityError:
                    winner = ApiIdempotencyRecord.objects.get(user_id=user_id, key=key)
                    raise _Replay(winner) from None
    except _Replay as replay:
        return _replayed(replay.record, request, fingerprint)
    return response


ViewMethod = Callable[..., Response]


def idempotent(
    *,
    request: object = empty,
    responses: object = empty,
    stored: Callable[[Any], Any] | None = None,
) -> Callable[[ViewMethod], ViewMethod]:
    """A POST view method run through ``idempotent_post``, its schema naming the
    Idempotency-Key header: every create and POST action gets both from this one place.
    Above ``@action``: drf-spectacular keeps the schema in the action's kwargs."""
    request_body = request  # the name ``request`` is the view's argument below

    def wrap(method: ViewMethod) -> ViewMethod:
        @functools.wraps(method)
        def view(self: object, request: Request, *args: object, **kwargs: object) -> Response:
            return idempotent_post(
                request, lambda: method(self, request, *args, **kwargs), stored=stored
            )

        schema = extend_schema(
            request=request_body, responses=responses, parameters=[IDEMPOTENCY_PARAMETER]
        )
        return schema(view)

    return wrap


def idempotency_records_prune(*, now: datetime, batch: int = IDEMPOTENCY_PRUNE_BATCH) -> int:
    """Delete records older than ``API_IDEMPOTENCY_TTL_S``, oldest first, in bounded batches
    (at most ``IDEMPOTENCY_PRUNE_MAX_BATCHES`` per call); the number deleted."""
    expired = ApiIdempotencyRecord.objects.filter(created_at__lt=_idempotency_cutoff(now))
    deleted = 0
    for _ in range(IDEMPOTENCY_PRUNE_MAX_BATCHES):
        ids = list(expired.order_by("created_at").values_list("pk", flat=True)[:batch])
        if ids:
            deleted += ApiIdempotencyRecord.objects.filter(pk__in=ids).delete()[0]
        if len(ids) < batch:
            break
    return deleted


# The headers of an answer that shows a secret once (a device's password, a webhook's key).
NO_STORE = {"Cache-Control": "no-store"}


def secret_blanked(*path: str) -> Callable[[Any], Any]:
    """A ``stored=`` for ``idempotent``: the body with the value at ``path`` (a secret shown
    once) as None, so a replay never shows it; a body without it is kept as it is."""

    def blank(body: Any, rest: tuple[str, ...]) -> Any:
        if not isinstance(body, dict) or rest[0] not in body:
            return body
        inner = None if len(rest) == 1 else blank(body[rest[0]], rest[1:])
        return {**body, rest[0]: inner}

    return lambda body: blank(body, path)


def valid_data(serializer: Any) -> dict[str, Any]:
    """The serializer's validated data, or the 400 with its field errors."""
    serializer.is_valid(raise_exception=True)
    data: dict[str, Any] = serializer.validated_data
    return data


class ScopedViewSet(viewsets.ReadOnlyModelViewSet):  # type: ignore[type-arg]
    """Rows outside the caller's organisations do not exist for them (404)."""

    def scoped(self, scope: OrgScope) -> QuerySet[Any]:
        raise NotImplementedError

    def write_context(self) -> dict[str, Any]:
        """A write serializer's context: the caller's scope, so related rows of another
        organisation do not resolve."""
        return {**self.get_serializer_context(), "scope": request_scope(self.request)}

    def get_queryset(self) -> QuerySet[Any]:
        return self.scoped(request_scope(self.request))
