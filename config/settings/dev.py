"""Development: the product's settings plus development tooling (the ``devtools`` app). The
default of ``manage.py``, ``celery -A config``, ``make demo`` and ``make up``."""

from pathlib import Path

from config.env import local_secret
from config.settings.base import *  # noqa: F403
from config.settings.base import (
    API_AUTHENTICATION_CLASSES,
    BASE_DIR,
    INSTALLED_APPS,
    REST_FRAMEWORK,
    SECRET_KEY,
    STATIC_ROOT,
    STORAGES,
    WEBHOOK_SECRET_KEY,
)

INSTALLED_APPS = [*INSTALLED_APPS, "devtools"]
# Development serves static files straight from the apps (no collectstatic needed), and
# plain names: the manifest of hashed names exists only after collectstatic.
WHITENOISE_USE_FINDERS = True
Path(STATIC_ROOT).mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on a missing root
STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# With MQTT_URL unset, the bridge and the simulator start the embedded broker through this.
MQTT_EMBEDDED_BROKER_STARTER = "devtools.embedded_broker.ensure_embedded_broker"
# Unset keys: random ones made once for this checkout (var/, mode 0600), shared by its
# processes and public nowhere; production settings refuse to start without them instead.
SECRET_KEY = SECRET_KEY or local_secret(BASE_DIR / "var" / "dev-secret-key")
WEBHOOK_SECRET_KEY = WEBHOOK_SECRET_KEY or local_secret(BASE_DIR / "var" / "dev-webhook-key")
# Basic auth (username and password per request, failures throttled) for curl in development;
# the production settings leave it out.
REST_FRAMEWORK = {
    **REST_FRAMEWORK,
    "DEFAULT_AUTHENTICATION_CLASSES": [
        *API_AUTHENTICATION_CLASSES[:-1],
        "common.accounts.authentication.ThrottledBasicAuthentication",
        API_AUTHENTICATION_CLASSES[-1],
    ],
}
