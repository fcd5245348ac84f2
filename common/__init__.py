"""What several apps share and that depends on none of them: the registry helper and the
set-based SQL helpers."""
