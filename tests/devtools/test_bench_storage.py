"""`manage.py bench --storage`: bytes per table, per index and per stored value after VACUUM
FULL on PostgreSQL, next to the target; on SQLite it says why it cannot measure. Sizes are the
bench's output; the test asserts what it prints and that it leaves no row behind."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from automation.models import AutomationEndpointEvent
from common.models import Organization
from devices.models import Telemetry
from devtools.bench.storage import TARGET_BYTES_PER_VALUE, storage_bench

pytestmark = pytest.mark.django_db(transaction=True)


def _bench(*args: str) -> str:
    out = io.StringIO()
    call_command("bench", "--storage", *args, stdout=out)
    return out.getvalue()


def test_on_sqlite_the_storage_bench_says_why_it_is_skipped(on_postgres: bool) -> None:
    if on_postgres:
        pytest.skip("runs on SQLite only")
    text = _bench("--messages", "4", "--devices", "2")
    assert "storage: skipped on sqlite" in text and "PostgreSQL" in text
    assert not Telemetry.objects.exists()


@pytest.mark.postgres
def test_the_storage_bench_prints_each_table_and_index_and_the_bytes_per_value() -> None:
    text = _bench("--messages", "200", "--devices", "4")
    events_table = AutomationEndpointEvent._meta.db_table
    assert text.startswith("command: manage.py bench --storage --devices 4 --messages 200")
    # 200 messages of 4 values; an event only for the values the fleet's rule reads (the
    # first sensor's temp: one message in 4).
    for table, rows in ((Telemetry._meta.db_table, "200"), (events_table, "50")):
        heap = next(line for line in text.splitlines() if line.startswith(table))
        assert heap.split()[1:3] == ["heap", rows]
        assert int(heap.split()[3].replace(",", "")) > 0, heap  # partitions summed
    assert "(only for a value a rule, a threshold reminder or a watchdog reads; 50 of 800" in text
    assert "index telemetry_once" in text and "index event_once" in text
    index_bytes = {
        line.split()[1]: int(line.split()[2].replace(",", ""))
        for line in text.splitlines()
        if line.split()[:1] == ["index"]
    }
    # Every index holding the rows (the pending-events one is partial: empty once evaluated).
    del index_bytes["event_pending_idx"]
    assert index_bytes and all(n > 0 for n in index_bytes.values()), index_bytes
    assert "per stored value (800 values): 0.0 B" not in text
    assert "per stored value (800 values)" in text
    assert f"target ≤ {TARGET_BYTES_PER_VALUE} B" in text
    assert not Organization.objects.filter(name__startswith="bench-").exists()
    assert not Telemetry.objects.exists() and not AutomationEndpointEvent.objects.exists()


@pytest.mark.postgres
def test_a_stored_value_costs_at_most_the_target() -> None:
    """The storage target, asserted on the bench's own fleet (one endpoint read by a rule,
    the rest kept in their telemetry rows): telemetry and events, indexes included, after
    VACUUM FULL. 2,000 messages keep an 8 KiB page's rounding under 5 B a value."""
    result = storage_bench(devices=20, messages=2000, batch=200)
    assert result.values == 8000
    assert 0 < result.per_value() <= TARGET_BYTES_PER_VALUE, result.table()
