"""Outgoing mail settings from the environment: one ``EMAIL_URL`` or Django's separate
variables, validated at start like every other setting."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from config.env import SettingError, env_bool, env_float, env_int, env_str


def email_from_env() -> dict[str, Any]:
    """``EMAIL_URL`` (``smtp://user:pass@host:587`` STARTTLS with ``?tls=1``, ``smtps://`` for
    implicit TLS) or ``EMAIL_HOST``/``EMAIL_PORT``/… ; either switches the console default to
    SMTP unless ``EMAIL_BACKEND`` says otherwise."""
    raw = env_str("EMAIL_URL", "")
    found: dict[str, Any] = {
        "EMAIL_HOST": env_str("EMAIL_HOST", ""),
        "EMAIL_PORT": env_int("EMAIL_PORT", 25, minimum=1),
        "EMAIL_HOST_USER": env_str("EMAIL_HOST_USER", ""),
        "EMAIL_HOST_PASSWORD": env_str("EMAIL_HOST_PASSWORD", ""),
        "EMAIL_USE_TLS": env_bool("EMAIL_USE_TLS", False),
        "EMAIL_USE_SSL": env_bool("EMAIL_USE_SSL", False),
        "EMAIL_TIMEOUT": env_float("EMAIL_TIMEOUT", 10.0, minimum=0.1),
    }
    if raw:
        parts = urlsplit(raw)
        if parts.scheme not in {"smtp", "smtps"} or not parts.hostname:
            raise SettingError("EMAIL_URL", raw, "expected smtp://[user:pass@]host:port")
        try:
            port = parts.port
        except ValueError:
            raise SettingError("EMAIL_URL", raw, "port is not a number") from None
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        found.update(
            EMAIL_HOST=parts.hostname,
            EMAIL_PORT=port or (465 if parts.scheme == "smtps" else 25),
            EMAIL_HOST_USER=unquote(parts.username or ""),
            EMAIL_HOST_PASSWORD=unquote(parts.password or ""),
            EMAIL_USE_SSL=parts.scheme == "smtps",
            EMAIL_USE_TLS=query.get("tls", "").lower() in {"1", "true", "yes"},
        )
    if found["EMAIL_USE_TLS"] and found["EMAIL_USE_SSL"]:
        raise SettingError("EMAIL_USE_TLS", "true", "EMAIL_USE_TLS and EMAIL_USE_SSL exclude")
    return found
