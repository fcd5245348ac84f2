"""What the product needs, read from the environment; with nothing set, everything runs
embedded. No development tooling here: ``dev`` and ``test`` add it, ``production`` does not."""

from __future__ import annotations

from pathlib import Path

from config.env import (
    broker_from_env,
    cache_from_env,
    device_credentials_from_env,
    env_bool,
    env_float,
    env_float_list,
    env_int,
    env_networks,
    env_str,
    mqtt_from_env,
)
from config.env_database import database_from_env
from config.env_email import email_from_env
from config.env_retention import retention_from_env
from config.env_rollouts import rollouts_from_env
from config.env_trace import TRACE_STORAGE_ALIAS, trace_database_from_env, trace_storage_from_env
from config.logging import log_format_from_env, log_level_from_env, logging_settings

BASE_DIR = Path(__file__).resolve().parent.parent.parent

# No public default: production refuses to start without DJANGO_SECRET_KEY, dev makes one
# per checkout (config.env.local_secret); empty here, which Django itself refuses to sign with.
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "")
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
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from static files, no CDN
    "django_celery_beat",
    "common",
    "common.accounts",  # API tokens; after django_celery_beat (its admin is made superuser-only)
    "auditlog",
    "common.audit",  # the audit log of configuration changes; after auditlog (its admin)
    "devices",
    "scheduler",
    "automation",
    "reminders",
    "notifications",
    "events",
    "rollouts",
    "alarms",
    "config.metrics.MetricsConfig",  # /metrics counting hooks in every process
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's and the API docs' CSS and scripts) from the web process itself,
    # with DEBUG off too: ``collectstatic`` fills STATIC_ROOT (make up, the deploy units).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "common.audit.context.AuditSurfaceMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "config.security.FrameAncestorsMiddleware",
]
# No page of this site is ever framed (the admin's actions are one click): X-Frame-Options
# for older browsers, CSP frame-ancestors for the rest.
X_FRAME_OPTIONS = "DENY"

ROOT_URLCONF = "config.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Before the apps' own: config/templates/admin/base_site.html extends the admin's.
        "DIRS": [BASE_DIR / "config" / "templates"],
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
FORMAT_MODULE_PATH = ["config.formats"]  # times with seconds, ISO order (config/formats/)
STATIC_URL = "static/"
STATIC_ROOT = env_str("STATIC_ROOT", str(BASE_DIR / "var" / "static"))
# Compressed files with content hashes in their names (cached for ever by browsers); a name
# missing from the manifest (collectstatic not run yet) falls back to the plain file.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_MANIFEST_STRICT = False
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")

# --- Celery -----------------------------------------------------------------------------
CELERY_BROKER_URL, CELERY_BROKER_EMBEDDED = broker_from_env()
# Workers reuse their database connections (config.db_connections closes broken or old ones);
# the fix-up still recycles them after this many tasks.
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1000)
# kombu's in-process transport polls once a second by default: far too slow for a pipeline.
CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 0.005} if CELERY_BROKER_EMBEDDED else {}

# --- MQTT ---------------------------------------------------------------------------------
MQTT = mqtt_from_env()
# With MQTT_URL unset, the dotted path of a callable(MqttConfig) that starts the embedded
# broker: the dev and test settings name devtools' one; with None the bridge stops and names
# MQTT_URL (the product never imports devtools).
MQTT_EMBEDDED_BROKER_STARTER: str | None = None
# Device MQTT logins (config.env.device_credentials_from_env, devices.services.credentials).
DEVICE_CREDENTIALS_BACKEND, MQTT_DYNSEC = device_credentials_from_env()
MQTT_DYNSEC_TIMEOUT_S = env_float("MQTT_DYNSEC_TIMEOUT_S", 5.0, minimum=0.1)

