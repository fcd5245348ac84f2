"""What deploy/ starts names things that exist: every repository path a systemd unit, a
Procfile, the compose file or the Dockerfile refers to, every ``manage.py`` command, every
Celery queue a worker consumes. A renamed file or command would otherwise surface only on a
production host, as a unit that does not start."""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import get_commands

from config.celery import STAGE_QUEUES
from devtools.bench.distributed.plan import WorkerSpec
from devtools.bench.distributed.procs import worker_argv

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
SYSTEMD = DEPLOY / "systemd"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
# A token that looks like a repository-relative file path (deploy/gunicorn.conf.py).
_REPO_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)+")
_SHELL_WORDS = frozenset({";", "&&", "||", "{", "}", "|", "exec", ">&2", "2>&1"})


def looks_like_repo_path(word: str) -> bool:
    """A relative path under one of the repository's top-level folders, or any relative path
    naming a file (a suffix): not a user name such as ``farm-dynsec/admin``."""
    if not _REPO_PATH.fullmatch(word):
        return False
    return (ROOT / word.split("/")[0]).is_dir() or bool(Path(word).suffix)


def command_words(words: list[str]) -> Iterator[list[str]]:
    """The simple commands of a command line, with ``sh -c`` scripts opened up."""
    if len(words) >= 3 and Path(words[0]).name in {"sh", "bash"} and words[1] == "-c":
        yield from script_commands(words[2])
        return
    yield words


def script_commands(script: str) -> Iterator[list[str]]:
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    current: list[str] = []
    for word in lexer:
        if word in _SHELL_WORDS or set(word) <= set(";&|"):
            if current:
                yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


def command_problems(words: list[str], where: str) -> list[str]:
    """What is wrong with one command: missing paths, unknown commands or queues."""
    problems = []
    commands = get_commands()
    for simple in command_words(words):
        for i, word in enumerate(simple):
            if word == "manage.py":
                if not (ROOT / word).is_file():
                    problems.append(f"{where}: manage.py is missing")
                name = next((w for w in simple[i + 1 :] if not w.startswith("-")), None)
                if name not in commands:
                    problems.append(f"{where}: no manage.py command {name!r}")
            elif word in {"-Q", "--queues"}:
                for queue in simple[i + 1].split(","):
                    if queue not in STAGE_QUEUES:
                        problems.append(f"{where}: queue {queue!r} is not declared")
            elif looks_like_repo_path(word) and not (ROOT / word).exists():
                problems.append(f"{where}: {word} does not exist")
        worker = "celery" in Path(simple[0]).name and "worker" in simple
        if worker and not {"-Q", "--queues"} & set(simple):
            problems.append(f"{where}: a worker that names no queue consumes the default")
    return problems


def queues_consumed(commands: list[list[str]]) -> set[str]:
    found: set[str] = set()
    for words in commands:
        for simple in command_words(words):
            for i, word in enumerate(simple):
                if word in {"-Q", "--queues"}:
                    found |= set(simple[i + 1].split(","))
    return found


def unit_files() -> list[Path]:
    return sorted(SYSTEMD.glob("*.service"))


