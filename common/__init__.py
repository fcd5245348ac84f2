"""What several apps share and that depends on none of them: tenancy (organisations, members,
the scope every admin and API query goes through), the scoped admin, API helpers, API tokens
and authentication (``common.accounts``), the registry helper and the set-based SQL helpers.
Invariants: every bound on what a caller or a device may write lives in ``validators`` (one
check, used everywhere it is written), and every error under ``/api/`` has the one shape of
``errors``."""
