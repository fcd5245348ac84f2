"""Support reads times to the second and sorts them by eye: ISO order with seconds, never
Django's English defaults ("Dec. 2, 2026, 12:52 a.m.", "noon")."""

DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