# --- Execution core tunables (units in the names) --------------------------------------------
EVENT_SWEEP_AFTER_S = env_int("EVENT_SWEEP_AFTER_S", 30, minimum=1)
SWEEP_BATCH_SIZE = env_int("SWEEP_BATCH_SIZE", 500, minimum=1)
EVALUATE_BATCH_SIZE = env_int("EVALUATE_BATCH_SIZE", 200, minimum=1)
# Ingest evaluates the events it committed in the same task instead of queueing them for the
# evaluate workers (one Celery hop less per reading; the evaluate queue still takes sweeps and
# any batch whose inline evaluation failed).
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
# After a command for (endpoint, value) fails on the device or stays uncertain, further
# decisions for the same pair are suppressed this long, growing per consecutive failure.
COMMAND_COOLDOWN_S = env_float_list("COMMAND_COOLDOWN_S", (60.0, 300.0, 1800.0))
# A publish finding the broker down spends no attempt: retried within this, or expires.
PUBLISH_RETRY_MAX_WAIT_S = env_float("PUBLISH_RETRY_MAX_WAIT_S", 2.0, minimum=0.05)
COMMAND_MAX_AGE_S = env_float("COMMAND_MAX_AGE_S", 600.0, minimum=1.0)
# How far device time (telemetry ts, appliedAt) may stray from the server clock (else
# timestamp_in_future/_too_old): wider takes skewed clocks and longer offline backlogs.
TELEMETRY_MAX_FUTURE_S = env_float("TELEMETRY_MAX_FUTURE_S", 300.0)
TELEMETRY_MAX_AGE_S = env_float("TELEMETRY_MAX_AGE_S", 7 * 24 * 3600.0, minimum=1.0)
# A message without ``ts`` is timed by its arrival: a copy within this is its redelivery.
TELEMETRY_UNSTAMPED_DEDUPE_S = env_float("TELEMETRY_UNSTAMPED_DEDUPE_S", 600.0, minimum=1.0)
# PostgreSQL: telemetry and events in time partitions this wide, made this many spans ahead.
TELEMETRY_PARTITION_SPAN_S = env_int("TELEMETRY_PARTITION_SPAN_S", 86400, minimum=60)
TELEMETRY_PARTITIONS_AHEAD = env_int("TELEMETRY_PARTITIONS_AHEAD", 2, minimum=1)
# How often beat folds new telemetry into the hourly rollups (which trail by one or two).
TELEMETRY_ROLLUP_INTERVAL_S = env_float("TELEMETRY_ROLLUP_INTERVAL_S", 60.0, minimum=1.0)
# Device health (docs/operations.md): the offline sweep's period and batch size.
DEVICE_HEALTH_SWEEP_INTERVAL_S = env_float("DEVICE_HEALTH_SWEEP_INTERVAL_S", 10.0, minimum=0.1)
DEVICE_HEALTH_SWEEP_BATCH = env_int("DEVICE_HEALTH_SWEEP_BATCH", 500, minimum=1)

# --- Logging: structured lines (docs/spec.md §9) in every process; see config/logging.py ---
LOG_FORMAT = log_format_from_env(debug=DEBUG)  # json | console (default with DJANGO_DEBUG)
LOG_LEVEL = log_level_from_env()
LOGGING_CONFIG = "config.logging.configure"
LOGGING = logging_settings(fmt=LOG_FORMAT, level=LOG_LEVEL)

