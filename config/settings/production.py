"""What a deployment runs (systemd units, compose): the product's settings with no development
tooling, DEBUG off whatever ``DJANGO_DEBUG`` says, the secrets required, and HTTPS enforced
(``manage.py check --deploy`` passes on the defaults; each is an environment variable)."""

import os

from config.env import (
    MASK,
    SettingError,
    SettingMissing,
    env_bool,
    env_int,
    env_proxy_ssl_header,
    env_secret,
)
from config.logging import log_format_from_env, logging_settings
from config.settings.base import *  # noqa: F403
from config.settings.base import LOG_LEVEL

# --- The servers: no embedded fallback ----------------------------------------------------------
# Unset, base runs each embedded (SQLite, Celery's in-process memory transport, a per-process
# cache, an in-process MQTT broker), which is right for the demo and the tests and wrong for a
# deployment: a bridge would acknowledge messages into a database or broker nobody else reads.
SERVERS_REQUIRED = {
    "DATABASE_URL": "the database holds everything the system acknowledged",
    "CELERY_BROKER_URL": "every process must share one Celery broker",
    "REDIS_URL": "every process must share one coordination cache",
    "MQTT_URL": "the bridge and the dispatch workers must reach the devices' broker",
}
for _name, _why in SERVERS_REQUIRED.items():
    if not os.environ.get(_name, "").strip():
        raise SettingMissing(_name, f"{_why}; production runs no embedded server")

DEBUG = False
LOG_FORMAT = log_format_from_env(debug=DEBUG)
LOGGING = logging_settings(fmt=LOG_FORMAT, level=LOG_LEVEL)

# --- Secrets: no default, so a deployment never runs on a key anyone could read ----------------
SECRET_KEY = env_secret(
    "DJANGO_SECRET_KEY",
    why="production signs sessions, CSRF tokens and password resets with it",
    forbidden_prefix="django-insecure-",
)
WEBHOOK_SECRET_KEY = env_secret(
    "WEBHOOK_SECRET_KEY", why="every webhook's signing secret derives from it"
)
if WEBHOOK_SECRET_KEY == SECRET_KEY:
    raise SettingError("WEBHOOK_SECRET_KEY", MASK, "must differ from DJANGO_SECRET_KEY")
# Webhooks carry farm data and a signature: https only, unless a deployment says otherwise.
WEBHOOK_ALLOW_HTTP = env_bool("WEBHOOK_ALLOW_HTTP", False)

# --- HTTPS -------------------------------------------------------------------------------------
# Behind a proxy that terminates TLS, DJANGO_SECURE_PROXY_SSL_HEADER names the header it sets
# to "https" (X-Forwarded-Proto). Set it only when the proxy overwrites that header on every
# request: a client could otherwise claim HTTPS. Unset, the request's own scheme counts.
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("DJANGO_SECURE_PROXY_SSL_HEADER")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
# Load balancers' probes and Prometheus reach the web process over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^health$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
# Preloading commits the whole domain to HTTPS in every browser's built-in list: the
# domain's owner opts in (true), so the check's reminder of it is silenced while it is off.
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", True)
