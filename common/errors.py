"""One error shape for the whole API (docs/api-errors.md), whatever raised it: DRF's own
exceptions, Django's 400/403/404/500 handlers on ``/api/`` paths, a body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` (413):

    {"code": "invalid", "detail": "Invalid input: name.", "fields": {"name": ["..."]}}

``code`` is a machine code (DRF's exception codes plus ours), ``detail`` a sentence for people,
``fields`` (validation errors only) the messages per field, nested as the input is. An
unexpected exception is left to Django, which logs it, and is answered by ``server_error``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

API_PREFIX = "/api/"


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"
    default_detail = "The request body is too large."


class BadRequest(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "bad_request"
    default_detail = "The request cannot be processed."


class Conflict(exceptions.APIException):
    """The resource is in no state for the move asked."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "The resource is in no state for this request."


class BrokerUnavailable(exceptions.APIException):
    """The MQTT broker did not confirm a device login change; nothing was changed here, the
    request may be retried."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "broker_unavailable"
    default_detail = (
        "The MQTT broker did not confirm the device's login; nothing was changed, try again."
    )


def error_body(code: str, detail: str, fields: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "detail": detail}
    if fields is not None:
        body["fields"] = fields
    return body


def _too_large() -> RequestTooLarge:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return RequestTooLarge(f"The request body is larger than {limit} bytes.")


def _validation_body(exc: exceptions.ValidationError) -> dict[str, Any]:
    detail: Any = exc.detail
    fields: dict[str, Any] = detail if isinstance(detail, dict) else {"non_field_errors": detail}
    named = [str(name) for name in fields if name != "non_field_errors"]
    if named:
        return error_body("invalid", f"Invalid input: {', '.join(named)}.", fields)
    messages = fields.get("non_field_errors") or ["Invalid input."]
    first = messages[0] if isinstance(messages, list) and messages else messages
    return error_body("invalid", str(first), fields)


def _code(exc: exceptions.APIException) -> str:
    codes = exc.get_codes()
    return codes if isinstance(codes, str) else exc.default_code


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """REST_FRAMEWORK["EXCEPTION_HANDLER"]: DRF's handler (status, headers, rollback) with the
    body in the one shape. None for what no client caused, so Django logs it as a 500."""
    if isinstance(exc, RequestDataTooBig):
        exc = _too_large()
    elif isinstance(exc, SuspiciousOperation):
        exc = BadRequest(str(exc) or BadRequest.default_detail)
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = _validation_body(exc)
    elif isinstance(exc, exceptions.APIException):
        response.data = error_body(_code(exc), str(exc.detail))
    else:  # Django's Http404 and PermissionDenied, which DRF answered
        code = "not_found" if response.status_code == 404 else "permission_denied"
        detail = response.data.get("detail", "") if isinstance(response.data, dict) else ""
        response.data = error_body(code, str(detail))
    return response


def _on_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler400``: a request Django refused before any view (a body too large, too many
    fields, a bad host header)."""
    if not _on_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        too_large = _too_large()
        return JsonResponse(error_body(too_large.default_code, str(too_large.detail)), status=413)
    return JsonResponse(error_body("bad_request", BadRequest.default_detail), status=400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _on_api(request):
        return defaults.permission_denied(request, exception)
    detail = "You do not have permission to perform this action."
    return JsonResponse(error_body("permission_denied", detail), status=403)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _on_api(request):
        return defaults.page_not_found(request, exception)
    return JsonResponse(
        error_body("not_found", f"No API resource at {request.path[:200]}."), status=404
    )


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: the exception is logged by Django; the client learns only that it
    failed on our side."""
    if not _on_api(request):
        return defaults.server_error(request)
    detail = "The server failed to answer this request; it has been logged."
    return JsonResponse(error_body("server_error", detail), status=500)
