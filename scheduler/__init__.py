"""The due-work scheduler (docs/spec.md §4): one SQL table of due work, claimed by any
number of workers.

Invariants:
* one deterministic ``SchedulerKey`` per occurrence, built by ``keys.scheduler_key`` on every
  path (event, reconciliation, retry), so a repeat is absorbed by the unique key;
* a Completed row is never sent again; a different input under the same key is held for
  support, never overwritten;
* a row is processed only by the worker whose claim changed it (lease + Version); every later
  state change is ``WHERE version = token``, so a worker whose lease expired cannot overwrite a
  newer claim, and the handler's database effects commit in the same transaction as Completed;
* work is found in ``DueWork`` only: the execution trace (``TraceRecord`` and its
  blobs) is a copy appended after commit, never read to find work, pruned on its own clock.
"""