# --- MQTT bridge: config/settings/bridge.py ---
from config.settings.bridge import *  # noqa: E402, F403

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
# Rows claimed per statement (batches: ~50× the single-row rate on PostgreSQL, docs/spec.md §11).
SCHEDULER_CLAIM_BATCH = env_int("SCHEDULER_CLAIM_BATCH", 50, minimum=1)
# Upper bound of rows one due poll claims and fans out (bounded sweeps); a poll that reached
# it queues the next one at once instead of waiting for beat.
SCHEDULER_POLL_MAX_ROWS = env_int("SCHEDULER_POLL_MAX_ROWS", 1000, minimum=1)
# Claimed rows per execute task: the task's overhead is paid per chunk, and a batch still
# spreads over every scheduler worker.
SCHEDULER_EXECUTE_CHUNK = env_int("SCHEDULER_EXECUTE_CHUNK", 25, minimum=1)
SCHEDULER_POLL_INTERVAL_S = env_float("SCHEDULER_POLL_INTERVAL_S", 10.0, minimum=0.1)
SCHEDULER_STALE_INTERVAL_S = env_float("SCHEDULER_STALE_INTERVAL_S", 60.0, minimum=0.1)
SCHEDULER_STALE_BATCH = env_int("SCHEDULER_STALE_BATCH", 500, minimum=1)
# Retry n waits the n-th value; one failure past the ladder puts the row on support hold.
SCHEDULER_BACKOFF_MINUTES = env_float_list("SCHEDULER_BACKOFF_MINUTES", (5.0, 15.0, 60.0))
# DispatchResultJson stays small; larger diagnostics go to file storage (TraceBlobName).
SCHEDULER_RESULT_MAX_BYTES = env_int("SCHEDULER_RESULT_MAX_BYTES", 2048, minimum=64)
SCHEDULER_TRACE_PREFIX = env_str("SCHEDULER_TRACE_PREFIX", "automation-scheduler")
# The execution trace, never read to find work: records in SCHEDULER_TRACE_DATABASE, blobs in
# STORAGES["scheduler_traces"] (files under MEDIA_ROOT unless the environment names another
# backend, config/env_trace.py); beat prunes both after SCHEDULER_TRACE_RETENTION_DAYS.
MEDIA_ROOT = env_str("MEDIA_ROOT", str(BASE_DIR / "var" / "media"))
STORAGES[TRACE_STORAGE_ALIAS] = trace_storage_from_env()
SCHEDULER_TRACE_DATABASE = trace_database_from_env(DATABASES)
DATABASE_ROUTERS = ["scheduler.routers.SchedulerTraceRouter"]
SCHEDULER_TRACE_RETENTION_DAYS = env_int("SCHEDULER_TRACE_RETENTION_DAYS", 30, minimum=1)
SCHEDULER_TRACE_PRUNE_INTERVAL_S = env_float("SCHEDULER_TRACE_PRUNE_INTERVAL_S", 3600.0, minimum=1)
SCHEDULER_TRACE_PRUNE_BATCH = env_int("SCHEDULER_TRACE_PRUNE_BATCH", 500, minimum=1)

# --- Notifications and alarm notifications: config/settings/notify.py ---
from config.settings.notify import *  # noqa: E402, F403

# Farms without a NotificationProfile render in this locale.
NOTIFY_DEFAULT_LOCALE = env_str("NOTIFY_DEFAULT_LOCALE", LANGUAGE_CODE)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "farm-core@localhost")
NOTIFY_FROM_EMAIL = env_str("NOTIFY_FROM_EMAIL", DEFAULT_FROM_EMAIL)
# The right-hand side of the stable Message-ID each notification's email carries.
NOTIFY_MAIL_DOMAIN = env_str("NOTIFY_MAIL_DOMAIN", "farm-core.local")

_email = email_from_env()
EMAIL_HOST = str(_email["EMAIL_HOST"] or "localhost")
EMAIL_PORT = _email["EMAIL_PORT"]
EMAIL_HOST_USER = _email["EMAIL_HOST_USER"]
EMAIL_HOST_PASSWORD = _email["EMAIL_HOST_PASSWORD"]
EMAIL_USE_TLS = _email["EMAIL_USE_TLS"]
EMAIL_USE_SSL = _email["EMAIL_USE_SSL"]
EMAIL_TIMEOUT = _email["EMAIL_TIMEOUT"]
if _email["EMAIL_HOST"] and not env_str("EMAIL_BACKEND", ""):
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"

# --- Reminders ---
# Bounded reconciliation (beat, low frequency): one batch of each scan per pass.
REMINDERS_RECONCILE_INTERVAL_S = env_float("REMINDERS_RECONCILE_INTERVAL_S", 900.0, minimum=1.0)
REMINDERS_RECONCILE_BATCH = env_int("REMINDERS_RECONCILE_BATCH", 200, minimum=1)
# The due window: occurrences dated from the farm's today to today + N are repaired.
REMINDERS_RECONCILE_WINDOW_DAYS = env_int("REMINDERS_RECONCILE_WINDOW_DAYS", 7)
# A first pass looks back this far for changed sources.
REMINDERS_RECONCILE_LOOKBACK_DAYS = env_int("REMINDERS_RECONCILE_LOOKBACK_DAYS", 2)
# Sources changed in the last seconds are left for the next pass (commits still in flight).
REMINDERS_RECONCILE_SETTLE_S = env_int("REMINDERS_RECONCILE_SETTLE_S", 60)


