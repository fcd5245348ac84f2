"""Per-client-address counters for what DRF's throttles cannot see: DRF authenticates, then
checks permissions, then throttles, so a refused credential or an anonymous request refused
by a permission never reaches a throttle. These count in the cache with atomic increments
(parallel attempts are all counted) over a fixed window of the rate's period."""

from __future__ import annotations

from django.core.cache import cache
from rest_framework.exceptions import Throttled
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

PERIOD_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def throttle_rate(scope: str) -> tuple[int, int] | None:
    """``DEFAULT_THROTTLE_RATES[scope]`` ("10/min") as (requests, seconds); None: no limit."""
    rate = api_settings.DEFAULT_THROTTLE_RATES.get(scope)
    if rate is None:
        return None
    count, period = str(rate).split("/")
    return int(count), PERIOD_S[period.strip()[0]]


class ClientAddressThrottle:
    """One counter per (scope, client address). The address is REMOTE_ADDR, or the
    ``NUM_PROXIES``-th address from the right of X-Forwarded-For (DRF's rule): with
    ``NUM_PROXIES`` 0 a client cannot pick its own address with a header."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.rate = throttle_rate(scope)

    def _key(self, request: Request) -> str:
        return f"throttle:{self.scope}:{BaseThrottle().get_ident(request)}"

    def _refuse(self) -> None:
        assert self.rate is not None
        raise Throttled(wait=self.rate[1])

    def refuse_if_exhausted(self, request: Request) -> None:
        """429 when the address has used up its budget in the current window."""
        if self.rate is not None and int(cache.get(self._key(request), 0)) >= self.rate[0]:
            self._refuse()

    def count(self, request: Request) -> int:
        """Count one more for the address; the window starts with its first count."""
        if self.rate is None:
            return 0
        key = self._key(request)
        cache.add(key, 0, timeout=self.rate[1])
        try:
            return int(cache.incr(key))
        except ValueError:  # the window ended between add and incr
            cache.add(key, 1, timeout=self.rate[1])
            return 1

    def count_or_refuse(self, request: Request) -> None:
        if self.rate is not None and self.count(request) > self.rate[0]:
            self._refuse()
