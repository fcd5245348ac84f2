"""The audit log of configuration changes: who changed which configuration row, when,
through which surface (API, admin, management command, or the system itself) and its
fields before and after. Built on django-auditlog (docs/audit.md says why).

Invariants: no secret value is ever stored (secret fields are masked whole, not half); every
entry carries the organisation of the row it describes, read when it is written, so the API
and the admin scope entries without reaching into the apps; only configuration models are
registered, so the hot path (ingest, evaluate, dispatch, reconcile) writes no entry."""
