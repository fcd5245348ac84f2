"""Every model of the project's apps names its row readably in the admin (titles, breadcrumbs,
choices, delete pages): never Django's default "<Model> object (n)"."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, date, datetime
from typing import Any

import pytest
from django.apps import apps
from django.db import models

from tests.devices.factories import make_farm

PROJECT_APPS = {
    "common",
    "accounts",
    "devices",
    "scheduler",
    "automation",
    "reminders",
    "notifications",
    "events",
    "alarms",
}
DEFAULT_STR = re.compile(r"^\w+ object \(\w*\)$")
AT = datetime(2026, 11, 29, 11, 59, 7, tzinfo=UTC)


def _sample(field: models.Field[Any, Any]) -> Any:
    """A value of the field's type, for fields that would otherwise be empty."""
    if field.choices:
        return field.choices[0][0]
    samples: list[tuple[type[models.Field[Any, Any]], Any]] = [
        (models.DateTimeField, AT),
        (models.DateField, date(2026, 11, 29)),
        (models.BooleanField, True),
        (models.FloatField, 1.5),
        (models.IntegerField, 6),
        (models.UUIDField, uuid.UUID(int=6)),
        (models.JSONField, True),
        (models.CharField, "key"),
        (models.TextField, "text"),
    ]
    return next((value for kind, value in samples if isinstance(field, kind)), None)


def _build(model: type[models.Model], depth: int = 0) -> models.Model:
    """An unsaved row with a pk, every plain field filled and every foreign key pointing at a
    row built the same way (three levels deep)."""
    row = model(pk=6)
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        if isinstance(field, models.ForeignKey):
            related = field.related_model
            if depth < 3 and related is not model and isinstance(related, type):
                setattr(row, field.name, _build(related, depth + 1))
            continue
        if getattr(row, field.attname) in (None, ""):
            setattr(row, field.attname, _sample(field))
    return row


def _project_models() -> list[type[models.Model]]:
    return [m for m in apps.get_models() if m._meta.app_label in PROJECT_APPS]


def test_the_walk_covers_every_app() -> None:
    assert {m._meta.app_label for m in _project_models()} == PROJECT_APPS


@pytest.mark.parametrize("model", _project_models(), ids=lambda m: m._meta.label)
def test_every_model_names_its_rows_readably(model: type[models.Model]) -> None:
    text = str(_build(model))
    assert text and not DEFAULT_STR.match(text), f"{model._meta.label}: {text!r}"


@pytest.mark.django_db
def test_an_endpoint_and_a_command_read_as_support_says_them() -> None:
    from automation.models import DeviceCommand
    from automation.states import CommandStatus

    kit = make_farm(prefix="str")
    assert str(kit.io1) == "str-relay · io1"
    intent = _build(DeviceCommand)
    intent.target_device_endpoint = kit.io1
    intent.target_serial_number = kit.actuator.serial_number
    intent.target_value, intent.status = True, CommandStatus.APPLIED
    assert str(intent) == "command #6 str-relay · io1 → true (applied)"


NAIVE_PLURAL = re.compile(r"(s|x|ch|sh)s$")  # "bridge processs", "event inboxs"


@pytest.mark.parametrize(
    "model", [*_project_models(), *apps.get_app_config("rollouts").get_models()]
)
def test_every_models_plural_is_english(model: type[models.Model]) -> None:
    plural = str(model._meta.verbose_name_plural)
    assert not NAIVE_PLURAL.search(plural), f"{model._meta.label}: {plural!r}"
    assert plural != "due works"  # due work is uncountable


@pytest.mark.django_db
def test_the_admin_is_named_for_the_product_and_view_site_leads_somewhere(
    support: Any,
) -> None:
    page = support.get("/admin/").content.decode()
    assert "<title>Operations | Farm Automation Core</title>" in page
    assert ">Farm Automation Core</a>" in page and "Django administration" not in page
    view_site = re.search(r'<a href="([^"]+)">View site</a>', page)
    assert view_site is not None and view_site.group(1) == "/api/docs/"
    assert support.get(view_site.group(1)).status_code == 200
    assert ">Event inboxes<" in page and ">Due work<" in page and ">Bridge processes<" in page
