"""Webhooks cannot reach inside: a URL to a loopback, private, link-local, multicast, reserved
or otherwise non-global address is refused when the contact is saved and again at send
(``destination_forbidden``, nothing reaches the listener); the name is resolved once per send
and only the checked address is connected to (no DNS rebinding); WEBHOOK_ALLOWED_NETWORKS lets
a deployment's own network through; production sends https only unless WEBHOOK_ALLOW_HTTP.

No test opens a socket outside loopback: names resolve through a test resolver, and the test
connector records every address and connects only to loopback (anything else is refused as if
nothing listened there)."""

from __future__ import annotations

import http.server
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from config.env import SettingError, env_networks
from notifications.channels.webhook import PinnedHTTPSConnection, tls_context
from notifications.destinations import (
    WebhookDestinationForbidden,
    webhook_address_refusal,
    webhook_destination_resolve,
    webhook_network_override,
    webhook_scheme_refusal,
)
from notifications.models import ExternalContact, Notification, NotificationAttempt
from notifications.services import notification_deliver, notification_schedule
from notifications.services.contacts import external_contact_create
from notifications.webhook_secrets import webhook_secret_key_id, webhook_secret_salt_new
from tests.config.entry_points import MANAGE_CHECK, env_production, one_line_naming, run
from tests.devices.factories import FarmFactory
from tests.notifications.conftest import NOW

PUBLIC = "93.184.215.14"  # a global unicast address; never connected to (see the connector)
REFUSED = [
    "10.0.0.1",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "224.0.0.1",
    "0.0.0.0",
    "240.0.0.1",
    "fd00::1",
    "fe80::1",
    "::ffff:10.0.0.1",
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "2002:a00:1::1",  # 6to4 of 10.0.0.1
    "ff02::1",
]


@dataclass
class Network:
    """The test resolver (``answers``: host -> the answers of successive lookups, the last one
    repeating) and the recording connector, which connects to loopback only."""

    answers: dict[str, list[list[str]]] = field(default_factory=dict)
    resolved: list[str] = field(default_factory=list)
    connected: list[tuple[str, int]] = field(default_factory=list)

    def answer(self, host: str, *lookups: list[str]) -> None:
        self.answers[host] = list(lookups)

    def resolve(self, host: str, port: int) -> list[str]:
        self.resolved.append(host)
        lookups = self.answers.get(host)
        if not lookups:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return lookups.pop(0) if len(lookups) > 1 else lookups[0]

    def connect(self, address: tuple[str, int], timeout_s: float) -> socket.socket:
        self.connected.append(address)
        if not ipaddress.ip_address(address[0]).is_loopback:
            raise ConnectionRefusedError(f"the test connector never connects to {address[0]}")
        return socket.create_connection(address, timeout_s)


@pytest.fixture
def network() -> Iterator[Network]:
    net = Network()
    with webhook_network_override(resolve=net.resolve, connect=net.connect):
        yield net


@dataclass
class Listener:
    """A real HTTP server on loopback that records the headers of every request reaching it."""

    host: str  # as it appears in a URL: 127.0.0.1 or [::1]
    port: int
    requests: list[dict[str, str]]

    def url(self, host: str | None = None, scheme: str = "http") -> str:
        return f"{scheme}://{host or self.host}:{self.port}/hook"


