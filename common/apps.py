from typing import Any

from django.apps import AppConfig


class CommonConfig(AppConfig):
    """Tenancy (organisations and their members) and the API's idempotency records: every
    app scopes its rows through them, so they sit below every app."""

    name = "common"
    verbose_name = "Organisations and API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """``/metrics`` reads the age of each retained table's oldest row at scrape time;
        every ``migrate`` drops the configuration version's triggers first and installs them
        again at its end (``common.config_version`` says why)."""
        from django.db.models.signals import post_migrate, pre_migrate

        from common.retention import retention_gauges
        from config.metrics import metrics_gauges_register

        metrics_gauges_register("retention", retention_gauges)
        pre_migrate.connect(
            _config_version_triggers_off, sender=self, dispatch_uid="common-config-version-off"
        )
        post_migrate.connect(
            _config_version_triggers, sender=self, dispatch_uid="common-config-version"
        )


def _config_version_triggers(*, using: str, **kwargs: Any) -> None:
    from django.db import connections

    from common.config_version import config_version_triggers_install

    config_version_triggers_install(connections[using])


def _config_version_triggers_off(*, using: str, **kwargs: Any) -> None:
    from django.db import connections

    from common.config_version import config_version_triggers_drop

    config_version_triggers_drop(connections[using])