def _reminder_farm_ids() -> tuple[int, ...]:
    """Farm allowlist of reconciliation ("1,2,3"); empty: every farm."""
    from config.env import SettingError

    farms = env_float_list("REMINDERS_RECONCILE_FARMS", ())
    if any(f != int(f) or f < 1 for f in farms):
        raw = env_str("REMINDERS_RECONCILE_FARMS", "")
        raise SettingError("REMINDERS_RECONCILE_FARMS", raw, "expected farm ids")
    return tuple(int(f) for f in farms)


REMINDERS_RECONCILE_FARM_IDS = _reminder_farm_ids()
# Metric sources are re-evaluated while their endpoint reported within this many minutes.
REMINDERS_METRIC_MAX_WINDOW_MINUTES = env_int("REMINDERS_METRIC_MAX_WINDOW_MINUTES", 1440)
# Report subscriptions: how often beat ensures each current period's row, and batch size.
# Rule schedules' occurrence rows are written two days ahead; an edit writes its own at once.
RULE_SCHEDULE_ENSURE_INTERVAL_S = env_float("RULE_SCHEDULE_ENSURE_INTERVAL_S", 300.0, minimum=1.0)
# Watchdogs (silent_for): how often beat looks for silences that lasted, and for endpoints back.
WATCHDOG_SWEEP_INTERVAL_S = env_float("WATCHDOG_SWEEP_INTERVAL_S", 5.0, minimum=0.1)
REMINDERS_REPORT_ENSURE_INTERVAL_S = env_float(
    "REMINDERS_REPORT_ENSURE_INTERVAL_S", 900.0, minimum=1.0
)
REMINDERS_REPORT_BATCH = env_int("REMINDERS_REPORT_BATCH", 500, minimum=1)

# --- Operations surface: REST API (DRF) ---
# Hashed API tokens and sessions (the dev settings add Basic auth); the last class throttles
# anonymous requests, which DRF would otherwise refuse on permission before any throttle.
API_AUTHENTICATION_CLASSES = [
    "common.accounts.authentication.ApiTokenAuthentication",
    "rest_framework.authentication.SessionAuthentication",
    "common.accounts.authentication.AnonymousRequestThrottle",
]


def _throttle_rate(name: str, default: str) -> str:
    """A DRF rate (``10/min``: a count, then s, min, hour or day), checked at start-up rather
    than on the first request it would throttle."""
    from config.env import SettingError

    raw = env_str(name, default)
    count, _, period = raw.partition("/")
    if not (count.isascii() and count.isdigit()) or period[:1] not in {"s", "m", "h", "d"}:
        raise SettingError(name, raw, "expected a rate such as 10/min")
    return raw


# A token expires this many days after it was issued or rotated (0: never).
API_TOKEN_TTL_DAYS = env_float("API_TOKEN_TTL_DAYS", 365.0, minimum=0.0)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": API_AUTHENTICATION_CLASSES,
    "DEFAULT_PERMISSION_CLASSES": ["common.permissions.RoleMatrix"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": env_int("API_PAGE_SIZE", 50, minimum=1),
    # Operation ids and tags by resource (farms_create, endpoint_command; common/schema.py).
    "DEFAULT_SCHEMA_CLASS": "common.schema.ApiAutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # Anonymous requests are counted by AnonymousRequestThrottle (scope "anon"), refused
    # credentials by the authentication classes (scope "auth_failure"), both per client
    # address; signed-in users per user.
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "user": _throttle_rate("API_THROTTLE_USER", "1200/min"),
        "anon": _throttle_rate("API_THROTTLE_ANON", "60/min"),
        "auth_failure": _throttle_rate("API_THROTTLE_AUTH_FAILURES", "10/min"),
    },
    # Proxies in front of the web process that append to X-Forwarded-For: the client address
    # is the one this many from the right; 0 (gunicorn serving clients directly) trusts no
    # header, so a client cannot pick a new address per request.
    "NUM_PROXIES": env_int("API_NUM_PROXIES", 0, minimum=0),
}

