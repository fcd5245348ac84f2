"""Support's admin for the execution core: rules (``rules``), the command list and its
buttons (``commands``), the ledger pages (``ledger``), the devices' automation columns and
chart (``devices``) and the diagnostics page (``diagnostics``). Ledger rows are read-only and
scoped to the user's organisations; manual moves ask for a reason and call
``automation.services.support`` (a guarded update with an audit row)."""

from automation.admin import commands, devices, diagnostics, ledger, rules

__all__ = ["commands", "devices", "diagnostics", "ledger", "rules"]
