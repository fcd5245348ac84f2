"""Where a webhook may go. A contact's URL is checked when it is saved (the model field's
validator and the contact service) and again at every send, because what a name resolves to
can change in between: at send time the host name is resolved once, every address it resolves
to must be allowed, and the connection goes to one of those checked addresses, never to what
the name resolves to a moment later (DNS rebinding).

Refused: loopback, unspecified, link-local, multicast, reserved, shared (carrier-grade NAT),
private and any other address that is not globally routable; an IPv4-mapped or NAT64 IPv6
address is judged by the IPv4 address inside it, and a 6to4 or Teredo one also by the IPv4
addresses it embeds. An address inside a network of ``WEBHOOK_ALLOWED_NETWORKS`` passes
whatever it is (an on-premises receiver). ``http`` is refused unless ``WEBHOOK_ALLOW_HTTP``
(off in the production settings).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) -> the addresses to check and connect to; raises OSError when it cannot.
Resolver = Callable[[str, int], Sequence[str]]
# ((address, port), timeout in seconds) -> a connected TCP socket.
Connector = Callable[[tuple[str, int], float], socket.socket]

DEFAULT_PORTS = {"http": 80, "https": 443}
ALLOW_HINT = "list its network in WEBHOOK_ALLOWED_NETWORKS if it is yours"
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_KINDS = ("loopback", "unspecified", "link_local", "multicast", "reserved")


class WebhookDestinationForbidden(ValueError):
    """The URL may not receive webhooks here; the message says why."""


@dataclass(frozen=True)
class WebhookDestination:
    """A checked URL: connect only to ``addresses`` (each allowed); ``host`` is what the
    request names (Host header, TLS server name and certificate), ``target`` its path."""

    scheme: str
    host: str
    port: int
    target: str
    addresses: tuple[str, ...]


def system_resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to for TCP, in the resolver's order, once each."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass
class _Network:
    resolve: Resolver
    connect: Connector


_network = _Network(resolve=system_resolve, connect=socket.create_connection)


@contextmanager
def webhook_network_override(
    *, resolve: Resolver | None = None, connect: Connector | None = None
) -> Iterator[None]:
    """Swap how names are resolved and connections opened for a block (tests: a name that
    resolves where the test says, a connector that records and never connects)."""
    saved = _network.resolve, _network.connect
    _network.resolve = resolve or saved[0]
    _network.connect = connect or saved[1]
    try:
        yield
    finally:
        _network.resolve, _network.connect = saved


def webhook_scheme_refusal(scheme: str) -> str | None:
    """Why a URL of ``scheme`` may not receive webhooks here, or None."""
    if scheme not in DEFAULT_PORTS:
        return "not an http(s) URL"
    if scheme == "http" and not settings.WEBHOOK_ALLOW_HTTP:
        return "plain http (WEBHOOK_ALLOW_HTTP is off: use https)"
    return None


def webhook_address_refusal(address: str) -> str | None:
    """Why a webhook may not connect to the IP ``address``, or None when it may."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "not an IP address"
    return _refusal(ip, _allowed_networks(settings.WEBHOOK_ALLOWED_NETWORKS))


def webhook_url_check(url: str) -> None:
    """Raise ``WebhookDestinationForbidden`` for a URL no webhook may be saved with: its
    scheme, or an address its host is or resolves to now. A name that does not resolve yet
    passes: the check at send time decides then."""
    _, host, port, _ = _url_parts(url)
    try:
        addresses = _addresses(host, port)
    except OSError:
        return
    _check_every(host, addresses)


def validate_webhook_url(value: str) -> None:
    """The model field's validator, so every form (the admin's) and ``full_clean`` refuse it."""
    try:
        webhook_url_check(value)
    except WebhookDestinationForbidden as exc:
        raise ValidationError(str(exc), code="destination_forbidden") from None


def webhook_destination_resolve(url: str) -> WebhookDestination:
    """Where a send may connect: the host resolved once and every address allowed. Raises
    ``WebhookDestinationForbidden``, or ``OSError`` when the name does not resolve (worth a
    retry, like any network error)."""
    scheme, host, port, target = _url_parts(url)
    addresses = _addresses(host, port)
    _check_every(host, addresses)
    return WebhookDestination(scheme, host, port, target, addresses)


def webhook_connect(destination: WebhookDestination, timeout_s: float) -> socket.socket:
    """A TCP connection to the first checked address that answers; the name is not resolved
    again, so nothing it resolves to after the check is ever reached."""
    error: OSError = ConnectionError(f"{destination.host} has no address")
    for address in destination.addresses:
        try:
            return _network.connect((address, destination.port), timeout_s)
        except OSError as exc:
            error = exc
    raise error


def _url_parts(url: str) -> tuple[str, str, int, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise WebhookDestinationForbidden(f"not a valid URL: {url!r}") from None
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    why = webhook_scheme_refusal(scheme) or ("" if host else "no host name")
    if why:
        raise WebhookDestinationForbidden(f"webhooks may not go to {url!r}: {why}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return scheme, host, port or DEFAULT_PORTS[scheme], target


def _addresses(host: str, port: int) -> tuple[str, ...]:
    """An IP literal as itself (nothing to resolve), a name resolved once."""
    try:
        return (str(ipaddress.ip_address(host)),)
    except ValueError:
        pass
    addresses = tuple(_network.resolve(host, port))
    if not addresses:
        raise socket.gaierror(f"{host} resolves to no address")
    return addresses


def _check_every(host: str, addresses: Iterable[str]) -> None:
    """One refused address refuses the name: which one a client gets is not ours to choose."""
    for address in addresses:
        why = webhook_address_refusal(address)
        if why is not None:
            via = "" if address == host else f" ({address})"
            raise WebhookDestinationForbidden(
                f"webhooks may not go to {host}{via}: {why} ({ALLOW_HINT})"
            )


@lru_cache(maxsize=8)
def _networks(cidrs: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def _allowed_networks(value: str | Iterable[str]) -> tuple[IPNetwork, ...]:
    items = value.split(",") if isinstance(value, str) else value
    return _networks(tuple(item.strip() for item in items if item.strip()))


def _refusal(ip: IPAddress, allowed: tuple[IPNetwork, ...]) -> str | None:
    if any(ip in network for network in allowed):
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        wrapped = ip.ipv4_mapped or (
            ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else None
        )
        if wrapped is not None:  # the IPv4 address is where the packets go
            why = _refusal(wrapped, allowed)
            return None if why is None else f"{why} (IPv4 {wrapped})"
    kind = _kind(ip)
    if kind is not None:
        return kind
    for inner in _tunnelled_ipv4(ip):
        why = _refusal(inner, allowed)
        if why is not None:
            return f"{why} (tunnelled to IPv4 {inner})"
    return None


def _kind(ip: IPAddress) -> str | None:
    for kind in _KINDS:
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    if ip in _SHARED:
        return "shared (carrier-grade NAT)"
    if ip.is_private or getattr(ip, "is_site_local", False):
        return "private"
    return None if ip.is_global else "not globally routable"


def _tunnelled_ipv4(ip: IPAddress) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses a 6to4 or Teredo address carries packets to."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return ()
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    return ip.teredo or ()