# Every API error in one JSON shape with a machine code (common/errors.py, docs/api-errors.md);
# a JSON body nested too deep is a 400 (common/parsers.py), any body over
# DATA_UPLOAD_MAX_MEMORY_SIZE a 413. Field types are strict (common/serializers.py). Bodies
# are JSON: a form is a 415, except from the browsable API's own pages (common/parsers.py).
REST_FRAMEWORK |= {
    "EXCEPTION_HANDLER": "common.errors.api_exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "common.parsers.BoundedJSONParser",
        "common.parsers.BrowsableFormParser",
        "common.parsers.BrowsableMultiPartParser",
    ],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",  # APIClient's bodies, as the API takes them
}
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # a telemetry batch of 500 messages needs ~100 KiB
# How long an Idempotency-Key replays its first response; beat prunes older records.
API_IDEMPOTENCY_TTL_S = env_int("API_IDEMPOTENCY_TTL_S", 24 * 3600, minimum=60)
API_IDEMPOTENCY_PRUNE_INTERVAL_S = env_float("API_IDEMPOTENCY_PRUNE_INTERVAL_S", 3600.0, minimum=1)
# The longest window one readings export (``GET /api/v1/readings/export/``) may ask for, in days.
EXPORT_MAX_DAYS = env_int("EXPORT_MAX_DAYS", 31, minimum=1, maximum=3660)
# Each append-only table's retention (config/env_retention.py; docs/operations.md, "Retention").
globals().update(retention_from_env())
AUDITLOG_LOGENTRY_MODEL = "audit.AuditEntry"  # the audit log's entries (docs/audit.md)
MIGRATION_MODULES = {"auditlog": None}  # its own table is the swapped-out model's: unused
RETENTION_PRUNE_INTERVAL_S = env_float("RETENTION_PRUNE_INTERVAL_S", 300.0, minimum=1)
# Fleet rollouts: canary, driver tick, lease (config/env_rollouts.py, docs/rollouts.md).
ROLLOUTS = rollouts_from_env()
SPECTACULAR_SETTINGS = {
    "TITLE": "Farm Automation Core API",
    "DESCRIPTION": "Farms, devices, rules, telemetry ingest, commands and their timelines.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its pages go through the API's role matrix too (open to anyone).
    "SERVE_PERMISSIONS": ["common.permissions.RoleMatrix"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The schema's security schemes: the credentials a caller can present. The last
    # authentication class only counts anonymous requests and takes none.
    "AUTHENTICATION_WHITELIST": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    # For generated clients: a request body is JSON only (the browsable API's form parsers
    # are left out) and has its own component without the read-only fields (FarmRequest);
    # ids and tags leave out /api/v1/; every error status an operation can answer is listed
    # with the Error component (common/schema.py, docs/api-errors.md).
    "PARSER_WHITELIST": ["common.parsers.BoundedJSONParser"],
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api(/v[0-9]+)?",
    # A severity reads the same on an alarm and on a rule (alarm_severity): one enum.
    "ENUM_NAME_OVERRIDES": {"AlarmSeverityEnum": "alarms.states.AlarmSeverity"},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "common.schema.error_responses",
    ],
}
# /metrics runs queries on every scrape and counts across organisations: with METRICS_TOKEN
# a scrape needs ``Authorization: Bearer <token>``; without it only loopback clients with no
# proxy's forwarding header are answered (config.metrics).
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
# Each webhook's signing secret is HMAC-SHA256(WEBHOOK_SECRET_KEY, contact id + random salt);
# only the salt is stored. Production refuses to start without it; keys a secret was issued
# under may stay listed in WEBHOOK_SECRET_KEY_FALLBACKS (comma-separated) while rotating.
WEBHOOK_SECRET_KEY = env_str("WEBHOOK_SECRET_KEY", "")
WEBHOOK_SECRET_KEY_FALLBACKS = [
    k.strip() for k in env_str("WEBHOOK_SECRET_KEY_FALLBACKS", "").split(",") if k.strip()
]
# Where webhooks may go (notifications.destinations): never a non-global address, except in
# these networks (comma-separated CIDRs: an on-premises receiver's own). Plain http only while
# WEBHOOK_ALLOW_HTTP (off by default in the production settings).
WEBHOOK_ALLOWED_NETWORKS = env_networks("WEBHOOK_ALLOWED_NETWORKS")
WEBHOOK_ALLOW_HTTP = env_bool("WEBHOOK_ALLOW_HTTP", True)
# /health: a bridge heartbeat older than this counts as a lost MQTT connection.
BRIDGE_HEARTBEAT_STALE_S = env_float("BRIDGE_HEARTBEAT_STALE_S", 60.0, minimum=1.0)