def unit_entries(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file; ``$$`` is a literal ``$`` to systemd."""
    entries, section = [], ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            entries.append((section, key, value.replace("$$", "$")))
    return entries


def unit_exec_commands(path: Path) -> list[list[str]]:
    return [
        shlex.split(value.lstrip("-@+!"))
        for _section, key, value in unit_entries(path)
        if key in {"ExecStart", "ExecStartPre", "ExecStartPost", "ExecReload", "ExecStop"}
    ]


def procfile_commands(path: Path) -> dict[str, list[str]]:
    lines = [x for x in path.read_text().splitlines() if x.strip() and not x.startswith("#")]
    return {
        name.strip(): ["sh", "-c", command.strip()]
        for name, command in (line.split(":", 1) for line in lines)
    }


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def compose_command(service: dict[str, Any]) -> list[str] | None:
    command = service.get("command")
    if command is None:
        return None
    return command if isinstance(command, list) else shlex.split(command)


def operator_secret(path: Path) -> bool:
    """A file the operator creates and git never holds: ignored by .gitignore and named in
    the runbook, which says how to make it."""
    relative = "/" + path.resolve().relative_to(ROOT).as_posix()
    patterns = [x.strip() for x in (ROOT / ".gitignore").read_text().splitlines()]
    ignored = any(p.startswith("/") and fnmatch.fnmatch(relative, p) for p in patterns)
    return ignored and path.name in (DEPLOY / "RUNBOOK.md").read_text()


def compose_local_paths() -> list[tuple[str, Path]]:
    """(where, path) of every local file or directory compose.yaml refers to."""
    found: list[tuple[str, Path]] = []
    for name, service in compose()["services"].items():
        build = service.get("build")
        if build is not None:
            context = DEPLOY / (build if isinstance(build, str) else build.get("context", "."))
            found.append((f"{name} build context", context))
            if isinstance(build, dict) and "dockerfile" in build:
                found.append((f"{name} dockerfile", context / build["dockerfile"]))
        env_files = service.get("env_file", [])
        for env_file in [env_files] if isinstance(env_files, str) else env_files:
            found.append((f"{name} env_file", DEPLOY / env_file))
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source")
            if isinstance(volume, dict) and volume.get("type") != "bind":
                continue
            if source and source.startswith((".", "/")):
                found.append((f"{name} volume", DEPLOY / source))
    return found


def test_the_command_checks_catch_a_wrong_path_command_and_queue() -> None:
    """The checks below would fail on a mistake, not pass on anything."""
    web = ["gunicorn", "config.wsgi", "-c", "deploy/gunicorn.conf.py"]
    assert command_problems(web, "ok") == []
    wrong = ["sh", "-c", "python manage.py migrat && celery -A config worker -Q ingest,bulk"]
    problems = command_problems(wrong, "x") + command_problems(["-c", "deploy/nope.py"], "y")
    assert problems == [
        "x: no manage.py command 'migrat'",
        "x: queue 'bulk' is not declared",
        "y: deploy/nope.py does not exist",
    ]
    assert command_problems(["celery", "-A", "config", "worker"], "z") != []


def test_systemd_units_name_existing_paths_commands_and_queues() -> None:
    problems = [
        problem
        for unit in unit_files()
        for words in unit_exec_commands(unit)
        for problem in command_problems(words, unit.name)
    ]
    assert problems == []


@pytest.mark.parametrize("procfile", ["Procfile", "Procfile.dev"])
def test_procfiles_name_existing_paths_commands_and_queues(procfile: str) -> None:
    commands = procfile_commands(DEPLOY / procfile)
    problems = [p for name, words in commands.items() for p in command_problems(words, name)]
    assert problems == []
    assert queues_consumed(list(commands.values())) == set(STAGE_QUEUES)


def test_every_stage_queue_has_a_unit_and_a_compose_service() -> None:
    units = [words for unit in unit_files() for words in unit_exec_commands(unit)]
    assert queues_consumed(units) == set(STAGE_QUEUES)
    services = [compose_command(s) for s in compose()["services"].values()]
    assert queues_consumed([words for words in services if words]) == set(STAGE_QUEUES)


def test_every_worker_runs_without_gossip_mingle_and_heartbeats() -> None:
    """Those three cost each worker broker commands and CPU every second on a quiet stack
    and serve only Flower's worker list (docs/architecture.md, "Celery settings per stage")."""
    commands = [words for unit in unit_files() for words in unit_exec_commands(unit)]
    commands += [w for name in ("Procfile", "Procfile.dev")
                 for w in procfile_commands(DEPLOY / name).values()]  # fmt: skip
    commands += [w for s in compose()["services"].values() if (w := compose_command(s))]
    commands.append(worker_argv("ingest", WorkerSpec(2), "ingest@bench"))
    workers = [
        words
        for line in commands
        for words in command_words(line)
        if "worker" in words and any(w.endswith("celery") or w == "celery" for w in words)
    ]
    assert len(workers) >= 3 * len(STAGE_QUEUES) + 1
    quiet = {"--without-gossip", "--without-mingle", "--without-heartbeat"}
    assert [w for w in workers if not quiet <= set(w)] == []


def test_compose_services_name_existing_paths_commands_and_queues() -> None:
    problems = [
        problem
        for name, service in compose()["services"].items()
        if (words := compose_command(service)) is not None
        for problem in command_problems(words, name)
    ]
    assert problems == []
    missing = [
        f"{where}: {path}"
        for where, path in compose_local_paths()
        if not path.exists() and not operator_secret(path)
    ]
    assert missing == []
    assert {where.split()[0] for where, _ in compose_local_paths()} >= {"web", "mosquitto"}


def test_compose_starts_the_application_after_a_successful_migration() -> None:
    config = compose()
    services = config["services"]
    migrate = services["migrate"]
    assert "migrate" in " ".join(compose_command(migrate) or [])
    assert "sync_beat_schedule" in " ".join(compose_command(migrate) or [])
    apps = [n for n, s in services.items() if "build" in s and n != "migrate"]
    assert {"web", "bridge", "beat", "flower"} <= set(apps)
    for name in apps:
        service = services[name]
        assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
        assert service["environment"]["PROMETHEUS_MULTIPROC_DIR"] == "/run/farm-metrics"
        assert "metrics:/run/farm-metrics" in service["volumes"], name
    assert config["volumes"]["metrics"]["driver_opts"]["type"] == "tmpfs"
    for name in ("postgres", "redis", "mosquitto", "web"):
        assert services[name]["healthcheck"]["test"], name
    assert "/health" in " ".join(services["web"]["healthcheck"]["test"])
    assert "FLOWER_BASIC_AUTH" in " ".join(compose_command(services["flower"]) or [])
    assert all(p.startswith("127.0.0.1:") for p in services["flower"]["ports"])
    named = {
        v.split(":", 1)[0]
        for s in services.values()
        for v in s.get("volumes", [])
        if isinstance(v, str) and not v.startswith((".", "/"))
    }
    assert named <= set(config["volumes"])


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in (x.strip() for x in text.splitlines())
        if line and not line.startswith("#")
    ]


