"""Project configuration: env-driven settings, the Celery app with one queue per stage,
the beat schedule declared in code, and URLs."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
