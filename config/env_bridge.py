"""The MQTT bridge slots' names from the environment: ``BRIDGE_SLOT_PREFIX`` and the client
id of each slot, ``<prefix>/<n>``, which holds the mark no device's client id holds."""

from __future__ import annotations

from config.env import BACKEND_CLIENT_ID_MARK, SettingError, env_str

# An MQTT topic filter's wildcards, and the mark: none may be in a slot prefix, so that
# ``<prefix>/<n>`` holds exactly one mark and names exactly one slot.
_SLOT_PREFIX_FORBIDDEN = (BACKEND_CLIENT_ID_MARK, "+", "#")
SLOT_PREFIX_MAX_CHARS = 100


def bridge_slot_prefix_from_env() -> str:
    """``BRIDGE_SLOT_PREFIX`` (default ``farm-bridge``): slot ``n``'s client id is
    ``<prefix>/<n>``, which holds the mark no device's id holds. A non-empty
    ``BRIDGE_CLIENT_ID`` left from before slots stops start-up: it is no longer read, and its
    session would strand its share of the shared subscription unless retired."""
    old = env_str("BRIDGE_CLIENT_ID", "")
    if old:
        raise SettingError(
            "BRIDGE_CLIENT_ID",
            old,
            "no longer read: bridges hold slots <BRIDGE_SLOT_PREFIX>/<n> "
            "(docs: deploy/RUNBOOK.md). Run `manage.py mqtt_bridge --retire --client-id "
            f"{old}` once to end its old session, then remove the variable",
        )
    raw = env_str("BRIDGE_SLOT_PREFIX", "")
    if not raw:
        return "farm-bridge"
    bad = [c for c in _SLOT_PREFIX_FORBIDDEN if c in raw] + [c for c in raw if c.isspace()]
    if bad:
        raise SettingError(
            "BRIDGE_SLOT_PREFIX",
            raw,
            f"must not contain {bad[0]!r}: the slot client id is <prefix>/<n>, with one '/' and "
            "no MQTT wildcard",
        )
    if len(raw) > SLOT_PREFIX_MAX_CHARS:
        raise SettingError("BRIDGE_SLOT_PREFIX", raw, f"at most {SLOT_PREFIX_MAX_CHARS} characters")
    return raw


def bridge_slot_client_id(prefix: str, slot: int) -> str:
    """Slot ``slot``'s MQTT client id, the key of its persistent session: the same on every
    host, so whichever process holds the slot resumes what the broker kept for it."""
    return f"{prefix}{BACKEND_CLIENT_ID_MARK}{slot}"
