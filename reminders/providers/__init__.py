"""Reminder source providers. Each module here (other than ``base``) registers one source
type's :class:`~reminders.providers.base.ReminderProvider` when imported; :func:`providers_load`
imports them all at app start, so a new source type is a new module and nothing else."""

from __future__ import annotations

import importlib
import pkgutil


def providers_load() -> list[str]:
    """Import every provider module of this package (idempotent); their names."""
    loaded = []
    for module in pkgutil.iter_modules(__path__):
        if module.name == "base" or module.name.startswith("_"):
            continue
        importlib.import_module(f"{__name__}.{module.name}")
        loaded.append(module.name)
    return loaded
