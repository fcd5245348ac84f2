"""Domain event bus (docs/spec.md §7): typed events published after commit, delivered per
handler through the ``events`` queue.

Invariants: an event is sent only after its business transaction committed, and a broker
failure never fails that transaction (it is logged as ``EVENT_PUBLISH_FAILED``); a handler's
effect and its inbox row ``(handler, idempotency_key)`` commit together, so each handler acts
once per business fact however often the event is delivered or republished; a handler that
failed ``EVENT_MAX_ATTEMPTS`` times, an unknown type and an unknown newer version end in the
dead-letter table with a reason code and raise an ``EVENT_DEAD_LETTERED`` alert.
"""
