"""The OpenAPI schema as a generated client needs it (``SPECTACULAR_SETTINGS``), for every
route, new ones included, with nothing declared per view:

* ``ApiAutoSchema`` names each operation after its resource and action, without the version
  (``farms_create``, ``commands_retry``, ``endpoint_command``), and tags it with its resource;
  a request body's component is ``…Request`` (once), a read-only choice a row may leave blank
  lists the blank value, a bounded number shows its model default as its example (not the
  bound Swagger UI would pick), and the security schemes are the API's own authentication
  classes (``common.accounts.schema``: ``tokenAuth``, ``Authorization: Token <key>``);
* ``error_responses`` adds the one ``Error`` component (``common.errors``' shape) and, on every
  operation, a response for each error status the operation can answer (the rule is in
  docs/api-errors.md, "In the schema"). A status a view declares keeps the view's response;
  one declared with a description alone gets the ``Error`` body.

Each operation's summary and description are the view's own (``<app>/schema_docs.py``).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import FieldDoesNotExist
from django.db.models import NOT_PROVIDED
from django.http import HttpRequest
from django.urls import Resolver404, resolve
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.utils import Direction
from rest_framework.authentication import SessionAuthentication
from rest_framework.fields import ChoiceField, Field
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.serializers import Serializer
from rest_framework.views import APIView
from rest_framework.viewsets import ViewSetMixin

from common.accounts import schema as auth_schemes  # noqa: F401  (registers the schemes)
from common.accounts.authentication import AnonymousRequestThrottle
from common.api import IDEMPOTENCY_HEADER
from common.permissions import view_need
from common.roles import Need

# drf-spectacular's word for each method, added to the id of a route that answers several.
_METHOD_WORDS = {
    "POST": "create",
    "PUT": "update",
    "PATCH": "partial_update",
    "DELETE": "destroy",
}
_PATH_PARAMETER = re.compile(r"\{[^}/]+\}")
AnyField = Field[Any, Any, Any, Any]
Security = dict[str, list[Any]]


class ApiAutoSchema(AutoSchema):
    """``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``. The version prefix is cut by
    ``SCHEMA_PATH_PREFIX``. A viewset's operation is ``<resource>_<action>`` (the path before
    the action's own part, and the viewset's action: ``farms_list``, ``devices_change_status``);
    a plain view's is its URL name, which names ``<resource>-<action>`` already
    (``endpoint-command``). A route answering several methods with one action adds the
    method's word (``_retrieve``, ``_update``). The tag is the path's first part."""

    def get_operation_id(self) -> str:
        action = getattr(self.view, "action", None)
        if isinstance(self.view, ViewSetMixin) and action:
            name = "_".join([*self._resource(action), action])
        else:
            name = self._url_name() or "_".join(self._tokenize_path()) or "root"
        name = name.replace("-", "_")
        if self._methods_sharing_handler() > 1:
            word = self._method_word()
            name = name if name.endswith(f"_{word}") else f"{name}_{word}"
        return name

    def get_tags(self) -> list[str]:
        return self._tokenize_path()[:1] or ["root"]

    def get_serializer_name(self, serializer: Serializer[Any], direction: Direction) -> str:
        """A request body's component ends in ``Request`` once (COMPONENT_SPLIT_REQUEST adds
        it): ``ManualCommandRequestSerializer`` is ``ManualCommandRequest``."""
        name = super().get_serializer_name(serializer, direction)
        if direction == "request" and spectacular_settings.COMPONENT_SPLIT_REQUEST:
            return name.removesuffix("Serializer").removesuffix("Request")
        return name

    def get_auth(self) -> list[Security]:
        """As drf-spectacular's, but a subclass of a class in ``AUTHENTICATION_WHITELIST``
        counts as listed (drf-spectacular matches the class exactly): the API authenticates
        with ``ApiTokenAuthentication``, a ``TokenAuthentication``. Its scheme and Basic's
        are ``common.accounts.schema``'s; the anonymous throttle, listed nowhere, has none."""
        listed = tuple(spectacular_settings.AUTHENTICATION_WHITELIST or ())
        auths: list[Security] = []
        for authenticator in self.view.get_authenticators():
            scheme = OpenApiAuthenticationExtension.get_match(authenticator)
            if (listed and not isinstance(authenticator, listed)) or scheme is None:
                continue
            requirement = scheme.get_security_requirement(self)
            auths += requirement if isinstance(requirement, list) else [requirement]
            names = [scheme.name] if isinstance(scheme.name, str) else scheme.name
            definitions = scheme.get_security_definition(self)
            definitions = [definitions] if isinstance(definitions, dict) else definitions
            for name, definition in zip(names, definitions, strict=True):
                component = ResolvedComponent(
                    name=name,
                    type=ResolvedComponent.SECURITY_SCHEMA,
                    object=authenticator.__class__,
                    schema=definition,
                )
                self.registry.register_on_missing(component)
        if _need(self.view, self.method) is Need.ANYONE:
            auths.append({})
        return auths

    def _map_serializer_field(
        self, field: AnyField, direction: Direction, bypass_extensions: bool = False
    ) -> dict[str, Any]:
        if isinstance(field, ChoiceField) and field.read_only and _blank_in_model(field):
            # DRF drops allow_blank from a model's read-only field, yet the row may hold "":
            # without it in the enum a generated client fails to read the row.
            field.allow_blank = True
        schema: dict[str, Any] = super()._map_serializer_field(field, direction, bypass_extensions)
        if schema.get("type") in ("integer", "number") and "example" not in schema:
            # Swagger UI shows a bounded number at its bound (a priority of -1000): its
            # model default is what a row ordinarily holds.
            default = getattr(_model_field(field), "default", NOT_PROVIDED)
            if isinstance(default, int | float) and not isinstance(default, bool):
                schema["example"] = default
        return schema

    def _resource(self, action: str) -> list[str]:
        """The path's parts without an extra action's own (``commands/{id}/mark-failed/``:
        ``commands``)."""
        tokens = self._tokenize_path()
        url_path = getattr(getattr(self.view, action, None), "url_path", None)
        if url_path:
            tail = [t for t in url_path.split("/") if t]
            if tail and tokens[-len(tail) :] == tail:
                return tokens[: -len(tail)]
        return tokens

    def _url_name(self) -> str | None:
        try:
            return resolve(_PATH_PARAMETER.sub("1", self.path)).url_name
        except Resolver404:
            return None

    def _methods_sharing_handler(self) -> int:
        action_map = getattr(self.view, "action_map", None)
        if isinstance(self.view, ViewSetMixin) and action_map:
            # Not HEAD: DRF adds it to the route's map at its first request, and an id must
            # not depend on whether the route has been called in this process.
            shared = [m for m, a in action_map.items() if a == self.view.action]
            return sum(1 for m in shared if m not in ("head", "options"))
        return sum(1 for m in self.view.allowed_methods if m not in ("HEAD", "OPTIONS"))

    def _method_word(self) -> str:
        if self.method == "GET":
            return "list" if self._is_list_view() else "retrieve"
        return _METHOD_WORDS.get(self.method, self.method.lower())


