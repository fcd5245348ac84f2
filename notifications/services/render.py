"""Rendering with Django templates found through the app template loaders
(``notifications/<name>/subject.txt``, ``body.txt`` and an optional ``body.html``), in the
farm's locale and time zone. A missing template or variable fails the notification with a
clear reason; it never sends a blank message."""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass

from django.conf import settings
from django.template import Context, Engine, TemplateDoesNotExist, TemplateSyntaxError
from django.template.backends.django import get_installed_libraries
from django.utils import timezone, translation

from notifications.services.context import ContextValue
from notifications.states import NotificationReason

TEMPLATE_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
SUBJECT_MAX_CHARS = 500


class RenderError(Exception):
    """Why a notification could not be rendered; ``detail`` reads like
    ``template_missing: notifications/x/body.txt``."""

    def __init__(self, reason: NotificationReason, subject: str) -> None:
        self.reason = reason
        self.detail = f"{reason}: {subject}"
        super().__init__(self.detail)


class _MissingVariable(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _StrictInvalid(str):
    """Django's ``string_if_invalid`` hook: the engine formats it with the missing variable's
    name, which here raises instead (``{% if %}`` and ``{% for %}`` tolerate missing names)."""

    def __contains__(self, item: object) -> bool:
        return True

    def __mod__(self, variable: object) -> str:
        raise _MissingVariable(str(variable))


@dataclass(frozen=True)
class Rendered:
    subject: str
    body: str
    body_html: str


def template_name_validate(name: str) -> None:
    """Template names become paths: letters, digits, ``_ . -`` only (no directories)."""
    if not TEMPLATE_NAME_RE.match(name) or ".." in name:
        raise ValueError(f"invalid notification template name {name!r}")


@functools.cache
def _engine(autoescape: bool, dirs: tuple[str, ...], debug: bool) -> Engine:
    return Engine(
        dirs=list(dirs),
        app_dirs=True,
        autoescape=autoescape,
        debug=debug,
        string_if_invalid=_StrictInvalid("<missing %s>"),
        libraries=get_installed_libraries(),
    )


def _engine_for(autoescape: bool) -> Engine:
    configured = settings.TEMPLATES[0].get("DIRS", [])
    dirs = tuple(str(d) for d in configured) if isinstance(configured, list | tuple) else ()
    return _engine(autoescape, dirs, bool(settings.DEBUG))


def _missing(exc: TemplateDoesNotExist, name: str) -> str:
    return str(exc.args[0]) if exc.args else name


def _render_one(
    name: str, context: dict[str, ContextValue], *, autoescape: bool, optional: bool
) -> str:
    try:
        template = _engine_for(autoescape).get_template(name)
    except TemplateDoesNotExist as exc:
        if optional and (not exc.args or exc.args[0] == name):
            return ""
        raise RenderError(NotificationReason.TEMPLATE_MISSING, _missing(exc, name)) from None
    except TemplateSyntaxError as exc:
        raise RenderError(NotificationReason.TEMPLATE_ERROR, f"{name}: {exc}") from None
    try:
        return template.render(Context(context, autoescape=autoescape))
    except _MissingVariable as exc:
        raise RenderError(NotificationReason.TEMPLATE_VARIABLE_MISSING, exc.name) from None
    except TemplateDoesNotExist as exc:  # an {% include %} of a missing template
        raise RenderError(NotificationReason.TEMPLATE_MISSING, _missing(exc, name)) from None
    except Exception as exc:
        raise RenderError(
            NotificationReason.TEMPLATE_ERROR, f"{name}: {type(exc).__name__}: {exc}"
        ) from None


def notification_render(
    *, template_name: str, context: dict[str, ContextValue], locale: str, time_zone: str
) -> Rendered:
    """Subject (one line), text body and optional HTML body, with dates in ``time_zone`` and
    formats of ``locale``. Raises :class:`RenderError`."""
    prefix = f"notifications/{template_name}"
    try:
        template_name_validate(template_name)
        zone = zoneinfo.ZoneInfo(time_zone)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError) as exc:
        raise RenderError(NotificationReason.TEMPLATE_ERROR, f"{prefix}: {exc}") from None
    with timezone.override(zone), translation.override(locale):
        subject = _render_one(f"{prefix}/subject.txt", context, autoescape=False, optional=False)
        body = _render_one(f"{prefix}/body.txt", context, autoescape=False, optional=False)
        html = _render_one(f"{prefix}/body.html", context, autoescape=True, optional=True)
    subject = " ".join(subject.split())[:SUBJECT_MAX_CHARS]
    if not subject or not body.strip():
        empty = "subject.txt" if not subject else "body.txt"
        raise RenderError(NotificationReason.TEMPLATE_ERROR, f"{prefix}/{empty} rendered empty")
    return Rendered(subject=subject, body=body.strip() + "\n", body_html=html)
