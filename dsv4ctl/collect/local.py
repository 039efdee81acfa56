"""This machine's sources: log files and directories, a Ray session's logs, Docker containers.

Ray (the session directory `ray start` creates, `/tmp/ray/session_latest` by default, ray==2.49.2
ray/_private/ray_constants.py:495; its logs under `logs/`, ray/_private/node.py:505, each named
`{process type}.{out,err}` then `{process type}.{n}.{out,err}`, node.py:866-876, for the process types of
ray_constants.py:260-272): `raylet.out`/`.err`, `gcs_server.out`/`.err`, `worker-<id>-<job>-<pid>.out`/`.err`
(the workers' stdout and stderr, where vLLM's lines of Ray workers are; ray/_private/log_monitor.py:28,221),
`python-core-worker-*.log`, `python-core-driver-*.log`, `dashboard*.log`, `dashboard_agent.*`, `monitor.*`,
`log_monitor.*`, `runtime_env_agent.*`, and the same names under `old/`.

Docker: `docker logs --timestamps` of each container and `docker inspect` (State: Status, OOMKilled,
ExitCode, Error, StartedAt, FinishedAt; RestartCount) for its termination.
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from dsv4ctl.collect.bundle import BundleWriter, read_chunks
from dsv4ctl.collect.model import CollectRequest, CollectResult, LogEntry, Termination, Unreadable
from dsv4ctl.errors import InputError
from dsv4ctl.files import decoded
from dsv4ctl.redaction import redact_line

RAY_DEFAULT_SESSION = "/tmp/ray/session_latest"
RAY_LOGS = ("raylet*.out", "raylet*.err", "gcs_server*.out", "gcs_server*.err", "worker-*.out", "worker-*.err",
            "python-core-worker-*.log", "python-core-driver-*.log", "dashboard*.log", "dashboard*.out",
            "dashboard*.err", "monitor*", "log_monitor*", "runtime_env_agent*", "debug_state*.txt")
# In a directory given as a source: the files that are logs.
LOG_NAMES = ("*.log", "*.out", "*.err", "*.txt", "*.log.gz", "*.log.[0-9]*")


def _open_text(path: Path) -> BinaryIO:
    """A file's text: compressed (gzip, xz, bzip2, a zip of one file) and UTF-16 logs decoded, whatever their name,
    so that every line is redacted as the others are (`dsv4ctl.files.decoded`); `InputError` for a binary file or
    an archive."""
    raw = open(path, "rb")  # noqa: SIM115 - closed by _chunks (or here)
    try:
        return decoded(raw, str(path))
    except BaseException:
        raw.close()
        raise


def _chunks(f: BinaryIO, tail: int | None) -> Iterator[bytes]:
    try:
        if tail is None:
            yield from read_chunks(f)
            return
        last: deque[bytes] = deque(f, maxlen=tail)  # the last lines only (bounded by the count)
        yield b"".join(last)
    finally:
        f.close()


def add_file(path: Path, kind: str, req: CollectRequest, bundle: BundleWriter, result: CollectResult,
             name: str | None = None) -> None:
    entry = LogEntry(path=f"logs/{kind}/{name or path.name}", kind=kind, source=str(path))
    try:
        text = _open_text(path)
    except OSError as exc:  # nothing read
        result.unreadable.append(Unreadable(str(path), exc.strerror or str(exc)))
        return
    except InputError as exc:  # not a log (a binary file, an archive): nothing read
        result.unreadable.append(Unreadable(str(path), exc.message))
        return
    bundle.add_log(entry, _chunks(text, req.tail), req.max_log_bytes)
    if entry.error and not entry.lines:
        result.unreadable.append(Unreadable(str(path), entry.error))
    result.logs.append(entry)


def _first_time(path: Path, seen: set[tuple[int, int]]) -> bool:
    """Whether the file is met for the first time (the same file given twice, by another name, a link or inside
    a directory also given, is one log)."""
    try:
        st = path.stat()
    except OSError:
        return True  # its error comes when it is read
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return False
    seen.add(key)
    return True


def gather_paths(req: CollectRequest, bundle: BundleWriter, result: CollectResult, step: Callable[[str], None]) -> None:
    seen: set[tuple[int, int]] = set()
    for raw in req.paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and any(fnmatch.fnmatch(p.name, g) for g in LOG_NAMES))
            if not files:
                result.unreadable.append(Unreadable(str(path), "no log files in this directory (*.log, *.out, *.err, *.txt)"))
            for f in files:
                if _first_time(f, seen):
                    step(str(f))
                    add_file(f, "file", req, bundle, result, name=f"{path.name}/{f.relative_to(path)}")
        elif path.exists():
            if _first_time(path, seen):
                step(str(path))
                add_file(path, "file", req, bundle, result)
        else:
            result.unreadable.append(Unreadable(str(path), "no such file or directory"))


def ray_log_files(session: Path) -> list[Path]:
    logs = session / "logs" if (session / "logs").is_dir() else session
    found = []
    for directory in (logs, logs / "old"):
        if directory.is_dir():
            found += [p for p in sorted(directory.iterdir()) if p.is_file() and any(fnmatch.fnmatch(p.name, g) for g in RAY_LOGS)]
    return found


def gather_ray(req: CollectRequest, bundle: BundleWriter, result: CollectResult, step: Callable[[str], None]) -> None:
    session = Path(req.ray or RAY_DEFAULT_SESSION).expanduser()
    if not session.is_dir():
        why = "not a directory" if session.exists() else "no such directory"
        result.unreadable.append(Unreadable(str(session), f"{why}: --ray takes a Ray session directory "
                                            f"({RAY_DEFAULT_SESSION} on a node where Ray runs, or a session_* beside it)"))
        return
    files = ray_log_files(session.resolve())
    if not files:
        result.unreadable.append(Unreadable(str(session), "no Ray logs in it (raylet.out, gcs_server.out, worker-*.out)"))
    node = _ray_node_ip(session)
    for f in files:
        step(f"ray {f.name}")
        before = len(result.logs)
        add_file(f, "ray", req, bundle, result, name=f"{session.resolve().name}/{f.relative_to(session.resolve() / 'logs') if (session / 'logs').is_dir() else f.name}")
        for entry in result.logs[before:]:
            entry.node = node


def _ray_node_ip(session: Path) -> str | None:
    """The node's IP as Ray wrote it in the session (node_ip_address.json), if there."""
    for candidate in (session / "node_ip_address.json", session.parent / "node_ip_address.json"):
        try:
            data = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        ip = data.get("node_ip_address") if isinstance(data, dict) else None
        if isinstance(ip, str):
            return ip
    return None


