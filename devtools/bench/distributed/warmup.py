"""A running fleet, not a fleet switched on: before a phase measures, every device of its
fleet is heard from once, through the same health primitive ingest uses, and the bench waits
until the events those moves publish are handled.

Why: a device's first message moves it online, a guarded UPDATE, its audit row and a domain
event that the events worker handles. A deployed fleet pays that once per device, when it is
installed or comes back from an outage. A freshly seeded bench fleet would pay it on the
first crossing of every farm instead, and charge a crossing (and ingest's throughput) with
work that a running farm does not do. The first-contact cost is measured on its own here and
printed, so it is not hidden either."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from django.db import transaction

from devices.models import Device
from devices.services.health import devices_heard_from
from devtools.bench import BenchError
from devtools.bench.distributed.procs import CpuMeter
from devtools.bench.distributed.soak_sample import server_pids
from devtools.bench.distributed.stack import Stack
from devtools.bench.fleet import BenchFleet
from events.event_types import DEVICE_CAME_BACK
from events.models import EventInbox
from events.registry import registry

Write = Callable[[str], None]
HANDLED_WITHIN_S = 120.0  # 600 devices' events on a 2-core machine take a few seconds
POLL_S = 0.25


def fleet_online(stack: Stack, fleet: BenchFleet, write: Write) -> None:
    """Every device of ``fleet`` heard from now; returns once the events worker has handled
    every device-back event the moves published (a deadline, not a fixed sleep)."""
    ids = list(
        Device.objects.filter(farm__organization_id=fleet.organization_id).values_list(
            "pk", flat=True
        )
    )
    handlers = len(registry.handlers_for(DEVICE_CAME_BACK.name))
    started = datetime.now(UTC)
    meter = CpuMeter(stack.pids() | server_pids(), servers=True)
    with transaction.atomic():
        moves = devices_heard_from(device_ids=ids, now=started)
    expected = len(moves) * handlers
    handled = EventInbox.objects.filter(event_type=DEVICE_CAME_BACK.name, processed_at__gte=started)
    deadline = time.monotonic() + HANDLED_WITHIN_S
    while (done := handled.count()) < expected:
        if time.monotonic() > deadline:
            stack.check_alive()
            raise BenchError(f"warm-up: {done:,} of {expected:,} device-back events handled")
        time.sleep(POLL_S)
    cpu_s = sum(meter.used_s().values())
    write(
        f"warm-up: {len(moves):,} of {len(ids):,} devices brought online as a running fleet's "
        f"are, {expected:,} events handled in {meter.elapsed_s():.1f}s: first contact costs "
        f"{cpu_s * 1000 / max(len(moves), 1):.1f} ms of CPU per device (stack and servers)"
    )
