"""The API's one permission class: each view declares, in ``required_roles``, the ``Need`` of
each of its actions (a viewset's action names, an API view's HTTP methods), and
``RoleMatrix`` alone decides from that table. An action with no entry is refused, so a new
route is closed until it is declared (and ``tests/common/test_role_matrix.py`` fails).

Three checks, one table: before the view, the caller must meet the need in at least one
organisation (else 403, or 401 anonymous); on an object, in the object's organisation
(``organization_path``); on a create, in the organisation the body names
(``require_organization``). Rows of organisations the caller cannot read are not found at
all (404), as before (``common.tenancy``)."""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from django.db.models import Model
from django.http import HttpRequest
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from common.roles import Need, roles_meeting
from common.tenancy import OrgScope, organization_scope

if TYPE_CHECKING:  # rest_framework.views reads the settings that name this module
    from rest_framework.views import APIView

# OPTIONS describes a route (DRF's metadata), HEAD is a GET without its body.
_METHOD_ALIASES = {"head": "get"}


def view_need(view: APIView, request: Request) -> Need | None:
    """The need ``view`` declares for this request's action; None: undeclared (refused)."""
    method = (request.method or "GET").lower()
    if method == "options":
        return Need.SIGNED_IN
    table: Mapping[str, Need] = getattr(view, "required_roles", {})
    action = getattr(view, "action", None) or _METHOD_ALIASES.get(method, method)
    return table.get(action)


def need_scope(request: Request | HttpRequest, need: Need) -> OrgScope:
    """The organisations where the caller meets ``need`` (None: every one, a superuser),
    computed once per request and need."""
    cache: dict[Need, OrgScope] = request.__dict__.setdefault("_need_scopes", {})
    if need not in cache:
        user = request.user
        if need is Need.SUPERUSER:
            cache[need] = None if getattr(user, "is_superuser", False) else frozenset()
        else:
            cache[need] = organization_scope(user, roles=roles_meeting(need))
    return cache[need]


def _meets(request: Request, need: Need, organization_id: int | None) -> bool:
    if need in (Need.ANYONE, Need.SIGNED_IN):
        return True
    scope = need_scope(request, need)
    if scope is None:
        return True
    return organization_id is not None and organization_id in scope


class RoleMatrix(BasePermission):
    """Reads the view's ``required_roles``; see the module docstring."""

    message = "Your role in this organisation does not allow this."

    def has_permission(self, request: Request, view: APIView) -> bool:
        need = view_need(view, request)
        if need is Need.ANYONE or not hasattr(view, (request.method or "").lower()):
            return True  # a method the view does not answer: its 405 follows
        if need is None or not getattr(request.user, "is_authenticated", False):
            return False
        if need is Need.SIGNED_IN:
            return True
        scope = need_scope(request, need)
        return scope is None or bool(scope)

    def has_object_permission(self, request: Request, view: APIView, obj: Any) -> bool:
        need = view_need(view, request)
        if need is None:
            return False
        if need in (Need.ANYONE, Need.SIGNED_IN, Need.READ):
            return True  # the view's queryset already holds only readable rows
        return _meets(request, need, object_organization(view, obj))


def object_organization(view: APIView, obj: Model | Mapping[str, Any]) -> int | None:
    """The organisation of a row, or of a create's validated body, through the view's
    ``organization_path`` (``"farm.organization_id"``); a view whose rows reach it some other
    way overrides ``organization_of``."""
    custom = getattr(view, "organization_of", None)
    if custom is not None:
        found: int | None = custom(obj)
        return found
    path: str | None = getattr(view, "organization_path", None)
    if path is None:
        return None
    head, _, rest = path.partition(".")
    value = obj.get(head) if isinstance(obj, Mapping) else getattr(obj, head, None)
    if value is None:
        return None
    found = attrgetter(rest)(value) if rest else value
    return found


def require_organization(request: Request, view: APIView, organization_id: int | None) -> None:
    """A write the body aims at an organisation: the caller must meet the action's need there
    (403; an organisation they cannot read never resolved from the body)."""
    need = view_need(view, request)
    if need is None or not _meets(request, need, organization_id):
        raise PermissionDenied(RoleMatrix.message)


class RoleCheckedWrites:
    """For a ``ModelViewSet``'s own create and update: the organisation the saved row will
    belong to is checked against the action's need before it is written."""

    def perform_create(self, serializer: Any) -> None:
        view: APIView = self  # type: ignore[assignment]  # mixed into a viewset
        target = object_organization(view, serializer.validated_data)
        require_organization(view.request, view, target)
        serializer.save()

    def perform_update(self, serializer: Any) -> None:
        view: APIView = self  # type: ignore[assignment]
        target = _Updated(serializer.instance, serializer.validated_data)
        require_organization(view.request, view, object_organization(view, target))
        serializer.save()


class _Updated(dict[str, Any]):
    """The row as the update will leave it: a changed field from the body, any other read
    from the instance only when asked (a PATCH that moves nothing costs no query)."""

    def __init__(self, instance: Model, changes: dict[str, Any]) -> None:
        super().__init__(changes)
        self.instance = instance

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key) if key in self else getattr(self.instance, key, default)
