"""Which surface a change comes through, and who made it. A request's surface is set by
``AuditSurfaceMiddleware`` (the admin's URLs or the API's), a management command's by
``command_line_execute`` (``manage.py``); anything else, a Celery task or a process's loop,
is the system.

The actor is read from the request when the entry is written, not when the request arrives:
the REST framework authenticates a token in the view, after every middleware has run, and
sets the user on the request then (django-auditlog's own middleware reads it too early and
would record an API token's changes with no actor)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from common.audit.surfaces import Surface


@dataclass(frozen=True)
class AuditContext:
    surface: Surface
    request: HttpRequest | None = None
    command: str = ""


_SYSTEM = AuditContext(Surface.SYSTEM)
_current: ContextVar[AuditContext] = ContextVar("audit_context", default=_SYSTEM)


@contextmanager
def audit_context(context: AuditContext) -> Iterator[None]:
    token = _current.set(context)
    try:
        yield
    finally:
        _current.reset(token)


def entry_context() -> dict[str, Any]:
    """The columns of an entry that the context decides: surface, actor, address, command."""
    context = _current.get()
    found: dict[str, Any] = {"surface": context.surface}
    if context.command:
        found["additional_data"] = {"command": context.command}
    request = context.request
    if request is None:
        return found
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        found["actor"] = user
        found["actor_email"] = getattr(user, "email", None) or None
    found["remote_addr"] = request.META.get("REMOTE_ADDR") or None
    return found


class AuditSurfaceMiddleware:
    """Marks every change a request makes with its surface: the admin's pages, or the API."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self._admin_prefix: str | None = None

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self._admin_prefix is None:
            self._admin_prefix = reverse("admin:index")
        admin = request.path.startswith(self._admin_prefix)
        surface = Surface.ADMIN if admin else Surface.API
        with audit_context(AuditContext(surface, request)):
            return self.get_response(request)


def command_context(argv: Sequence[str]) -> AbstractContextManager[None]:
    """The context a management command runs in: surface ``command``, and its name."""
    name = argv[1] if len(argv) > 1 else "help"
    return audit_context(AuditContext(Surface.COMMAND, command=name))


def command_line_execute(argv: Sequence[str]) -> None:
    """``manage.py``'s entry: Django's command line, in ``command_context``."""
    from django.core.management import execute_from_command_line

    with command_context(argv):
        execute_from_command_line(list(argv))
