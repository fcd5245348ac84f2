"""The MQTT bridge's settings (a part of ``config.settings.base``, which imports them all)."""

from __future__ import annotations

from config.env import env_float, env_int
from config.env_bridge import bridge_slot_prefix_from_env

# A fixed set of slots, each one MQTT client id <BRIDGE_SLOT_PREFIX>/<n> (n in 0..SLOTS-1) and
# its persistent session, held by one bridge process at a time through a lease in the
# database (devices.services.bridge_slots). A process renews its leases every LEASE_S / 4 for
# 0.75 x LEASE_S, so a dead holder's slot is adopted within LEASE_S. The id never depends on
# the host: any process (a standby, a recreated container) resumes a slot's session.
BRIDGE_SLOTS = env_int("BRIDGE_SLOTS", 1, minimum=1, maximum=64)
BRIDGE_LEASE_S = env_float("BRIDGE_LEASE_S", 15.0, minimum=3.0)
BRIDGE_SLOT_PREFIX = bridge_slot_prefix_from_env()
# Another client taking a slot's session over (same client id) this many times in a row,
# each after a doubling backoff, while this process still holds the slot's lease (two
# deployments with their own databases on one broker) makes the bridge exit non-zero.
BRIDGE_TAKEOVER_MAX = env_int("BRIDGE_TAKEOVER_MAX", 5, minimum=1)
BRIDGE_BATCH_SIZE = env_int("BRIDGE_BATCH_SIZE", 500, minimum=1)
BRIDGE_FLUSH_MS = env_float("BRIDGE_FLUSH_MS", 20.0)
# What commits a batch before its messages are acknowledged (ingest and receipts live in the
# automation app, above the bridge's): telemetry with its events, device replies as receipts.
BRIDGE_STORE = "automation.services.edge.bridge_batch_store"
# What follows a flush once its groups were committed: their reconcile nudges, sent as one.
BRIDGE_FLUSH_END = "automation.services.edge.bridge_flush_end"
# A device's ack waits up to this long for its state report, so both cross in one commit (0: off).
BRIDGE_REPLY_WAIT_MS = env_float("BRIDGE_REPLY_WAIT_MS", 10.0, minimum=0.0)
BRIDGE_DEDUPE_TTL_S = env_int("BRIDGE_DEDUPE_TTL_S", 60)  # 0 turns the cache fast path off
BRIDGE_MAX_PAYLOAD_BYTES = env_int("BRIDGE_MAX_PAYLOAD_BYTES", 64 * 1024, minimum=1)
BRIDGE_SESSION_EXPIRY_S = env_int("BRIDGE_SESSION_EXPIRY_S", 24 * 3600, minimum=1)
# Unacknowledged messages the broker sends before it waits (Mosquitto max_inflight_messages,
# default 20): a batch that reached it is flushed at once rather than after BRIDGE_FLUSH_MS.
BRIDGE_INFLIGHT_WINDOW = env_int("BRIDGE_INFLIGHT_WINDOW", 20, minimum=1)
# Per-device token bucket: a device sending faster is acknowledged and dropped, and recorded
# as one `rate_limited` rejection per device per BRIDGE_DROP_FLUSH_S. Rate 0 turns it off.
BRIDGE_DEVICE_RATE_PER_S = env_float("BRIDGE_DEVICE_RATE_PER_S", 50.0)
BRIDGE_DEVICE_BURST = env_int("BRIDGE_DEVICE_BURST", 200, minimum=1)
BRIDGE_DROP_FLUSH_S = env_float("BRIDGE_DROP_FLUSH_S", 1.0, minimum=0.01)
