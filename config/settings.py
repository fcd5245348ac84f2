"""Settings read from the environment; with nothing set, everything runs embedded."""

from __future__ import annotations

from pathlib import Path

from config.env import (
    broker_from_env,
    cache_from_env,
    database_from_env,
    env_bool,
    env_float,
    env_float_list,
    env_int,
    env_str,
    mqtt_from_env,
)

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = env_str("DJANGO_SECRET_KEY", "dev-only-insecure-key-change-me")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_str("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_celery_beat",
    "devices",
    "automation",
    "reminders",
    "notifications",
    "events",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "config.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = "config.wsgi.application"

DATABASES = {"default": database_from_env(BASE_DIR)}
CACHES = {"default": cache_from_env()}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en"
STATIC_URL = "static/"
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")

# --- Celery -----------------------------------------------------------------------------
CELERY_BROKER_URL, CELERY_BROKER_EMBEDDED = broker_from_env()
# kombu's in-process transport polls once a second by default: far too slow for a pipeline.
CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 0.005} if CELERY_BROKER_EMBEDDED else {}

# --- MQTT ---------------------------------------------------------------------------------
MQTT = mqtt_from_env()

# --- Execution core tunables (units in the names) --------------------------------------------
EVENT_SWEEP_AFTER_S = env_int("EVENT_SWEEP_AFTER_S", 30, minimum=1)
SWEEP_BATCH_SIZE = env_int("SWEEP_BATCH_SIZE", 500, minimum=1)
EVALUATE_BATCH_SIZE = env_int("EVALUATE_BATCH_SIZE", 200, minimum=1)
DEVICE_FRESHNESS_S = env_int("DEVICE_FRESHNESS_S", 300, minimum=1)
COMMAND_MAX_ATTEMPTS = env_int("COMMAND_MAX_ATTEMPTS", 3, minimum=1)
ACK_TIMEOUT_S = env_float("ACK_TIMEOUT_S", 5.0, minimum=0.1)
APPLIED_WINDOW_S = env_float("APPLIED_WINDOW_S", 30.0, minimum=0.1)
DISPATCH_LEASE_S = env_float("DISPATCH_LEASE_S", 30.0, minimum=0.1)
RETRY_BACKOFF_S = env_float_list("RETRY_BACKOFF_S", (5.0, 15.0, 45.0))
RETRY_JITTER_RATIO = env_float("RETRY_JITTER_RATIO", 0.2)
BEAT_SWEEP_INTERVAL_S = env_float("BEAT_SWEEP_INTERVAL_S", 5.0, minimum=0.1)
# Ack deadlines and 5 s backoffs need a finer sweep than the event backstop.
COMMAND_SWEEP_INTERVAL_S = env_float("COMMAND_SWEEP_INTERVAL_S", 1.0, minimum=0.05)
DISPATCH_SWEEP_AFTER_S = env_float("DISPATCH_SWEEP_AFTER_S", 10.0, minimum=0.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "WARNING")},
}

# --- MQTT bridge ----------------------------------------------------------------------------
# Empty client id: farm-bridge-<hostname>. Run several bridges on one host with distinct ids.
BRIDGE_CLIENT_ID = env_str("BRIDGE_CLIENT_ID", "")
BRIDGE_BATCH_SIZE = env_int("BRIDGE_BATCH_SIZE", 500, minimum=1)
BRIDGE_FLUSH_MS = env_float("BRIDGE_FLUSH_MS", 20.0)
BRIDGE_DEDUPE_TTL_S = env_int("BRIDGE_DEDUPE_TTL_S", 60)  # 0 turns the cache fast path off
BRIDGE_MAX_PAYLOAD_BYTES = env_int("BRIDGE_MAX_PAYLOAD_BYTES", 64 * 1024, minimum=1)
BRIDGE_SESSION_EXPIRY_S = env_int("BRIDGE_SESSION_EXPIRY_S", 24 * 3600, minimum=1)
# Unacknowledged messages the broker sends before it waits (Mosquitto max_inflight_messages,
# default 20): a batch that reached it is flushed at once rather than after BRIDGE_FLUSH_MS.
BRIDGE_INFLIGHT_WINDOW = env_int("BRIDGE_INFLIGHT_WINDOW", 20, minimum=1)

# --- Domain events ---
# A handler that failed this many times for one idempotency key is dead-lettered.
EVENT_MAX_ATTEMPTS = env_int("EVENT_MAX_ATTEMPTS", 5, minimum=1)
# Celery countdown before the next delivery attempt, by attempt (short: longer backoff would
# belong in a column swept by beat). The last value repeats.
EVENT_RETRY_BACKOFF_S = env_float_list("EVENT_RETRY_BACKOFF_S", (2.0, 4.0, 8.0, 16.0))
# The envelope's ``producer``: which deployment published the event.
EVENT_PRODUCER = env_str("EVENT_PRODUCER", "farm-core")

# --- Automation scheduler ---
# A claim's lease: past it, stale cleanup returns the row to Pending and counts a retry.
SCHEDULER_LEASE_S = env_int("SCHEDULER_LEASE_S", 300, minimum=1)
# Rows claimed per statement (batches: ~50× the single-row rate on PostgreSQL, SPEC §11).
SCHEDULER_CLAIM_BATCH = env_int("SCHEDULER_CLAIM_BATCH", 50, minimum=1)
# Upper bound of rows one due poll claims and fans out (bounded sweeps).
SCHEDULER_POLL_MAX_ROWS = env_int("SCHEDULER_POLL_MAX_ROWS", 1000, minimum=1)
SCHEDULER_POLL_INTERVAL_S = env_float("SCHEDULER_POLL_INTERVAL_S", 10.0, minimum=0.1)
SCHEDULER_STALE_INTERVAL_S = env_float("SCHEDULER_STALE_INTERVAL_S", 60.0, minimum=0.1)
SCHEDULER_STALE_BATCH = env_int("SCHEDULER_STALE_BATCH", 500, minimum=1)
# Retry n waits the n-th value; one failure past the ladder puts the row on support hold.
SCHEDULER_BACKOFF_MINUTES = env_float_list("SCHEDULER_BACKOFF_MINUTES", (5.0, 15.0, 60.0))
# DispatchResultJson stays small; larger diagnostics go to file storage (TraceBlobName).
SCHEDULER_RESULT_MAX_BYTES = env_int("SCHEDULER_RESULT_MAX_BYTES", 2048, minimum=64)
SCHEDULER_TRACE_PREFIX = env_str("SCHEDULER_TRACE_PREFIX", "automation-scheduler")
# Django's default_storage (trace blobs) writes under MEDIA_ROOT.
MEDIA_ROOT = env_str("MEDIA_ROOT", str(BASE_DIR / "var" / "media"))
