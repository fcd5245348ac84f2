"""Alarms: a condition a person must see (a device offline, a command that failed, an aborted
rollout), raised, acknowledged and cleared. Invariants: at most one open alarm per (source,
source id, type), a unique key absorbing repeats; every status move is one compare-and-set
with its audit row (``alarms.services.moves``); notifications repeat until acknowledged."""
