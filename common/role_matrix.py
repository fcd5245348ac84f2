"""The role matrix as a table: every route of the URL conf served by the REST framework,
each HTTP method it answers, the action it runs and the ``Need`` its view declares
(``common.permissions``). docs/security.md prints it (``manage.py
role_matrix``) and ``tests/common/test_role_matrix.py`` walks it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver

from common.permissions import RoleMatrix
from common.roles import ROLES_MEETING, Need

_SKIPPED_METHODS = {"options", "head"}  # OPTIONS: any signed-in caller; HEAD follows GET


@dataclass(frozen=True)
class Route:
    path: str  # as written in the URL conf, e.g. "api/v1/farms/<pk>/"
    name: str  # the URL name, e.g. "farm-detail"
    method: str  # upper case
    action: str  # the viewset action, or the method for an API view
    view: type[Any]
    need: Need | None  # None: not declared (refused, and a failing test)
    kwargs: tuple[str, ...]  # the path's parameters


def _url_patterns_flat(patterns: list[Any], prefix: str) -> Iterator[tuple[str, URLPattern]]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _url_patterns_flat(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry


def _clean(path: str) -> str:
    """A router's regex (``^farms/(?P<pk>[^/.]+)/$``) as a path (``farms/<pk>/``)."""
    import re

    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"<\1>", path)
    return path.replace("^", "").replace("$", "").replace("\\", "")


def api_routes() -> list[Route]:
    """Every (route, method) the REST framework answers, in URL-conf order."""
    from rest_framework.views import APIView

    routes: list[Route] = []
    for raw, pattern in _url_patterns_flat(get_resolver().url_patterns, ""):
        view = getattr(pattern.callback, "cls", None)
        if view is None or not issubclass(view, APIView):
            continue  # the Django admin, /metrics and /health keep their own checks
        actions: dict[str, str] | None = getattr(pattern.callback, "actions", None)
        if actions is None:
            methods = [m for m in view.http_method_names if hasattr(view, m)]
            actions = {m: m for m in methods}
        table = getattr(view, "required_roles", {})
        for method, action in actions.items():
            if method in _SKIPPED_METHODS:
                continue
            routes.append(
                Route(
                    path=_clean(raw),
                    name=pattern.name or "",
                    method=method.upper(),
                    action=action,
                    view=view,
                    need=table.get(action),
                    kwargs=tuple(pattern.pattern.regex.groupindex),
                )
            )
    return routes


def uses_role_matrix(view: type[Any]) -> bool:
    return any(issubclass(k, RoleMatrix) for k in getattr(view, "permission_classes", ()))


_WHO = {
    Need.ANYONE: "anyone",
    Need.SIGNED_IN: "anyone signed in (own rows)",
    Need.SUPERUSER: "superuser",
}


def who(need: Need | None) -> str:
    """The roles that meet ``need``, as docs/security.md names them."""
    if need is None:
        return "nobody (undeclared)"
    if need in _WHO:
        return _WHO[need]
    order = ("viewer", "operator", "admin", "gateway")
    return ", ".join(r for r in order if r in ROLES_MEETING[need])


def matrix_markdown() -> str:
    """docs/security.md's table: one row per route and method."""
    lines = ["| method | route | action | needs | roles allowed |", "|---|---|---|---|---|"]
    for route in api_routes():
        need = "—" if route.need is None else route.need.value
        lines.append(
            f"| {route.method} | `/{route.path}` | {route.action} | {need} | {who(route.need)} |"
        )
    return "\n".join(lines) + "\n"
