"""Date and time formats for the admin and templates (FORMAT_MODULE_PATH)."""