def _model_field(field: AnyField) -> Any:
    """The model field a serializer field reads, if it reads one of its model's own."""
    model = getattr(getattr(field.parent, "Meta", None), "model", None)
    if model is None or not field.source or "." in field.source:
        return None
    try:
        return model._meta.get_field(field.source)
    except FieldDoesNotExist:
        return None


def _blank_in_model(field: AnyField) -> bool:
    """Whether a serializer field reads a model field with choices that may be blank."""
    model_field = _model_field(field)
    return bool(getattr(model_field, "choices", None) and getattr(model_field, "blank", False))


ERROR_COMPONENT = "Error"
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Every error of the API, whoever raised it (docs/api-errors.md).",
    "properties": {
        "code": {
            "type": "string",
            "description": "A machine code, stable across releases; new codes may be added.",
        },
        "detail": {"type": "string", "description": "One sentence for a person."},
        "fields": {
            "type": "object",
            "additionalProperties": {},
            "description": (
                "Validation errors only (code invalid): the messages per field, nested the "
                "way the input is; non_field_errors holds what belongs to no single field."
            ),
        },
    },
    "required": ["code", "detail"],
}


def _when(status: str) -> str:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return {
        "400": "invalid (fields says which), parse_error (the body is not JSON) or bad_request.",
        "401": "not_authenticated or authentication_failed: no or wrong credentials.",
        "403": "permission_denied: the caller's role does not allow this.",
        "404": "not_found: no such resource or page, or one of another organisation.",
        "413": f"request_too_large: the body is larger than {limit} bytes.",
        "415": "unsupported_media_type: the body is not application/json.",
        "422": f"idempotency_key_reused: the {IDEMPOTENCY_HEADER} was sent with another request.",
        "429": "throttled: too many requests; Retry-After says when to try again.",
    }[status]


