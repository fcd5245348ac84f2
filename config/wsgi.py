"""WSGI entry point for the web process."""

import os

from django.core.wsgi import get_wsgi_application

from config.env import setting_errors_exit

# gunicorn's "app failed to load" status: the arbiter stops instead of respawning workers
# that cannot start; the one line on stderr names the variable.
APP_LOAD_ERROR_STATUS = 4

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")
application = setting_errors_exit(get_wsgi_application, status=APP_LOAD_ERROR_STATUS)
