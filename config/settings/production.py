"""What a deployment runs (systemd units, compose): the product's settings with no development
tooling, and DEBUG off whatever ``DJANGO_DEBUG`` says."""

from config.logging import log_format_from_env, logging_settings
from config.settings.base import *  # noqa: F403
from config.settings.base import LOG_LEVEL

DEBUG = False
LOG_FORMAT = log_format_from_env(debug=DEBUG)
LOGGING = logging_settings(fmt=LOG_FORMAT, level=LOG_LEVEL)
