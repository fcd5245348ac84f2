"""Development: the product's settings plus development tooling. The default of
``manage.py``, ``celery -A config``, ``make demo`` and ``make up``."""

from config.settings.base import *  # noqa: F403