def _docker(req: CollectRequest, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([req.docker_cli, *args], capture_output=True, timeout=120)


def gather_docker(req: CollectRequest, bundle: BundleWriter, result: CollectResult, step: Callable[[str], None]) -> None:
    for name in req.docker:
        step(f"docker {name}")
        try:
            inspect = _docker(req, "inspect", name)
        except FileNotFoundError:
            result.unreadable.append(Unreadable(f"docker inspect {name}", f"{req.docker_cli} not found"))
            continue
        except subprocess.TimeoutExpired:
            result.unreadable.append(Unreadable(f"docker inspect {name}", "no answer in 120 s"))
            continue
        if inspect.returncode != 0:
            result.unreadable.append(Unreadable(f"docker inspect {name}", _last(inspect.stderr)))
            continue
        try:
            info = (json.loads(inspect.stdout) or [{}])[0]
        except (ValueError, IndexError):
            info = {}
        state = info.get("State") or {}
        redacted = [redact_line(line)[0] for line in json.dumps(info, indent=2).splitlines()]
        result.extra.append(bundle.add_bytes(f"docker/{name}.inspect.json", "\n".join(redacted).encode()))
        termination = None
        if state.get("Status") in ("exited", "dead") or state.get("OOMKilled"):
            termination = Termination("OOMKilled" if state.get("OOMKilled") else (state.get("Error") or "exited"),
                                      state.get("ExitCode"), None, state.get("StartedAt"), state.get("FinishedAt"))
        argv = [req.docker_cli, "logs", "--timestamps"]
        if req.since:
            argv += ["--since", req.since]
        if req.tail is not None:
            argv += ["--tail", str(req.tail)]
        argv.append(name)
        entry = LogEntry(path=f"logs/docker/{name}.log", kind="docker", source=" ".join(argv),
                         container=info.get("Name", name).lstrip("/") or name, state=state.get("Status"),
                         restart_count=info.get("RestartCount"), termination=termination,
                         node=(info.get("Config") or {}).get("Hostname"))
        errors: list[str] = []
        bundle.add_log(entry, _merged(argv, errors), req.max_log_bytes)
        if errors:
            entry.error = errors[-1]
            if not entry.lines:
                result.unreadable.append(Unreadable(entry.source, errors[-1]))
        result.logs.append(entry)


def _merged(argv: list[str], errors: list[str]) -> Iterable[bytes]:
    """`docker logs` writes the container's stdout and stderr to its own two streams: both, merged."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except FileNotFoundError:
        errors.append(f"{argv[0]} not found")
        return
    assert proc.stdout is not None
    yield from read_chunks(proc.stdout)
    if proc.wait() != 0:
        errors.append(f"{' '.join(argv)} exited {proc.returncode}")


def _last(stderr: bytes) -> str:
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"
