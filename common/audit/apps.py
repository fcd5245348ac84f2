from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit log; below every app like ``common``, it names the apps' models by label."""

    name = "common.audit"
    label = "audit"
    verbose_name = "Audit log"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Registers the configuration models with django-auditlog once every app's models
        are loaded, and declares the log's retention."""
        from common.audit.registry import configuration_register
        from common.audit.retention import audit_retention_register

        configuration_register()
        audit_retention_register()
