from django.apps import AppConfig


class DevicesConfig(AppConfig):
    name = "devices"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """``/health`` checks, and ``/metrics`` shows, each bridge slot through its row;
        ``/metrics`` counts the devices offline; what the app keeps and for how long
        (``devices.retention``); which of its tables are configuration."""
        from config.health import health_check_register
        from config.metrics import metrics_gauges_register
        from devices.metrics import device_health_gauges
        from devices.retention import devices_retention_register
        from devices.services.bridge_health import bridge_health, bridge_slot_gauges

        health_check_register("bridge", bridge_health)
        metrics_gauges_register("bridge", bridge_slot_gauges)
        metrics_gauges_register("devices", device_health_gauges)
        devices_retention_register()
        _config_tables_watch()


def _config_tables_watch() -> None:
    """The configuration the per-process caches hold (``common.config_version``): a message's
    touch of a device and a reading's last value are not configuration."""
    from common.config_version import config_tables_watch
    from devices.models import (
        Device,
        DeviceInstanceEndpoint,
        DeviceProfile,
        DeviceProfileEndpoint,
        Farm,
    )

    config_tables_watch(Farm)
    config_tables_watch(DeviceProfile)
    config_tables_watch(DeviceProfileEndpoint)
    config_tables_watch(Device, runtime=("last_seen_at", "online", "offline_due_at"))
    config_tables_watch(DeviceInstanceEndpoint, runtime=("last_value", "last_value_at"))
