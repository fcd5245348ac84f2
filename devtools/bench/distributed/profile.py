"""``--profile``: py-spy sampling the bridge and every stage worker (its pool processes
included) while the command path runs, one flame graph (SVG) or speedscope file per
process, so "where does the time go" is answered by the deployed processes themselves."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools.bench import BenchError
from devtools.bench.distributed.stack import Stack

FORMATS = {
    "svg": ("flamegraph", "svg"),
    "speedscope": ("speedscope", "speedscope.json"),
    "raw": ("raw", "txt"),  # collapsed stacks: the "where the time goes" table reads them
}
SAMPLES_PER_S = 100
STOP_S = 60.0  # writing a large profile takes a while
Write = Callable[[str], None]


def py_spy() -> str:
    """The py-spy executable beside this interpreter, or on PATH."""
    local = Path(sys.executable).parent / "py-spy"
    found = str(local) if local.exists() else shutil.which("py-spy")
    if found is None:
        raise BenchError("--profile needs py-spy in this environment: python -m pip install py-spy")
    return found


@contextmanager
def profiles_recording(stack: Stack, out: Path, fmt: str, write: Write) -> Iterator[list[Path]]:
    """py-spy attached to the bridge(s) and workers for the block; SIGINT makes each write
    its file. Yields the paths, filled once the block ends."""
    exe = py_spy()
    kind, suffix = FORMATS[fmt]
    out.mkdir(parents=True, exist_ok=True)
    spies: list[tuple[subprocess.Popen[bytes], Path]] = []
    paths: list[Path] = []
    try:
        for name, child in stack.procs.items():
            if name == "beat":
                continue
            path = out / f"{name}.{suffix}"
            argv = [exe, "record", "--pid", str(child.pid), "--subprocesses", "--nonblocking"]
            argv += ["--rate", str(SAMPLES_PER_S), "--format", kind, "--output", str(path)]
            with (out / f"{name}.py-spy.log").open("ab") as log:
                popen = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            spies.append((popen, path))
        write(f"profile: py-spy on {len(spies)} processes, writing to {out}")
        yield paths
    finally:
        for popen, _ in spies:
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(signal.SIGINT)
        for popen, path in spies:
            try:
                popen.wait(STOP_S)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
            if path.exists():
                paths.append(path)
