"""The test suite's settings (pytest's ``DJANGO_SETTINGS_MODULE``): development settings plus
what only tests need: a fast password hasher (the suite makes hundreds of users; a real
PBKDF2 hash costs about half a second each here, and no test is about hashing strength)."""

from config.settings.dev import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
