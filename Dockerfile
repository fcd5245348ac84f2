# The application image for deploy/compose.yaml: every process (web, bridge, workers, beat,
# Flower) runs from it with its own command. It installs the runtime lock only, verified by
# hash, and collects the static files at build so WhiteNoise serves them from the image.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PATH=/srv/farm/.venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=config.settings.production \
    STATIC_ROOT=/srv/farm/var/static

RUN groupadd --system --gid 10001 farm \
    && useradd --system --uid 10001 --gid farm --home-dir /srv/farm --shell /usr/sbin/nologin farm

WORKDIR /srv/farm

# The lock alone first: the dependency layer is rebuilt only when the lock changes.
COPY requirements-pip.lock requirements.lock ./
RUN python -m venv /srv/farm/.venv \
    && /srv/farm/.venv/bin/pip install --require-hashes -r requirements-pip.lock \
    && /srv/farm/.venv/bin/pip install --require-hashes -r requirements.lock

COPY . .

# Production settings refuse to load without their secrets; collectstatic reads none of them,
# so throwaway values that exist only in this build step stand in. The code stays root's:
# the processes (user farm) only read it.
RUN DJANGO_SECRET_KEY="collectstatic-only-$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    WEBHOOK_SECRET_KEY="collectstatic-only-$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    DJANGO_ALLOWED_HOSTS=localhost \
    python manage.py collectstatic --noinput \
    && chmod -R a+rX /srv/farm

USER farm
EXPOSE 8000
CMD ["gunicorn", "config.wsgi", "-c", "deploy/gunicorn.conf.py"]
