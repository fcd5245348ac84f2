"""Development: the product's settings plus development tooling (the ``devtools`` app). The
default of ``manage.py``, ``celery -A config``, ``make demo`` and ``make up``."""

from config.settings.base import *  # noqa: F403
from config.settings.base import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "devtools"]