def test_the_dockerfile_copies_existing_files_and_runs_unprivileged() -> None:
    instructions = dockerfile_instructions()
    copies = [args.split() for op, args in instructions if op in {"COPY", "ADD"}]
    assert copies
    for words in copies:
        sources = [w for w in words if not w.startswith("--")][:-1]
        assert sources and all((ROOT / s).exists() for s in sources), words
    runs = " ".join(args for op, args in instructions if op == "RUN")
    assert "--require-hashes -r requirements.lock" in runs
    assert "manage.py collectstatic --noinput" in runs
    users = [args for op, args in instructions if op == "USER"]
    assert users and users[-1] not in {"root", "0"}
    (cmd,) = [yaml.safe_load(args) for op, args in instructions if op == "CMD"]
    assert command_problems(cmd, "Dockerfile CMD") == []


def test_every_process_unit_belongs_to_the_target_and_waits_for_the_migration() -> None:
    target = (SYSTEMD / "farm.target").read_text()
    also = {w for line in target.splitlines() if line.startswith("Also=") for w in line[5:].split()}
    assert also == {unit.name for unit in unit_files()}
    for unit in unit_files():
        entries = unit_entries(unit)
        values = {(section, key): value for section, key, value in entries}
        assert values[("Install", "WantedBy")] == "farm.target", unit.name
        assert values[("Unit", "PartOf")] == "farm.target", unit.name
        assert ("Service", "Environment", "PROMETHEUS_MULTIPROC_DIR=/run/farm-metrics") in entries
        if unit.name == "farm-migrate.service":
            continue
        assert ("Unit", "Requires", "farm-migrate.service") in entries, unit.name
        assert ("Unit", "After", "farm-migrate.service") in entries, unit.name
        # Only the migration unit owns the directory: another owner would remove it on stop.
        assert ("Service", "RuntimeDirectory") not in values, unit.name


def test_the_migration_unit_runs_once_and_owns_the_metrics_directory() -> None:
    entries = unit_entries(SYSTEMD / "farm-migrate.service")
    values = {(section, key): value for section, key, value in entries}
    assert values[("Service", "Type")] == "oneshot"
    assert values[("Service", "RemainAfterExit")] == "yes"
    assert values[("Service", "RuntimeDirectory")] == "farm-metrics"
    steps = [" ".join(words[1:]) for words in unit_exec_commands(SYSTEMD / "farm-migrate.service")]
    assert steps == [
        "manage.py migrate --noinput",
        "manage.py collectstatic --noinput",
        "manage.py sync_beat_schedule",
    ]


def test_the_path_check_tells_repository_paths_from_user_names() -> None:
    assert looks_like_repo_path("deploy/gunicorn.conf.py")
    assert looks_like_repo_path("deploy/missing-file")  # a folder of the repository
    assert looks_like_repo_path("depoly/typo.conf")  # names a file
    assert not looks_like_repo_path("farm-dynsec/admin")
    assert not looks_like_repo_path("/var/lib/mosquitto/dynamic-security.json")
