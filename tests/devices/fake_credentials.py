"""In-memory stand-ins for the broker's login store, named by DEVICE_CREDENTIALS_BACKEND in
the API tests (the broker backend itself is tested against a real broker elsewhere)."""

from __future__ import annotations

from typing import ClassVar

from devices.services.credentials import CredentialsUnavailable


class FakeBackend:
    """Keeps the logins it was given, shared by every instance (the backend is cached)."""

    logins: ClassVar[dict[str, str]] = {}

    def set_login(self, username: str, password: str) -> None:
        self.logins[username] = password

    def remove_login(self, username: str) -> None:
        self.logins.pop(username, None)


class DownBackend:
    """A broker that never confirms."""

    def set_login(self, username: str, password: str) -> None:
        raise CredentialsUnavailable("broker timed out")

    def remove_login(self, username: str) -> None:
        raise CredentialsUnavailable("broker timed out")
