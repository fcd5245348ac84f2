"""Every write and decision of the reminders app. Modules by role: ``sync`` (the one source
flow), ``handlers`` (event-path entry points), ``sources`` and ``settings`` (writes that
publish events), ``thresholds``, ``dst``, ``execution`` (due-time revalidation and run),
``reconcile`` (bounded repair), ``reports`` (subscriptions), ``delivery`` (the hand-off),
``writes`` (the validate-save-follow-up shape every configuration write shares)."""
