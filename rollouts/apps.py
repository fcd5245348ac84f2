from __future__ import annotations

from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "rollouts"
    verbose_name = "Fleet rollouts"
