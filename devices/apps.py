from django.apps import AppConfig


class DevicesConfig(AppConfig):
    name = "devices"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """``/health`` checks, and ``/metrics`` shows, each bridge slot through its row;
        ``/metrics`` counts the devices offline; what the app keeps and for how long
        (``devices.retention``)."""
        from config.health import health_check_register
        from config.metrics import metrics_gauges_register
        from devices.metrics import device_health_gauges
        from devices.retention import devices_retention_register
        from devices.services.bridge_health import bridge_health, bridge_slot_gauges

        health_check_register("bridge", bridge_health)
        metrics_gauges_register("bridge", bridge_slot_gauges)
        metrics_gauges_register("devices", device_health_gauges)
        devices_retention_register()
