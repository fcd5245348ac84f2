"""Device logins through Mosquitto's dynamic security plugin, on the deployed broker
configuration (tests/devices/deployed_broker.py): a login set by the backend opens the
device's own topics at once and nothing else; rotating it shuts the old password out (and
the device still connected with it); revoking it shuts the device out; every change is
idempotent; a broker that does not answer fails within the deadline, naming the broker and
never the password; retiring a device revokes its login, or fails and leaves it unretired."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as paho
import pytest
from django.test import override_settings

from config.env import MqttConfig
from devices.models import Device, DeviceStatus
from devices.mqtt.client import (
    backend_client_id,
    start_client,
)
from devices.mqtt.dynsec import DynsecCredentials
from devices.services import device_status_change
from devices.services.credentials import (
    CredentialsUnavailable,
    _backend,
    device_credentials_issue,
)
from tests.devices.deployed_broker import (
    DeployedMosquitto,
    Login,
    dynsec_broker,
    new_login,
    publish,
    refused,
)
from tests.devices.factories import DeviceFactory
from tests.mqtt_fixtures import LOOPBACK, free_port
from tests.waiting import WAIT_S

__all__ = ["dynsec_broker"]  # the fixture, imported for this module's tests
DYNSEC_BACKEND = "devices.mqtt.dynsec.DynsecCredentials"
UNREACHABLE_TIMEOUT_S = 0.5


class Inbox:
    """(topic, payload) as received; waits on a queue, never sleeps."""

    def __init__(self) -> None:
        self.messages: queue.Queue[tuple[str, bytes]] = queue.Queue()

    def __call__(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        self.messages.put((message.topic, bytes(message.payload)))

    def until(self, sentinel: bytes) -> list[tuple[str, bytes]]:
        """Everything up to the sentinel: Mosquitto routes each publish before it acknowledges
        it, so what was acknowledged before the sentinel arrives before it or never."""
        received: list[tuple[str, bytes]] = []
        while not received or received[-1][1] != sentinel:
            received.append(self.messages.get(timeout=WAIT_S))
        return received


@pytest.fixture
def clients() -> Iterator[list[paho.Client]]:
    started: list[paho.Client] = []
    yield started
    for client in started:
        client.disconnect()
        client.loop_stop()


def device(
    broker: DeployedMosquitto, clients: list[paho.Client], login: Login, **options: Any
) -> paho.Client:
    client = start_client(login.username, config=broker.config(login), **options)
    clients.append(client)
    return client


def watch(broker: DeployedMosquitto, clients: list[paho.Client], subscribe: list[str]) -> Inbox:
    """A backend subscriber on the backend's listener."""
    inbox = Inbox()
    client = start_client(
        backend_client_id("test", uuid.uuid4().hex[:8]),
        config=broker.config(broker.backend),
        subscribe=subscribe,
        on_message=inbox,
    )
    clients.append(client)
    return inbox


def disconnected_signal(client: paho.Client) -> threading.Event:
    gone = threading.Event()
    client.on_disconnect = lambda *_: gone.set()
    client.reconnect_delay_set(min_delay=60, max_delay=60)  # no retry during the test
    return gone


def test_a_login_set_through_the_backend_publishes_under_its_own_serial(
    dynsec_broker: DeployedMosquitto, clients: list[paho.Client]
) -> None:
    a = new_login()
    assert refused(dynsec_broker.config(a))  # unknown until the backend sets it
    dynsec_broker.credentials().set_login(a.username, a.password)
    inbox = watch(dynsec_broker, clients, ["devices/+/telemetry"])

    publish(device(dynsec_broker, clients, a), f"devices/{a.username}/telemetry", b"hello")

    assert inbox.until(b"hello") == [(f"devices/{a.username}/telemetry", b"hello")]


