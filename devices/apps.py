from django.apps import AppConfig


class DevicesConfig(AppConfig):
    name = "devices"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """``/health`` checks the bridge through this app's heartbeat rows."""
        from config.health import health_check_register
        from devices.services.heartbeat import bridge_health

        health_check_register("bridge", bridge_health)
