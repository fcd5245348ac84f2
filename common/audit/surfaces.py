"""The surfaces a configuration change comes through (``common.audit.context`` decides)."""

from django.db import models


class Surface(models.TextChoices):
    API = "api"
    ADMIN = "admin"
    COMMAND = "command"
    SYSTEM = "system"  # no request and no command: a Celery task, beat, a process's loop