def test_another_devices_topics_stay_closed(
    dynsec_broker: DeployedMosquitto, clients: list[paho.Client]
) -> None:
    a, b = new_login(), new_login()
    credentials = dynsec_broker.credentials()
    for login in (a, b):
        credentials.set_login(login.username, login.password)
    inbox = watch(dynsec_broker, clients, ["devices/#"])
    inbox_b = Inbox()
    request_b = f"devices/{b.username}/rpc/request"
    device(dynsec_broker, clients, b, subscribe=[request_b], on_message=inbox_b)
    inbox_a = Inbox()
    device_a = device(dynsec_broker, clients, a, on_message=inbox_a)
    granted: list[list[Any]] = []
    device_a.on_subscribe = lambda _c, _u, _m, codes, _p: granted.append(codes)

    for kind in ("telemetry", "state", "rpc/response", "rpc/request"):
        publish(device_a, f"devices/{b.username}/{kind}", b"forged")
    device_a.subscribe([(request_b, 1), ("devices/#", 1), ("#", 1)])
    publish(device_a, f"devices/{a.username}/state", b"sentinel-a")
    backend_config = dynsec_broker.config(dynsec_broker.backend)
    backend = start_client(backend_client_id("test", uuid.uuid4().hex[:8]), config=backend_config)
    clients.append(backend)
    publish(backend, request_b, b"for-b")

    assert inbox.until(b"sentinel-a") == [(f"devices/{a.username}/state", b"sentinel-a")]
    assert inbox_b.until(b"for-b") == [(request_b, b"for-b")]
    assert len(granted) == 1 and all(code.is_failure for code in granted[0])
    assert inbox_a.messages.empty()


def test_rotation_shuts_the_old_password_out_at_once(
    dynsec_broker: DeployedMosquitto, clients: list[paho.Client]
) -> None:
    old = new_login()
    credentials = dynsec_broker.credentials()
    credentials.set_login(old.username, old.password)
    connected = device(dynsec_broker, clients, old)
    gone = disconnected_signal(connected)

    new = Login(old.username, "rotated-" + old.password)
    credentials.set_login(new.username, new.password)

    assert gone.wait(WAIT_S), "the device logged in with the old password stayed connected"
    assert refused(dynsec_broker.config(old))
    assert not refused(dynsec_broker.config(new))


def test_a_revoked_device_cannot_connect(
    dynsec_broker: DeployedMosquitto, clients: list[paho.Client]
) -> None:
    a = new_login()
    credentials = dynsec_broker.credentials()
    credentials.set_login(a.username, a.password)
    gone = disconnected_signal(device(dynsec_broker, clients, a))

    credentials.remove_login(a.username)

    assert gone.wait(WAIT_S), "the revoked device stayed connected"
    assert refused(dynsec_broker.config(a))


def test_setting_and_removing_a_login_are_idempotent(dynsec_broker: DeployedMosquitto) -> None:
    a = new_login()
    credentials = dynsec_broker.credentials()
    credentials.remove_login(a.username)  # never had one
    credentials.set_login(a.username, a.password)
    credentials.set_login(a.username, a.password)
    assert not refused(dynsec_broker.config(a))
    credentials.remove_login(a.username)
    credentials.remove_login(a.username)
    assert refused(dynsec_broker.config(a))


def test_logins_changed_by_several_processes_at_once_all_take_effect(
    dynsec_broker: DeployedMosquitto,
) -> None:
    """The admin's connections take each other over (its user name is its client id): each
    change is retried until confirmed."""
    logins = [new_login() for _ in range(6)]
    errors: list[Exception] = []

    def set_login(login: Login) -> None:
        try:
            dynsec_broker.credentials().set_login(login.username, login.password)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=set_login, args=(login,)) for login in logins]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert not any(refused(dynsec_broker.config(login)) for login in logins)


def test_only_a_serial_can_be_given_a_login(dynsec_broker: DeployedMosquitto) -> None:
    credentials = dynsec_broker.credentials()
    for name in (dynsec_broker.admin.username, "devices/#", "a+b"):
        with pytest.raises(ValueError):
            credentials.set_login(name, "taken-over")
        with pytest.raises(ValueError):
            credentials.remove_login(name)
    assert not refused(dynsec_broker.config(dynsec_broker.admin))


