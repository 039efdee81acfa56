"""serve's memory of its good starts: for each launch, the last starts that reached ready, where their logs are.

One small JSON file in dsv4ctl's cache directory (`cache_dir`: `$DSV4CTL_CACHE_DIR`, else `$XDG_CACHE_HOME/dsv4ctl`,
else `~/.cache/dsv4ctl`), `serve/good-starts.json`, schema_version 1. An entry is written when a start reaches ready
(vLLM's ready line, as the timeline reads it); it holds the launch's key and fields, the path of the start's log and
a digest of the log's first bytes. It keeps no facts of its own: `diff` reads them from the log when a later start of
the same launch fails, so the memory is never more than the log. A log that is gone, or that no longer begins as it
did (a `--log-file` written over by a later start), is skipped with a note.

The launch is the model and how it is laid over the GPUs (KEY_FIELDS): a change of those is another deployment, whose
good start says nothing about this one. Everything else (the length, the memory flags, batch sizes, eager mode, the
environment, the vLLM release) stays the same launch: those are what the comparison is for, the changes that make
the same command start on Monday and die on Tuesday. Where it listens and what it logs are not in the key either.

Bounded: the last PER_LAUNCH good starts of each launch and the last OVERALL of all, oldest removed. A memory that
cannot be read (corrupt, another schema) is ignored with a warning and written anew; one that cannot be written is
a warning, never a failed serve. Two serves writing at once: the file is replaced whole (`files.write_whole`), the
later write wins and the other's entry may be lost. Nothing here prints: warnings and notes are returned.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dsv4ctl.cache_dir import cache_dir
from dsv4ctl.errors import OutputError
from dsv4ctl.files import write_whole

SCHEMA_VERSION = 1
FILE = Path("serve") / "good-starts.json"
PER_LAUNCH = 5  # good starts kept per launch
OVERALL = 50  # good starts kept in all
HEAD_BYTES = 4096  # the log's first bytes, digested: the same log, not one written over it since
# vLLM's parsed `serve` arguments that make a launch (argparse dests): the model and its parallel layout.
KEY_FIELDS = ("model", "revision", "quantization", "tensor_parallel_size", "pipeline_parallel_size",
              "data_parallel_size", "enable_expert_parallel")


@dataclass(frozen=True)
class Launch:
    """A launch as the memory keys it: the KEY_FIELDS vLLM's parser gave, and their digest."""

    key: str
    fields: dict[str, Any]


def launch_of(namespace: Any) -> Launch:
    """The launch of vLLM's parsed `serve` arguments (an argparse namespace: `-tp 8` and `--tensor-parallel-size 8`
    are one launch)."""
    fields = {name: _plain(getattr(namespace, name, None)) for name in KEY_FIELDS}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return Launch(hashlib.sha256(text.encode()).hexdigest()[:16], fields)


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


