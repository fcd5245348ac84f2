"""Compact list columns, so a list's key columns fit a 1400 px screen beside the menu and the
filters: a time as ``12-05 13:00:59`` (the year dropped: a list is about now) under a
short header, sortable by its field."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db.models import Model

SHORT_TIME = "%m-%d %H:%M:%S"


def short_time(value: datetime | None) -> str:
    return "" if value is None else f"{value:{SHORT_TIME}}"


def time_column(field: str, header: str) -> Callable[[Any, Model], str]:
    """A list column of ``field`` (a datetime) in short, headed ``header``: assign it to an
    attribute of the admin and name that attribute in ``list_display``."""

    @admin.display(description=header, ordering=field)
    def column(model_admin: Any, obj: Model) -> str:
        return short_time(getattr(obj, field))

    column.__name__ = f"{field}_short"
    return column
