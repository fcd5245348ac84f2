"""Device logins on Mosquitto's dynamic security plugin: the broker learns, replaces and
forgets a device's password at once, without a restart (devices.services.credentials).

Guarantees: a change counts as done only when the plugin's reply to it arrives (matched by
correlationData) without an error, within ``MQTT_DYNSEC_TIMEOUT_S``; otherwise
``CredentialsUnavailable``, naming the broker and never the password. Each device gets a
role of its own, ``device:<serial>``, that lets it publish only its telemetry, RPC responses
and state reports and receive only its own RPC requests (deploy/mosquitto.conf denies
everything else). Setting and removing a login are idempotent. Only a serial can be given a
login, so the admin (whose user name holds a "/") can never be overwritten or deleted here.

The admin logs in on the devices' listener (the only one the plugin's control topic works
on), where the broker makes its user name its client id: two processes changing logins at
once take each other's connection over, and the one taken over retries until its deadline.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.reasoncodes import ReasonCode

from config.env import MqttConfig
from devices.mqtt.client import (
    TRANSIENT_CONNACK_CODES,
    backend_client_id,
    connect_kwargs,
    new_client,
)
from devices.mqtt.contract import (
    rpc_request_topic,
    rpc_response_topic,
    state_topic,
    telemetry_topic,
)
from devices.services.credentials import CredentialsUnavailable

logger = logging.getLogger("devices.mqtt.dynsec")

CONTROL_TOPIC = "$CONTROL/dynamic-security/v1"
RESPONSE_TOPIC = f"{CONTROL_TOPIC}/response"
ROLE_PREFIX = "device:"
KEEPALIVE_S = 30
LOOP_STEP_S = 0.05
RETRY_MIN_S, RETRY_MAX_S = 0.02, 0.3  # jittered: two processes taking turns must not collide
# The plugin's replies that mean "already as asked" (Mosquitto 2.0's wording).
ALREADY_DONE = {
    "createRole": "Role already exists",
    "createClient": "Client already exists",
    "deleteClient": "Client not found",
    "deleteRole": "Role not found",
}


def device_role(serial: str) -> str:
    return f"{ROLE_PREFIX}{serial}"


def device_acls(serial: str) -> list[dict[str, Any]]:
    """What a device may do: the topics of the firmware contract under its own serial (a
    serial that cannot be a topic segment raises ValueError)."""
    sends = (telemetry_topic(serial), rpc_response_topic(serial), state_topic(serial))
    request = rpc_request_topic(serial)
    acls = [{"acltype": "publishClientSend", "topic": topic, "allow": True} for topic in sends]
    acls += [
        {"acltype": "subscribePattern", "topic": request, "allow": True},
        {"acltype": "publishClientReceive", "topic": request, "allow": True},
        {"acltype": "unsubscribePattern", "topic": request, "allow": True},
    ]
    return acls


def set_login_commands(username: str, password: str) -> list[dict[str, Any]]:
    """Create-or-replace in one message: the role and the client are created if missing,
    then set to exactly this (``modify*`` replace ACLs, password and roles, and disconnect a
    device still logged in with the old password)."""
    role, acls = device_role(username), device_acls(username)
    roles = [{"rolename": role}]
    return [
        {"command": "createRole", "rolename": role, "acls": acls},
        {"command": "modifyRole", "rolename": role, "acls": acls},
        {"command": "createClient", "username": username, "password": password, "roles": roles},
        {"command": "modifyClient", "username": username, "password": password, "roles": roles},
    ]


def remove_login_commands(username: str) -> list[dict[str, Any]]:
    """Deleting the client also disconnects a device logged in as it."""
    device_acls(username)  # refuses anything but a serial
    return [
        {"command": "deleteClient", "username": username},
        {"command": "deleteRole", "rolename": device_role(username)},
    ]


class _Retry(Exception):
    """The connection failed or was taken over before the reply; the change may be resent."""


class _Refused(Exception):
    """The broker answered, and no retry can change its answer."""


@dataclass
class _Exchange:
    """One command message's progress on one connection, advanced by paho's callbacks."""

    request_id: str
    payload: bytes
    refused: str | None = None
    lost: str | None = None
    responses: list[dict[str, Any]] | None = None
    sent: bool = False

    def on_connect(
        self, client: paho.Client, _: Any, __: Any, reason: ReasonCode, ___: Any
    ) -> None:
        if reason.is_failure:
            if reason.value in TRANSIENT_CONNACK_CODES:
                self.lost = f"connection refused: {reason}"
            else:
                self.refused = f"the admin's login was refused: {reason}"
            return
        client.subscribe(RESPONSE_TOPIC, qos=1)

    def on_subscribe(
        self, client: paho.Client, _: Any, __: int, codes: list[Any], ___: Any
    ) -> None:
        if any(code.is_failure for code in codes):
            self.refused = "the admin may not subscribe to the plugin's replies"
            return
        client.publish(CONTROL_TOPIC, self.payload, qos=1)
        self.sent = True

    def on_publish(self, _: paho.Client, __: Any, ___: int, reason: ReasonCode, ____: Any) -> None:
        if reason.is_failure:
            self.refused = f"the broker refused the admin's command: {reason}"

    def on_message(self, _: paho.Client, __: Any, message: paho.MQTTMessage) -> None:
        try:
            responses = json.loads(message.payload)["responses"]
            mine = str(responses[0].get("correlationData", "")).startswith(self.request_id)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return  # not a reply of the plugin's we can read: not ours
        if mine:
            self.responses = responses


class DynsecCredentials:
    """``CredentialsBackend`` over the plugin's control topic, as the admin of
    ``MQTT_DYNSEC_URL`` (read at each call unless ``config`` is given)."""

    def __init__(self, config: MqttConfig | None = None, timeout_s: float | None = None) -> None:
        self._config = config
        self._timeout_s = timeout_s

    def set_login(self, username: str, password: str) -> None:
        self._run(set_login_commands(username, password))

    def remove_login(self, username: str) -> None:
        self._run(remove_login_commands(username))

    def _settings(self) -> tuple[MqttConfig, float]:
        from django.conf import settings

        config = self._config or settings.MQTT_DYNSEC
        if config is None:
            raise CredentialsUnavailable("MQTT_DYNSEC_URL is not set")
        return config, self._timeout_s or settings.MQTT_DYNSEC_TIMEOUT_S

    def _run(self, commands: list[dict[str, Any]]) -> None:
        config, timeout_s = self._settings()
        broker = f"MQTT broker {config.host}:{config.port}"
        request_id = uuid.uuid4().hex
        for n, command in enumerate(commands):
            command["correlationData"] = f"{request_id}:{n}"
        payload = json.dumps({"commands": commands}).encode()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                responses = _exchange(config, _Exchange(request_id, payload), deadline)
                break
            except _Retry as exc:
                if time.monotonic() + RETRY_MIN_S >= deadline:
                    raise CredentialsUnavailable(
                        f"{broker} did not confirm the login change within {timeout_s}s: {exc}"
                    ) from None
                logger.info("dynamic security on %s: %s; retrying", broker, exc)
                pause = random.uniform(RETRY_MIN_S, RETRY_MAX_S)
                time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
            except _Refused as exc:
                raise CredentialsUnavailable(f"{broker}: {exc}") from None
        _check(broker, commands, responses)


def _exchange(config: MqttConfig, state: _Exchange, deadline: float) -> list[dict[str, Any]]:
    """Connect, subscribe to the replies, send the commands, wait for their reply."""
    client = new_client(backend_client_id("dynsec"), config=config)
    client.on_connect = state.on_connect
    client.on_subscribe = state.on_subscribe
    client.on_publish = state.on_publish
    client.on_message = state.on_message
    client.connect_timeout = max(LOOP_STEP_S, deadline - time.monotonic())
    try:
        client.connect(config.host, config.port, KEEPALIVE_S, **connect_kwargs(client, config))
    except OSError as exc:  # refused, unreachable, TLS failure
        raise _Retry(f"cannot connect: {exc}") from None
    try:
        while state.responses is None:
            rc = client.loop(timeout=LOOP_STEP_S)
            if state.refused:
                raise _Refused(state.refused)
            if state.lost:
                raise _Retry(state.lost)
            if state.responses is not None:
                break
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                phase = "after sending the command" if state.sent else "before the command"
                raise _Retry(f"connection lost {phase}: {paho.error_string(rc)}")
            if time.monotonic() >= deadline:
                raise _Retry("no reply" if state.sent else "no connection")
        return state.responses
    finally:
        client.disconnect()  # sent by the next loop; nothing to wait for
        client.loop(timeout=0)


def _check(broker: str, commands: list[dict[str, Any]], responses: list[dict[str, Any]]) -> None:
    """Every command was answered, without an error or with one that means "already so"."""
    by_id = {str(r.get("correlationData")): r for r in responses if isinstance(r, dict)}
    for command in commands:
        reply = by_id.get(command["correlationData"])
        name = command["command"]
        if reply is None:
            raise CredentialsUnavailable(f"{broker}: no reply to {name}")
        error = reply.get("error")
        if error and error != ALREADY_DONE.get(name):
            subject = command.get("username") or command.get("rolename")
            raise CredentialsUnavailable(f"{broker}: {name} {subject} failed: {error}")
