"""The test suite's settings (pytest's ``DJANGO_SETTINGS_MODULE``): development settings plus
what only tests need: a fast password hasher (the suite makes hundreds of users; a real
PBKDF2 hash costs about half a second each here, and no test is about hashing strength), and
under pytest-xdist a coordination cache per worker."""

import os
import re

from config.env import cache_from_env
from config.settings.dev import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Every test starts by clearing the coordination cache (FLUSHDB on Redis): a worker other than
# the first gets a Redis database of its own (gw1 -> 5, gw2 -> 6, ...; 0 and 1 are the
# configured cache and broker, 12-15 belong to the processes single tests start), and the
# processes it starts inherit it through the environment.
XDIST_REDIS_DB_BASE = 4
_worker = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
_redis = os.environ.get("REDIS_URL", "")
if _worker and int(_worker[1]) > 0 and _redis.startswith("redis"):
    _db = XDIST_REDIS_DB_BASE + int(_worker[1])
    os.environ["REDIS_URL"] = re.sub(r"(redis://[^/]+)(/\d*)?$", rf"\g<1>/{_db}", _redis)
    CACHES = {"default": cache_from_env()}
