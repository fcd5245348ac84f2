"""The test suite's settings (pytest's ``DJANGO_SETTINGS_MODULE``): development settings plus
whatever only tests need (nothing yet)."""

from config.settings.dev import *  # noqa: F403