@contextmanager
def listening(address: str) -> Iterator[Listener]:
    requests: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            requests.append(dict(self.headers.items()))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

    try:
        server = Server((address, 0), Handler)
    except OSError as exc:
        pytest.skip(f"cannot listen on {address}: {exc}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host = f"[{address}]" if ":" in address else address
        yield Listener(host, server.server_address[1], requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def listener() -> Iterator[Listener]:
    with listening("127.0.0.1") as server:
        yield server


def contact_saved_before_the_check(url: str) -> ExternalContact:
    """A webhook contact written without validation, as rows saved before this rule were (and
    as a name that resolved elsewhere when it was saved is)."""
    return ExternalContact.objects.create(
        farm=FarmFactory(),
        name="Integrator",
        webhook_url=url,
        webhook_secret_salt=webhook_secret_salt_new(),
        webhook_secret_key_id=webhook_secret_key_id(),
    )


def send(contact: ExternalContact, template: str, *, key: str = "rem:dest") -> Notification:
    """Hand a notification to the contact's webhook and deliver it once, as the worker does."""
    [coordinate] = notification_schedule(
        source_key=key,
        farm_id=contact.farm_id,
        recipient_policy="external_contacts",
        template_name=template,
        channels=["webhook"],
        context={"title": "Vaccinate", "who": "you", "due_on": NOW.date(), "due_at": NOW},
        now=NOW,
    )
    notification_deliver(notification_id=coordinate["notification_id"], now=NOW)
    return Notification.objects.get(pk=coordinate["notification_id"])


def assert_refused_at_send(row: Notification) -> None:
    assert (row.status, row.status_reason) == ("failed", "destination_forbidden")
    attempt = NotificationAttempt.objects.filter(notification=row).latest("attempt")
    assert attempt.outcome == "permanent_error" and "may not go to" in attempt.error


def assert_refused_at_save(url: str) -> None:
    contact = ExternalContact(farm=FarmFactory(), name="Integrator", webhook_url=url)
    with pytest.raises(ValidationError) as refused:
        contact.full_clean()
    assert [e.code for e in refused.value.error_dict["webhook_url"]] == ["destination_forbidden"]
    before = ExternalContact.objects.count()
    with pytest.raises(WebhookDestinationForbidden):
        external_contact_create(farm_id=contact.farm_id, name="Integrator", webhook_url=url)
    assert ExternalContact.objects.count() == before


# --- when the contact is saved --------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
def test_a_loopback_webhook_is_refused_when_the_contact_is_saved(network, host):
    assert_refused_at_save(f"http://{host}:8080/hook")
    assert network.resolved == [] and network.connected == []


@pytest.mark.django_db
@pytest.mark.parametrize("address", REFUSED)
def test_private_link_local_and_reserved_destinations_are_refused_at_save(network, address):
    host = f"[{address}]" if ":" in address else address
    assert_refused_at_save(f"https://{host}/hook")
    assert network.connected == []


@pytest.mark.django_db
def test_a_name_that_resolves_to_loopback_is_refused_at_save(network):
    network.answer("hooks.example.test", ["127.0.0.1"])
    assert_refused_at_save("https://hooks.example.test/hook")
    network.answer("mixed.example.test", [PUBLIC, "10.0.0.1"])
    assert_refused_at_save("https://mixed.example.test/hook")
    assert network.connected == []


@pytest.mark.django_db
def test_a_public_name_and_one_that_does_not_resolve_yet_are_saved(network):
    network.answer("hooks.example.com", [PUBLIC])
    farm = FarmFactory()
    for url in ("https://hooks.example.com/in", "https://not-yet.example.com/in"):
        ExternalContact(farm=farm, name="Integrator", webhook_url=url).full_clean()
        contact, _ = external_contact_create(farm_id=farm.pk, name="Integrator", webhook_url=url)
        assert contact.webhook_url == url
    assert network.connected == []


# --- at send -------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_a_loopback_webhook_is_refused_at_send_and_nothing_arrives(network, due_template, address):
    with listening(address) as server:
        row = send(contact_saved_before_the_check(server.url()), due_template)
        assert_refused_at_send(row)
        assert server.requests == [] and network.connected == []


@pytest.mark.django_db
def test_a_name_that_resolves_to_loopback_is_refused_at_send(network, listener, due_template):
    network.answer("hooks.example.test", ["127.0.0.1"])
    row = send(contact_saved_before_the_check(listener.url("hooks.example.test")), due_template)
    assert_refused_at_send(row)
    assert network.resolved == ["hooks.example.test"]
    assert listener.requests == [] and network.connected == []


@pytest.mark.django_db
@pytest.mark.parametrize("address", REFUSED)
def test_private_destinations_are_refused_at_send_without_connecting(
    network, due_template, address
):
    network.answer("inside.example.test", [address])
    row = send(contact_saved_before_the_check("https://inside.example.test/hook"), due_template)
    assert_refused_at_send(row)
    assert network.connected == []


@pytest.mark.django_db
def test_one_public_and_one_private_address_is_refused_as_a_whole(network, due_template):
    network.answer("mixed.example.test", [PUBLIC, "10.0.0.1"])
    row = send(contact_saved_before_the_check("https://mixed.example.test/hook"), due_template)
    assert_refused_at_send(row)
    assert network.connected == []


@pytest.mark.django_db
def test_the_name_is_resolved_once_per_send_and_only_the_checked_address_is_connected(
    network, listener, due_template
):
    """DNS rebinding: the name answers a public address first and loopback afterwards. A
    client that resolved again to connect would reach the listener; this one never does."""
    network.answer("rebind.example.test", [PUBLIC], ["127.0.0.1"])
    row = send(contact_saved_before_the_check(listener.url("rebind.example.test")), due_template)
    assert network.resolved == ["rebind.example.test"]
    assert network.connected == [(PUBLIC, listener.port)]
    assert (row.status, row.status_reason) == ("queued", "transient_error")  # nothing answered
    notification_deliver(notification_id=row.pk, now=row.next_attempt_at)
    row.refresh_from_db()
    assert_refused_at_send(row)
    assert network.resolved == ["rebind.example.test"] * 2
    assert network.connected == [(PUBLIC, listener.port)]
    assert listener.requests == []


@pytest.mark.django_db
def test_a_name_that_does_not_resolve_at_send_is_retried(network, due_template):
    row = send(contact_saved_before_the_check("https://gone.example.test/hook"), due_template)
    assert (row.status, row.status_reason) == ("queued", "transient_error")
    attempt = NotificationAttempt.objects.get(notification=row)
    assert attempt.error.startswith("network error: gaierror")


@pytest.mark.django_db
def test_allowed_networks_let_loopback_through_to_the_checked_address(
    network, listener, due_template, settings
):
    settings.WEBHOOK_ALLOWED_NETWORKS = ("127.0.0.0/8",)
    network.answer("hooks.example.test", ["127.0.0.1"])
    url = listener.url("hooks.example.test")
    contact, _ = external_contact_create(
        farm_id=FarmFactory().pk, name="On premises", webhook_url=url, with_webhook_secret=True
    )
    row = send(contact, due_template)
    assert row.status == "sent"
    assert network.resolved == ["hooks.example.test"] * 2  # once at save, once at send
    assert network.connected == [("127.0.0.1", listener.port)]
    [request] = listener.requests
    assert request["Host"] == f"hooks.example.test:{listener.port}"


@pytest.mark.django_db
def test_plain_http_is_refused_at_save_and_at_send_when_only_https_is_allowed(
    network, listener, due_template, settings
):
    settings.WEBHOOK_ALLOW_HTTP = False
    settings.WEBHOOK_ALLOWED_NETWORKS = ("127.0.0.0/8",)
    assert_refused_at_save(listener.url())
    assert_refused_at_send(send(contact_saved_before_the_check(listener.url()), due_template))
    assert listener.requests == [] and network.connected == []


class RecordingTLS:
    """Stands in for an SSL context: records the server name TLS would be asked for and
    leaves the socket plain, so the test reads the request as sent."""

    def __init__(self) -> None:
        self.server_hostnames: list[str | None] = []

    def wrap_socket(self, sock: socket.socket, server_hostname: str | None = None) -> Any:
        self.server_hostnames.append(server_hostname)
        return sock


def test_https_connects_to_the_checked_address_with_the_host_name_for_tls_and_host():
    client, receiver = socket.socketpair()  # no network at all
    connected: list[tuple[str, int]] = []

    def connect(address: tuple[str, int], timeout_s: float) -> socket.socket:
        connected.append(address)
        return client

    with webhook_network_override(resolve=lambda host, port: [PUBLIC], connect=connect):
        destination = webhook_destination_resolve("https://hooks.example.com/in?farm=1")
        tls = RecordingTLS()
        connection = PinnedHTTPSConnection(destination, timeout_s=2, context=tls)
        receiver.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        connection.request("POST", destination.target, body=b"{}")
        assert connection.getresponse().status == 204
        connection.close()
    head = receiver.recv(65536).split(b"\r\n")
    receiver.close()
    assert connected == [(PUBLIC, 443)]
    assert tls.server_hostnames == ["hooks.example.com"]
    assert head[0] == b"POST /in?farm=1 HTTP/1.1" and b"Host: hooks.example.com" in head
    real = tls_context()  # what the channel wraps with: the certificate must match the name
    assert real.check_hostname and real.verify_mode == ssl.CERT_REQUIRED


# --- the policy and its settings -------------------------------------------------------------


@pytest.mark.parametrize("address", [*REFUSED, "127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_the_address_policy_refuses_every_non_global_address(settings, address):
    settings.WEBHOOK_ALLOWED_NETWORKS = ()
    assert webhook_address_refusal(address) is not None


def test_the_address_policy_passes_global_addresses_and_allowed_networks(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ("10.20.0.0/16", "127.0.0.0/8")
    for address in (PUBLIC, "2606:4700:4700::1111", "10.20.3.4", "127.0.0.1", "::ffff:127.0.0.1"):
        assert webhook_address_refusal(address) is None, address
    assert webhook_address_refusal("10.21.0.1") == "private"


def test_https_only_refuses_http(settings):
    settings.WEBHOOK_ALLOW_HTTP = False
    assert "WEBHOOK_ALLOW_HTTP" in (webhook_scheme_refusal("http") or "")
    assert webhook_scheme_refusal("https") is None
    settings.WEBHOOK_ALLOW_HTTP = True
    assert webhook_scheme_refusal("http") is None
    assert webhook_scheme_refusal("ftp") == "not an http(s) URL"


PRINT_WEBHOOK_SETTINGS = (
    "import django; django.setup(); from django.conf import settings as s; "
    "print(s.WEBHOOK_ALLOW_HTTP, ','.join(s.WEBHOOK_ALLOWED_NETWORKS) or '-')"
)


def test_production_sends_https_only_unless_told_and_reads_the_allowed_networks():
    argv = [MANAGE_CHECK[0], "-c", PRINT_WEBHOOK_SETTINGS]
    assert run(argv, env_production()).stdout.split() == ["False", "-"]
    allowed = env_production(WEBHOOK_ALLOW_HTTP="true", WEBHOOK_ALLOWED_NETWORKS="10.20.0.0/16")
    assert run(argv, allowed).stdout.split() == ["True", "10.20.0.0/16"]


def test_a_bad_allowed_network_stops_start_up_with_one_line_naming_it(monkeypatch):
    env = env_production(WEBHOOK_ALLOWED_NETWORKS="10.20.0.0/16,10.0.0.0/33")
    assert "10.0.0.0/33" in one_line_naming(run(MANAGE_CHECK, env), "WEBHOOK_ALLOWED_NETWORKS")
    monkeypatch.setenv("WEBHOOK_ALLOWED_NETWORKS", " 10.20.0.0/16, 127.0.0.1 ,fd00::/8")
    assert env_networks("WEBHOOK_ALLOWED_NETWORKS") == ("10.20.0.0/16", "127.0.0.1/32", "fd00::/8")
    monkeypatch.setenv("WEBHOOK_ALLOWED_NETWORKS", "10.0.0.1/8")  # host bits: ambiguous
    with pytest.raises(SettingError, match=r"^WEBHOOK_ALLOWED_NETWORKS="):
        env_networks("WEBHOOK_ALLOWED_NETWORKS")
