"""Environment parsing: every setting has an embedded default, and a malformed value stops
start-up with one line that names the variable (its credentials masked), never a traceback or
a half-configured process."""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")

MASK = "***"
# ``scheme://user:password@`` in free text: from the user's colon to the last ``@`` of the
# whitespace-delimited token (a malformed URL may hold an unescaped ``/`` or ``@``).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s'\"]*):\S*@")
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&][^=&\s'\"]*(?:pass|secret|token|key)[^=&\s'\"]*=)[^&\s'\"]*", re.IGNORECASE
)


def credentials_masked(text: str, *, whole_value: bool = False) -> str:
    """``text`` with every URL password (and query values named like a password, secret,
    token or key) replaced by ``***``, for every message or log line that may show a settings
    URL. ``whole_value``: ``text`` is one variable's value, so its password runs to its last
    ``@`` whatever it holds (spaces, quotes), with or without a scheme."""
    if whole_value:
        at = text.rfind("@")
        scheme_end = text.find("://")
        start = scheme_end + 3 if 0 <= scheme_end < at else 0
        colon = text.find(":", start, at) if at > 0 else -1
        if colon >= 0:
            text = f"{text[: colon + 1]}{MASK}{text[at:]}"
    else:
        text = _URL_PASSWORD.sub(rf"\g<head>:{MASK}@", text)
    return _QUERY_SECRET.sub(rf"\g<head>{MASK}", text)


class SettingError(ImproperlyConfigured):
    """A malformed environment variable; the message starts with the variable's name and
    never shows a credential the value holds."""

    def __init__(self, name: str, value: str, why: str) -> None:
        shown = credentials_masked(value, whole_value=True)
        super().__init__(f"{name}={shown!r} is invalid: {why}")
        self.variable = name


class SettingMissing(SettingError):
    """A variable these settings cannot run without (a secret with no safe default)."""

    def __init__(self, name: str, why: str) -> None:
        ImproperlyConfigured.__init__(self, f"{name} is not set: {why}")
        self.variable = name


def setting_errors_exit(run: Callable[[], T], *, status: int = 2) -> T:
    """``run()``; a ``SettingError`` raised while the settings load becomes its one line on
    stderr and exit ``status`` (manage.py, wsgi and celery start through this)."""
    try:
        return run()
    except SettingError as exc:
        sys.stderr.write(f"{exc}\n")
        sys.stderr.flush()
        raise SystemExit(status) from None


