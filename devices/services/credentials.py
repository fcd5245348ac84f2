"""A device's MQTT login: issued when it is provisioned (the password is shown once, never
stored here), rotated on request, revoked when it retires. Which broker learns them is the
backend named by ``DEVICE_CREDENTIALS_BACKEND`` (``DEVICE_CREDENTIALS=dynsec``: Mosquitto's
dynamic security plugin, ``devices.mqtt.dynsec``); unset, the broker's logins are managed
outside the product (an anonymous development broker) and these calls return None. A
backend raises ``CredentialsUnavailable`` when the broker does not confirm, so the caller's
transaction rolls back with nothing half-done."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from common.audit.registry import MASK
from common.audit.writes import audited_event

if TYPE_CHECKING:
    from devices.models import Device

PASSWORD_BYTES = 24  # 32 URL-safe characters


@dataclass(frozen=True)
class DeviceCredentials:
    """What a device logs in with: its serial as user name, and a password shown once."""

    username: str
    password: str


class CredentialsUnavailable(Exception):
    """The broker did not confirm the change (unreachable, timed out, refused)."""


class CredentialsBackend(Protocol):
    """Sets, replaces and removes one device's login on the broker; each call is idempotent."""

    def set_login(self, username: str, password: str) -> None: ...

    def remove_login(self, username: str) -> None: ...


def new_password() -> str:
    return secrets.token_urlsafe(PASSWORD_BYTES)


@cache
def _backend(path: str) -> CredentialsBackend:
    return import_string(path)()  # type: ignore[no-any-return]


def credentials_backend() -> CredentialsBackend | None:
    path = getattr(settings, "DEVICE_CREDENTIALS_BACKEND", "")
    return _backend(path) if path else None


def device_credentials_issue(*, serial_number: str) -> DeviceCredentials | None:
    """A fresh password for the device, set on the broker before it is returned (also how a
    login is rotated: the old password stops working at once)."""
    backend = credentials_backend()
    if backend is None:
        return None
    login = DeviceCredentials(username=serial_number, password=new_password())
    backend.set_login(login.username, login.password)
    return login


def device_credentials_rotate(*, device: Device) -> DeviceCredentials | None:
    """A new password for ``device`` (``device_credentials_issue``), recorded in the audit
    log as a change of its login; the entry holds no password, old or new."""
    login = device_credentials_issue(serial_number=device.serial_number)
    if login is not None:
        audited_event(device, changes={"mqtt_password": [MASK, MASK]})
    return login


def device_credentials_revoke(*, serial_number: str) -> None:
    """The device can no longer log in (retired); a no-op when it had no login."""
    backend = credentials_backend()
    if backend is not None:
        backend.remove_login(serial_number)
