"""Stage latency an operator sees: each applied command's hops from the pipeline's own
timestamps, in ``manage.py timeline`` and in the ``farm_command_stage_seconds`` histogram."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from prometheus_client import REGISTRY

from automation.models import DeviceCommand
from automation.services.latency import HOPS, command_stage_times
from tests.automation.test_batch_cost import _farms, _stages

pytestmark = pytest.mark.django_db


def _observed(hop: str) -> float:
    return REGISTRY.get_sample_value("farm_command_stage_seconds_count", {"hop": hop}) or 0.0


def test_an_applied_command_has_every_hop_in_order_in_timeline_and_metrics(
    django_capture_on_commit_callbacks: Any,
) -> None:
    before = {hop: _observed(hop) for hop, _, _ in HOPS}
    with django_capture_on_commit_callbacks(execute=True):
        _stages(_farms(1, "lat"))
    intent = DeviceCommand.objects.get(status="applied")
    times = command_stage_times(command_ids=[intent.pk])[intent.pk]
    hops = times.hops()
    assert [hop for hop, _ in hops] == [hop for hop, _, _ in HOPS]
    assert all(seconds >= 0 for _, seconds in hops), hops
    assert all(_observed(hop) == before[hop] + 1 for hop, _, _ in HOPS)
    out = StringIO()
    call_command("timeline", f"intent:{intent.pk}", stdout=out)
    assert "reading→applied" in out.getvalue()
    assert "publish→ack" in out.getvalue()