@dataclass(frozen=True)
class GoodStart:
    """One start that reached ready: its launch, its log (the log's last start: serve writes one start per log), when
    it was remembered, and the digest of the log's first `head_bytes` bytes."""

    key: str
    launch: dict[str, Any]
    log_file: str
    ready_at: str  # UTC, ISO 8601, when serve saw vLLM's ready line
    head_bytes: int
    head_sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "launch": self.launch, "log_file": self.log_file, "ready_at": self.ready_at,
                "head_bytes": self.head_bytes, "head_sha256": self.head_sha256}

    @classmethod
    def from_json(cls, d: Any) -> GoodStart:
        if not isinstance(d, dict):
            raise ValueError("an entry is not an object")
        try:
            entry = cls(str(d["key"]), dict(d["launch"]), str(d["log_file"]), str(d["ready_at"]), int(d["head_bytes"]),
                        str(d["head_sha256"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"an entry lacks {exc}") from None
        return entry


def memory_file(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where the memory lives; None when there is no cache directory."""
    root = cache_dir(environ)
    return None if root is None else root / FILE


def load(path: Path | None) -> tuple[list[GoodStart], list[str]]:
    """The entries, oldest first, and the warnings: a missing file is an empty memory; an unreadable or corrupt one,
    or one of another schema, is ignored (and replaced at the next good start); a malformed entry is dropped."""
    if path is None or not path.exists():
        return [], []
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        return [], [f"serve's memory of good starts {path} cannot be read ({_why(exc)}): ignored"]
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION or not isinstance(doc.get("starts"), list):
        return [], [f"serve's memory of good starts {path} is not schema_version {SCHEMA_VERSION}: ignored"]
    entries, dropped = [], 0
    for d in doc["starts"]:
        try:
            entries.append(GoodStart.from_json(d))
        except ValueError:
            dropped += 1
    warnings = [f"serve's memory of good starts {path}: {dropped} malformed entr{'y' if dropped == 1 else 'ies'} "
                "ignored"] if dropped else []
    return entries, warnings


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__


def bounded(entries: list[GoodStart]) -> list[GoodStart]:
    """The last PER_LAUNCH of each launch and the last OVERALL of all, oldest first."""
    kept: list[GoodStart] = []
    per: dict[str, int] = {}
    for e in reversed(entries):
        if per.get(e.key, 0) < PER_LAUNCH and len(kept) < OVERALL:
            per[e.key] = per.get(e.key, 0) + 1
            kept.append(e)
    return kept[::-1]


def head_digest(log_file: Path, size: int = HEAD_BYTES) -> tuple[int, str] | None:
    """The length and sha256 of the log's first `size` bytes (fewer when the log is shorter); None when unreadable."""
    try:
        with open(log_file, "rb") as f:
            head = f.read(size)
    except OSError:
        return None
    return len(head), hashlib.sha256(head).hexdigest()


def remember(launch: Launch, log_file: Path, path: Path | None, now: float | None = None) -> list[str]:
    """This start, ready, kept as the newest of its launch; the memory bounded. Returns the warnings (nothing is
    raised: a memory that cannot be written is only a memory lost)."""
    if path is None:
        return ["serve cannot remember this good start: no cache directory (set DSV4CTL_CACHE_DIR)"]
    digest = head_digest(log_file)
    if digest is None:
        return [f"serve cannot remember this good start: its log {log_file} cannot be read"]
    entries, warnings = load(path)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    entry = GoodStart(launch.key, launch.fields, str(log_file), stamp, *digest)
    entries = bounded([e for e in entries if e.log_file != entry.log_file] + [entry])
    doc = {"schema_version": SCHEMA_VERSION, "per_launch": PER_LAUNCH, "overall": OVERALL,
           "starts": [e.to_json() for e in entries]}
    try:
        write_whole(path, (json.dumps(doc, indent=1) + "\n").encode(), hint=None, make_parents=True, durable=False)
    except OutputError as exc:
        warnings.append(f"serve cannot remember this good start: {exc.message}")
    return warnings


def last_good(launch: Launch, this_log: Path, path: Path | None) -> tuple[GoodStart | None, list[str]]:
    """The newest remembered good start of `launch` whose log is still the one it was, and the notes on those skipped
    (the warnings of reading the memory among them). This start's own log is never its own good start."""
    entries, notes = load(path)
    here = _resolved(this_log)
    for e in reversed(entries):
        if e.key != launch.key:
            continue
        log = Path(e.log_file)
        if _resolved(log) == here:
            notes.append(f"the last good start ({e.ready_at}) wrote the log this start wrote over ({log}): skipped")
            continue
        if not log.exists():
            notes.append(f"the good start of {e.ready_at}: its log {log} is gone, skipped")
            continue
        if head_digest(log, e.head_bytes) != (e.head_bytes, e.head_sha256):
            notes.append(f"the good start of {e.ready_at}: its log {log} has been written over since, skipped")
            continue
        return e, notes
    return None, notes


def _resolved(p: Path) -> Path:
    try:
        return p.resolve()
    except OSError:
        return p.absolute()
