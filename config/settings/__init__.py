"""Settings modules: ``base`` (the product), ``dev`` (base + development tools; the default
of manage.py and celery), ``test`` (dev + what only tests need), ``production`` (base)."""
