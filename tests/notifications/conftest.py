"""Notification fixtures: a farm with members of every role and external contacts, a fixed
clock (services take ``now``; nothing sleeps for backoff), templates in a temp directory, and
a Celery app that runs tasks eagerly when a test asks for it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser

from config.celery import app as celery_app
from devices.models import Farm
from notifications.models import ExternalContact, MembershipRole
from notifications.services.contacts import external_contact_create
from tests.devices.factories import FarmFactory
from tests.notifications.factories import ExternalContactFactory, MembershipFactory

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


@dataclass
class Team:
    farm: Farm
    owner: AbstractUser
    manager: AbstractUser  # role on the organisation, not the farm
    worker: AbstractUser
    vet: ExternalContact  # email only
    hook: ExternalContact  # webhook only
    hook_secret: str  # the hook's signing secret, as issued (only its salt is stored)


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_user(username: str, **kw: Any) -> AbstractUser:
    kw.setdefault("email", f"{username}@example.test")
    return get_user_model().objects.create_user(username=username, password="pw", **kw)


@pytest.fixture
def loopback_webhooks(settings: Any) -> None:
    """The tests' receivers listen on loopback, where webhooks go only when allowed
    (notifications.destinations): allowed explicitly, as an on-premises deployment would."""
    settings.WEBHOOK_ALLOWED_NETWORKS = ("127.0.0.0/8",)


@pytest.fixture
def team(db: None, loopback_webhooks: None) -> Team:
    farm = FarmFactory(time_zone="Asia/Ho_Chi_Minh")
    owner = make_user("owner")
    manager = make_user("manager")
    worker = make_user("worker")
    MembershipFactory(user=owner, farm=farm, role=MembershipRole.OWNER)
    MembershipFactory(user=manager, organization=farm.organization, role=MembershipRole.MANAGER)
    MembershipFactory(user=worker, farm=farm, role=MembershipRole.MEMBER)
    vet = ExternalContactFactory(farm=farm, name="Vet", email="vet@example.test")
    hook, hook_secret = external_contact_create(
        farm_id=farm.pk,
        name="Integrator",
        webhook_url="http://127.0.0.1:9/unused",
        with_webhook_secret=True,
    )
    assert hook_secret is not None
    return Team(farm, owner, manager, worker, vet, hook, hook_secret)


@pytest.fixture
def templates(settings: Any, tmp_path: Path) -> Path:
    """A template directory searched before the apps' (the renderer reads TEMPLATES DIRS)."""
    root = tmp_path / "templates"
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(root)]}]
    return root


def write_template(root: Path, name: str, **files: str) -> None:
    folder = root / "notifications" / name
    folder.mkdir(parents=True, exist_ok=True)
    for filename, text in files.items():
        (folder / filename.replace("_", ".")).write_text(text)


@pytest.fixture
def due_template(templates: Path) -> str:
    """A reminder-like template with a date, a datetime and a number."""
    write_template(
        templates,
        "due_test",
        subject_txt="{{ title }} due {{ due_on|date:'Y-m-d' }}",
        body_txt="Hello {{ who }}, {{ title }} is due at {{ due_at|date:'Y-m-d H:i T' }}.\n",
        body_html="<p>{{ title }} &amp; {{ due_at|date:'H:i' }}</p>",
    )
    return "due_test"


@pytest.fixture
def eager_celery() -> Iterator[None]:
    celery_app.conf.task_always_eager = True
    try:
        yield
    finally:
        celery_app.conf.task_always_eager = False


@dataclass
class Call:
    path: str
    body: bytes
    headers: dict[str, str]
    verified: bool


@dataclass
class WebhookServer:
    """A real HTTP server on loopback answering from a script: an int is a status code,
    ``("status", {"Header": "v"})`` adds headers, ``"hang"`` sleeps past the client's timeout.
    It verifies every request's signature with the contact's secret, as a receiver would."""

    url: str
    secret: str
    script: list[Any]
    calls: list[Call]
    hang_s: float = 1.0

    def answered(self) -> list[Call]:
        return list(self.calls)


@pytest.fixture
def webhook_server() -> Iterator[WebhookServer]:
    import http.server
    import threading
    import time

    from notifications.channels.webhook import SIGNATURE_HEADER, webhook_signature_verify

    state = WebhookServer(url="", secret="", script=[], calls=[])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            header = self.headers.get(SIGNATURE_HEADER, "")
            verified = webhook_signature_verify(state.secret, header, body)
            state.calls.append(Call(self.path, body, dict(self.headers.items()), verified))
            step = state.script.pop(0) if state.script else 200
            if step == "hang":
                time.sleep(state.hang_s)
                step = 200  # too late: the client has given up
            code, headers = step if isinstance(step, tuple) else (step, {})
            if not verified:
                code = 401
            payload = b'{"ok": true}' if code < 300 else b'{"error": "nope"}'
            try:
                self.send_response(code)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def hooked(team: Team, webhook_server: WebhookServer) -> Team:
    """The team's integrator contact pointed at the local server, which holds its secret."""
    team.hook.webhook_url = webhook_server.url
    team.hook.save(update_fields=["webhook_url"])
    webhook_server.secret = team.hook_secret
    return team
