"""Notification delivery and alarm notification settings (a part of ``config.settings.base``,
which imports them all): retries, leases and the sweeps that find due work in SQL."""

from __future__ import annotations

from config.env import env_float, env_float_list, env_int, env_str

# Delivery attempts per notification (support retry grants a fresh budget).
NOTIFY_MAX_ATTEMPTS = env_int("NOTIFY_MAX_ATTEMPTS", 5, minimum=1)
# Wait before attempt n+1 after a transient failure; the last value repeats. A receiver's
# Retry-After is honoured when longer, up to NOTIFY_RETRY_AFTER_MAX_S.
NOTIFY_BACKOFF_S = env_float_list("NOTIFY_BACKOFF_S", (30.0, 120.0, 600.0, 1800.0))
NOTIFY_RETRY_AFTER_MAX_S = env_float("NOTIFY_RETRY_AFTER_MAX_S", 3600.0)
# A claimed (sending) notification's lease: past it, the sweep re-queues it (worker lost).
NOTIFY_LEASE_S = env_float("NOTIFY_LEASE_S", 120.0, minimum=1.0)
NOTIFY_WEBHOOK_TIMEOUT_S = env_float("NOTIFY_WEBHOOK_TIMEOUT_S", 10.0, minimum=0.05)
NOTIFY_SWEEP_INTERVAL_S = env_float("NOTIFY_SWEEP_INTERVAL_S", 10.0, minimum=0.1)
# A fresh row's delivery task may be lost: the sweep queues it again after this grace.
NOTIFY_SWEEP_AFTER_S = env_float("NOTIFY_SWEEP_AFTER_S", 30.0)
NOTIFY_SWEEP_BATCH = env_int("NOTIFY_SWEEP_BATCH", 500, minimum=1)
# Alarms (docs/alarms.md): the sweep that sends each due alarm notification and repeat,
# in batches of ALARMS_NOTIFY_BATCH; the alarm link in a message starts with
# ALARMS_LINK_BASE_URL (where people reach the admin).
ALARMS_NOTIFY_INTERVAL_S = env_float("ALARMS_NOTIFY_INTERVAL_S", 10.0, minimum=0.1)
ALARMS_NOTIFY_BATCH = env_int("ALARMS_NOTIFY_BATCH", 200, minimum=1)
ALARMS_LINK_BASE_URL = env_str("ALARMS_LINK_BASE_URL", "http://localhost:8000").rstrip("/")
