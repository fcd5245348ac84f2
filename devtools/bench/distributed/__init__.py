"""``manage.py bench --distributed``: the product measured the way it is deployed. The bridge,
one Celery worker per stage queue and beat run as separate OS processes against the
configured PostgreSQL, Celery broker, Redis and MQTT broker; the bench process plays the
device fleet and reads what the pipeline recorded in the database.

The in-process bench (``devtools.bench``) runs everything under one GIL, which hides what
the hand-offs between processes cost; this one measures exactly those hand-offs.
"""