def _error_content() -> dict[str, Any]:
    """A fresh copy each time: the YAML rendering would otherwise share it by anchors."""
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}}}


def _error_response(status: str) -> dict[str, Any]:
    response: dict[str, Any] = {"description": _when(status), "content": _error_content()}
    if status == "429":
        retry_after = {"description": "seconds to wait", "schema": {"type": "integer"}}
        response["headers"] = {"Retry-After": retry_after}
    return response


def _route_key(path: str, method: str) -> tuple[str, str]:
    return _PATH_PARAMETER.sub("{}", path), method.upper()


def _views(generator: SchemaGenerator) -> dict[tuple[str, str], APIView]:
    """The view behind each operation, by path (parameters unnamed) and method."""
    views = {}
    for endpoint in generator.endpoints or []:
        path, *_, method, callback = endpoint  # drf-spectacular's also hold the path regex
        views[_route_key(path, method)] = generator.create_view(callback, method)
    return views


def _need(view: APIView, method: str) -> Need | None:
    http = HttpRequest()
    http.method = method
    return view_need(view, Request(http))


def error_statuses(operation: dict[str, Any], view: APIView | None, method: str) -> list[str]:
    """The error statuses ``operation`` can answer (docs/api-errors.md, "In the schema"). No
    view found (not expected): as the API's routes are, signed in and throttled."""
    parameters = operation.get("parameters", [])
    where = {p.get("in") for p in parameters}
    query = {p["name"] for p in parameters if p.get("in") == "query"}
    body = "requestBody" in operation
    headers = {p["name"] for p in parameters if p.get("in") == "header"}
    idempotent = IDEMPOTENCY_HEADER in headers
    filtered = bool(query) and getattr(view, "filterset_class", None) is not None
    paginator = getattr(view, "paginator", None)
    page_parameters = ("page_query_param", "cursor_query_param")
    paged = query & {getattr(paginator, name, "") for name in page_parameters}
    need = _need(view, method) if view is not None else Need.SIGNED_IN
    authenticators = view.get_authenticators() if view is not None else []
    sessions = view is None or any(isinstance(a, SessionAuthentication) for a in authenticators)
    throttled = (
        view is None
        or bool(view.get_throttles())
        or any(isinstance(a, AnonymousRequestThrottle) for a in authenticators)
    )
    statuses = {
        "400": body or idempotent or filtered,
        "401": need is not Need.ANYONE,
        "403": need not in (Need.ANYONE, Need.SIGNED_IN)
        or (need is Need.SIGNED_IN and method not in SAFE_METHODS and sessions),
        "404": "path" in where or bool(paged),
        "413": body,
        "415": body,
        "422": idempotent,
        "429": throttled,
    }
    return [status for status, applies in statuses.items() if applies]


def error_responses(
    result: dict[str, Any], generator: SchemaGenerator, **kwargs: Any
) -> dict[str, Any]:
    """``POSTPROCESSING_HOOKS``: the ``Error`` component, and each operation's error
    responses; an operation that declares a status keeps its own response (a declared error
    status with only a description gets the Error body)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas[ERROR_COMPONENT] = copy.deepcopy(ERROR_SCHEMA)
    views = _views(generator)
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            view = views.get(_route_key(path, method))
            responses: dict[str, Any] = operation.setdefault("responses", {})
            for status in error_statuses(operation, view, method.upper()):
                responses.setdefault(status, _error_response(status))
            for status, response in responses.items():
                # An error a view declares with a description alone is raised and answered
                # in the one shape (common.errors): its body is the Error component.
                if status[:1] in ("4", "5") and "content" not in response:
                    response["content"] = _error_content()
            operation["responses"] = dict(sorted(responses.items()))
    return result
