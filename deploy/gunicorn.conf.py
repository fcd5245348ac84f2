"""gunicorn settings for the web process (admin, API, /metrics, /health)."""

import multiprocessing

bind = "0.0.0.0:8000"
workers = max(2, multiprocessing.cpu_count())
worker_class = "gthread"
threads = 4
timeout = 30
graceful_timeout = 30
max_requests = 2000
max_requests_jitter = 200
accesslog = "-"
