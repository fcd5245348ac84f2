"""Every write and business decision of the execution core, one module per stage."""
