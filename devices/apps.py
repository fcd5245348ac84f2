from django.apps import AppConfig


class DevicesConfig(AppConfig):
    name = "devices"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """``/health`` checks the bridge through this app's heartbeat rows; what the app keeps
        and for how long (``devices.retention``)."""
        from config.health import health_check_register
        from devices.retention import devices_retention_register
        from devices.services.heartbeat import bridge_health

        health_check_register("bridge", bridge_health)
        devices_retention_register()
