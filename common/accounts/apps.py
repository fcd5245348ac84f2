from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """API tokens and the authentication that reads them; below every app, like ``common``."""

    name = "common.accounts"
    label = "accounts"
    verbose_name = "API access"
    default_auto_field = "django.db.models.BigAutoField"