def test_an_unreachable_broker_fails_within_the_timeout_naming_it_not_the_password() -> None:
    port = free_port()  # nothing listens there
    config = MqttConfig(LOOPBACK, port, "farm-dynsec/admin", "admin-secret", False, False, 5, None)
    started = time.monotonic()
    with pytest.raises(CredentialsUnavailable) as raised:
        DynsecCredentials(config, UNREACHABLE_TIMEOUT_S).set_login("SN-UNREACHABLE", "dev-secret")
    assert time.monotonic() - started < UNREACHABLE_TIMEOUT_S + 1.0
    message = str(raised.value)
    assert f"{LOOPBACK}:{port}" in message
    assert "admin-secret" not in message and "dev-secret" not in message


def test_a_wrong_admin_password_fails_at_once(dynsec_broker: DeployedMosquitto) -> None:
    wrong = Login(dynsec_broker.admin.username, "not-the-password")
    started = time.monotonic()
    with pytest.raises(CredentialsUnavailable, match="refused"):
        DynsecCredentials(dynsec_broker.config(wrong), 5.0).set_login("SN-X", "dev-secret")
    assert time.monotonic() - started < 2.0


@pytest.fixture
def dynsec_settings(dynsec_broker: DeployedMosquitto) -> Iterator[DeployedMosquitto]:
    """The product configured as DEVICE_CREDENTIALS=dynsec with MQTT_DYNSEC_URL naming the
    private broker's admin."""
    _backend.cache_clear()
    with override_settings(
        DEVICE_CREDENTIALS_BACKEND=DYNSEC_BACKEND,
        MQTT_DYNSEC=dynsec_broker.config(dynsec_broker.admin),
        MQTT_DYNSEC_TIMEOUT_S=UNREACHABLE_TIMEOUT_S * 4,
    ):
        yield dynsec_broker
    _backend.cache_clear()


@pytest.mark.django_db
def test_issued_credentials_open_the_broker_and_a_reissue_rotates_them(
    dynsec_settings: DeployedMosquitto,
) -> None:
    serial = f"SN-{uuid.uuid4().hex[:8]}"
    first = device_credentials_issue(serial_number=serial)
    assert first is not None and first.username == serial
    assert not refused(dynsec_settings.config(Login(first.username, first.password)))

    second = device_credentials_issue(serial_number=serial)

    assert second is not None and second.password != first.password
    assert refused(dynsec_settings.config(Login(first.username, first.password)))
    assert not refused(dynsec_settings.config(Login(second.username, second.password)))


@pytest.mark.django_db
def test_retiring_a_device_revokes_its_login_and_reactivating_does_not_restore_it(
    dynsec_settings: DeployedMosquitto,
) -> None:
    device_row = DeviceFactory(serial_number=f"SN-{uuid.uuid4().hex[:8]}")
    login = device_credentials_issue(serial_number=device_row.serial_number)
    assert login is not None
    config = dynsec_settings.config(Login(login.username, login.password))

    assert device_status_change(device_id=device_row.pk, status=DeviceStatus.RETIRED, actor="ops")
    assert refused(config)

    assert device_status_change(device_id=device_row.pk, status=DeviceStatus.ACTIVE, actor="ops")
    assert refused(config)


@pytest.mark.django_db
def test_a_broker_that_does_not_confirm_leaves_the_device_unretired(
    dynsec_settings: DeployedMosquitto,
) -> None:
    device_row = DeviceFactory(serial_number=f"SN-{uuid.uuid4().hex[:8]}")
    login = device_credentials_issue(serial_number=device_row.serial_number)
    assert login is not None
    dynsec_settings.stop()

    with pytest.raises(CredentialsUnavailable):
        device_status_change(device_id=device_row.pk, status=DeviceStatus.RETIRED, actor="ops")

    assert Device.objects.get(pk=device_row.pk).status == DeviceStatus.ACTIVE
    dynsec_settings.start()  # the login is still there: retiring again revokes it
    assert not refused(dynsec_settings.config(Login(login.username, login.password)))
    assert device_status_change(device_id=device_row.pk, status=DeviceStatus.RETIRED, actor="ops")
    assert refused(dynsec_settings.config(Login(login.username, login.password)))