def _get(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_int(name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
    raw = _get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(name, raw, "expected an integer") from None
    if value < minimum:
        raise SettingError(name, raw, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise SettingError(name, raw, f"must be <= {maximum}")
    return value


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = _get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingError(name, raw, "expected a number") from None
    if value < minimum:
        raise SettingError(name, raw, f"must be >= {minimum}")
    return value


def env_float_list(name: str, default: tuple[float, ...]) -> tuple[float, ...]:
    raw = _get(name)
    if raw is None:
        return default
    try:
        values = tuple(float(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise SettingError(name, raw, "expected comma-separated numbers") from None
    if not values or min(values) < 0:
        raise SettingError(name, raw, "expected at least one non-negative number")
    return values


def env_bool(name: str, default: bool) -> bool:
    raw = _get(name)
    if raw is None:
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise SettingError(name, raw, "expected true/false")


def env_networks(name: str) -> tuple[str, ...]:
    """Comma-separated IP networks (``10.20.0.0/16,fd00:1::/64``; a bare address is one host),
    normalised; none by default. A network with host bits set is refused as ambiguous."""
    raw = _get(name) or ""
    try:
        return tuple(str(ipaddress.ip_network(x.strip())) for x in raw.split(",") if x.strip())
    except ValueError as exc:
        raise SettingError(name, raw, f"{exc}; expected networks such as 10.20.0.0/16") from None


SECRET_MIN_LENGTH = 50  # Django's own bar (security.W009) for SECRET_KEY
SECRET_MIN_UNIQUE_CHARACTERS = 5
SECRET_HOW = "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(50))'"


def env_secret(name: str, *, why: str, forbidden_prefix: str = "") -> str:
    """A secret the process must not run without (production: no public default exists):
    refused when unset or when too short or repetitive to resist guessing."""
    raw = _get(name)
    if raw is None:
        raise SettingMissing(name, f"{why}; {SECRET_HOW}")
    weak = len(raw) < SECRET_MIN_LENGTH or len(set(raw)) < SECRET_MIN_UNIQUE_CHARACTERS
    if weak or (forbidden_prefix and raw.startswith(forbidden_prefix)):
        raise SettingError(
            name, MASK, f"a secret needs {SECRET_MIN_LENGTH}+ random characters; {SECRET_HOW}"
        )
    return raw


def env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """A header name (``X-Forwarded-Proto``) a TLS-terminating proxy sets to ``https``, as
    Django's ``SECURE_PROXY_SSL_HEADER``; None when unset."""
    raw = _get(name)
    if raw is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9-]+", raw):
        raise SettingError(name, raw, "expected a header name such as X-Forwarded-Proto")
    return f"HTTP_{raw.upper().replace('-', '_')}", "https"


def local_secret(path: Path) -> str:
    """A random secret created once at ``path`` (mode 0600) and read from there after, so that
    every development process of a checkout shares one key and none is public. Processes
    starting together agree: the file appears complete or not at all (a hard link)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(SECRET_MIN_LENGTH))
    try:
        os.link(draft, path)
    except FileExistsError:
        pass  # another process won; its key is the one
    finally:
        draft.unlink()
    return path.read_text().strip()


def env_str(name: str, default: str) -> str:
    return _get(name) or default


def broker_from_env() -> tuple[str, bool]:
    """``CELERY_BROKER_URL``; returns (url, embedded). Default: kombu's in-process transport."""
    raw = _get("CELERY_BROKER_URL")
    if raw is None:
        return "memory://localhost/", True
    scheme = urlsplit(raw).scheme
    if scheme not in {"redis", "rediss", "amqp", "amqps", "pyamqp", "memory"}:
        raise SettingError("CELERY_BROKER_URL", raw, "scheme must be redis, amqp or memory")
    if scheme != "memory" and not urlsplit(raw).hostname:
        raise SettingError("CELERY_BROKER_URL", raw, "missing host")
    return raw, scheme == "memory"


def cache_from_env() -> dict[str, Any]:
    """``REDIS_URL`` backs coordination (locks, dedupe, correlation); default is locmem."""
    raw = _get("REDIS_URL")
    if raw is None:
        return {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "farm-coordination",
        }
    parts = urlsplit(raw)
    if parts.scheme not in {"redis", "rediss", "unix"} or (
        parts.scheme != "unix" and not parts.hostname
    ):
        raise SettingError("REDIS_URL", raw, "expected redis://host:port/db")
    return {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": raw,
        "KEY_PREFIX": env_str("REDIS_KEY_PREFIX", "farm"),
    }


@dataclass(frozen=True)
class MqttConfig:
    """Where the bridge, dispatcher and simulator connect, and which protocol they speak."""

    host: str
    port: int
    username: str | None
    password: str | None = field(repr=False)  # never in a log line or an error's repr
    tls: bool
    embedded: bool
    protocol: int  # 5 for MQTT v5, 4 for 3.1.1 (the embedded broker speaks only 3.1.1)
    shared_group: str | None  # None on brokers without shared subscriptions


def _mqtt_address(name: str, raw: str) -> tuple[str, int, str | None, str | None, bool]:
    """``mqtt[s]://[user:pass@]host:port`` -> (host, port, user, password, tls)."""
    parts = urlsplit(raw)
    if parts.scheme not in {"mqtt", "mqtts", "tcp"} or not parts.hostname:
        raise SettingError(name, raw, "expected mqtt://host:port")
    try:
        port = parts.port or (8883 if parts.scheme == "mqtts" else 1883)
    except ValueError:
        raise SettingError(name, raw, "port is not a number") from None
    if parts.password and not parts.username:
        raise SettingError(name, raw, "a password needs a user name (mqtt://user:pass@…)")
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return parts.hostname, port, user, password, parts.scheme == "mqtts"


def mqtt_from_env() -> MqttConfig:
    """``MQTT_URL``: ``mqtt://[user:pass@]host:port``; default: the embedded broker."""
    raw = _get("MQTT_URL")
    if raw is None:
        port = env_int("MQTT_EMBEDDED_PORT", 18830, minimum=1)
        return MqttConfig("127.0.0.1", port, None, None, False, True, 4, None)
    host, port, user, password, tls = _mqtt_address("MQTT_URL", raw)
    protocol = env_int("MQTT_PROTOCOL", 5, minimum=4)
    if protocol not in (4, 5):
        raise SettingError("MQTT_PROTOCOL", str(protocol), "must be 4 (3.1.1) or 5")
    group = env_str("MQTT_SHARED_GROUP", "farm-bridge")
    return MqttConfig(
        host, port, user, password, tls, False, protocol, None if group.lower() == "none" else group
    )


# In every backend MQTT client id and in no device's: on the device listener a device's client
# id is its user name, its serial (deploy/mosquitto.conf: use_username_as_clientid), and a
# serial never holds a "/" (it could not be used in a topic), so no device can take the id.
BACKEND_CLIENT_ID_MARK = "/"


# DEVICE_CREDENTIALS -> the backend that tells the broker a device's login (an empty path:
# logins are managed outside the product).
DEVICE_CREDENTIALS_BACKENDS = {"none": "", "dynsec": "devices.mqtt.dynsec.DynsecCredentials"}
DYNSEC_URL_EXAMPLE = "mqtt://farm-dynsec%2Fadmin:<password>@<broker>:1883"


def device_credentials_from_env() -> tuple[str, MqttConfig | None]:
    """``DEVICE_CREDENTIALS`` (``none``, the default, or ``dynsec``) and ``MQTT_DYNSEC_URL``,
    the dynamic security admin's login on the devices' listener; returns (backend path,
    control connection). The admin's user name must hold a "/", which no serial does, so no
    device login can be, or overwrite, the admin."""
    choice = (_get("DEVICE_CREDENTIALS") or "none").lower()
    if choice not in DEVICE_CREDENTIALS_BACKENDS:
        raise SettingError("DEVICE_CREDENTIALS", choice, "expected none or dynsec")
    raw = _get("MQTT_DYNSEC_URL")
    if choice == "none":
        if raw is not None:
            raise SettingError(
                "MQTT_DYNSEC_URL", raw, "set, but DEVICE_CREDENTIALS is not dynsec (set both)"
            )
        return "", None
    if raw is None:
        raise SettingMissing(
            "MQTT_DYNSEC_URL",
            f"DEVICE_CREDENTIALS=dynsec needs the admin's login: {DYNSEC_URL_EXAMPLE}",
        )
    host, port, user, password, tls = _mqtt_address("MQTT_DYNSEC_URL", raw)
    if user is None or password is None:
        raise SettingError(
            "MQTT_DYNSEC_URL",
            raw,
            f"needs the admin's user name and password: {DYNSEC_URL_EXAMPLE}",
        )
    if BACKEND_CLIENT_ID_MARK not in user:
        raise SettingError(
            "MQTT_DYNSEC_URL",
            raw,
            f"the admin's user name must contain {BACKEND_CLIENT_ID_MARK!r}, percent-encoded as "
            f"%2F (e.g. farm-dynsec%2Fadmin): no serial does, so no device can be the admin",
        )
    return DEVICE_CREDENTIALS_BACKENDS[choice], MqttConfig(
        host, port, user, password, tls, False, 5, None
    )
