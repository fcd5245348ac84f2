"""Development: the product's settings plus development tooling (the ``devtools`` app). The
default of ``manage.py``, ``celery -A config``, ``make demo`` and ``make up``."""

from config.settings.base import *  # noqa: F403
from config.settings.base import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "devtools"]
# With MQTT_URL unset, the bridge and the simulator start the embedded broker through this.
MQTT_EMBEDDED_BROKER_STARTER = "devtools.embedded_broker.ensure_embedded_broker"
