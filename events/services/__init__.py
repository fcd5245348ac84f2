"""Every write and decision of the event bus: publish after commit, deliver per handler,
dead-letter and replay."""

from events.services.dead_letters import (
    DeadLetterNotFound,
    DeadLetterNotReplayable,
    dead_letter_alert,
    dead_letter_replay,
)
from events.services.deliver import DeliveryResult, event_deliver, event_retry_delay_s
from events.services.publish import (
    EventPayloadInvalid,
    EventTransport,
    event_publish,
)

__all__ = [
    "DeadLetterNotFound",
    "DeadLetterNotReplayable",
    "DeliveryResult",
    "EventPayloadInvalid",
    "EventTransport",
    "dead_letter_alert",
    "dead_letter_replay",
    "event_deliver",
    "event_publish",
    "event_retry_delay_s",
]
