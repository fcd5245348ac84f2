"""What the MQTT bridge commits before it acknowledges a device message (``BRIDGE_STORE``):
telemetry with its endpoint events, and device replies as receipts, each batch in one
transaction through the same services as every other way in (``telemetry_ingest``,
``device_messages_record``). Only then does the bridge send its PUBACKs, so what the broker
was told is accepted is in the database first.

The Celery messages that follow carry ids only: evaluation of the new events, reconciliation
of the commands whose evidence changed (one nudge per flush: a device's ack, state report and
telemetry commonly cross in one flush, and then in one reconcile task). A nudge that is lost
(the Celery broker down or restarted empty) only delays that work until beat's sweeps find
it in SQL: pending events (``endpoint_events_sweep``) and commands past their ack deadline or
applied window (``commands_sweep``), which decide on the stored receipts."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cache

from django.db import close_old_connections

from automation.services.ingest import telemetry_ingest
from automation.services.receipts import device_messages_record
from automation.services.spine import Committed, Hop, hand_on, hand_on_commit
from common.handoff import Nudger
from config.metrics import metrics_bridge_stored
from config.task_names import TELEMETRY_INGEST
from devices.directory import DeviceDirectory
from devices.mqtt.messages import DeviceMessage, InboundTelemetry, WireRow

# One per process: its pause after a failed nudge spans every batch of the process, and the
# directory spares each batch its device and endpoint reads while no configuration changed.
_nudge = Nudger()


def _nudged(hop: Hop) -> None:
    _nudge(hop.task, hop.ids)


@cache
def _devices() -> DeviceDirectory:
    return DeviceDirectory()


class _Flush(threading.local):
    """What one flush of a bridge (one loop thread) hands to reconciliation: a device's ack
    and state report (device replies) and its telemetry that proves the value (telemetry)
    are committed in two groups of one flush, and cross to one reconcile task."""

    def __init__(self) -> None:
        self.reconcile: dict[int, None] = {}


_flush = _Flush()


def bridge_batch_store(group: str, batch: list[WireRow]) -> None:
    """Commit one batch of the bridge's ``group`` (``TELEMETRY_INGEST`` or
    ``DEVICE_MESSAGES_RECONCILE``), then nudge the next stage. Raises when the commit failed: the
    bridge then acknowledges nothing of the batch and retries it. A connection the database
    closed (a restart, a failover) is replaced first, as a long-running process must."""
    close_old_connections()
    try:
        if group == TELEMETRY_INGEST:
            telemetry_store(messages=[InboundTelemetry.from_task_arg(row) for row in batch])
        else:
            replies_store(messages=[DeviceMessage.from_task_arg(row) for row in batch])
    except Exception:
        close_old_connections()  # a broken connection is not reused for the retry
        _devices().forget()  # nor a device deleted meanwhile: the retry reads them afresh
        raise


def bridge_flush_end() -> None:
    """The end of one flush (``BRIDGE_FLUSH_END``): the commands whose evidence it committed,
    in either group, nudged for reconciliation once."""
    ids, _flush.reconcile = list(_flush.reconcile), {}
    hand_on(Committed(evidence=ids), send=_nudged)


def telemetry_store(*, messages: Sequence[InboundTelemetry]) -> int:
    """Telemetry and its events committed; evaluation of the new events nudged after commit,
    the commands the readings may prove at the end of the flush. Returns the events created
    (none for a redelivery)."""
    result = telemetry_ingest(messages=messages, directory=_devices())
    metrics_bridge_stored(kind="telemetry", messages=len(messages), events=result.events)
    hand_on(Committed(events=result.pending_event_ids), send=_nudged)
    _flush.reconcile |= dict.fromkeys(result.awaiting_command_ids)
    return result.events


def replies_store(*, messages: Sequence[DeviceMessage]) -> int:
    """Acks and state reports committed as receipts; the commands they concern nudged for
    reconciliation at the end of the flush. Returns how many commands got new evidence."""
    command_ids = device_messages_record(messages=messages)
    metrics_bridge_stored(kind="reply", messages=len(messages))
    _flush.reconcile |= dict.fromkeys(command_ids)
    return len(command_ids)


def nudges_lost() -> int:
    """Nudges this process did not send (the sweeps did their work); for progress lines."""
    return _nudge.lost


def replies_accept(*, messages: Sequence[DeviceMessage]) -> int:
    """Device replies that did not come through this bridge's flush (batches an older bridge
    queued): recorded, and their commands handed to reconciliation after commit."""
    command_ids = device_messages_record(messages=messages)
    hand_on_commit(Committed(evidence=command_ids))
    return len(command_ids)
