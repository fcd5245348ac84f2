"""Notification rendering and delivery (docs/spec.md §6): the scheduler hands off, this app sends.

Invariants:
* one Notification per (source_key, recipient_key, channel): a re-run hand-off, a retried task
  or a replayed event never sends twice;
* a notification is sent only by the worker whose compare-and-set moved it queued -> sending;
  the send happens outside any transaction and every attempt is recorded;
* backoff lives in ``next_attempt_at`` and lost claims in ``lease_expires_at``, both swept by
  beat: the database, not the broker, holds pending deliveries;
* a message is never blank: a missing template or variable fails it with the name;
* a recipient who opted out gets a visible ``skipped`` row, not silence;
* no webhook secret is stored: each is derived from ``WEBHOOK_SECRET_KEY`` and a per-contact
  salt, shown once when issued (``webhook_secrets``).
"""
