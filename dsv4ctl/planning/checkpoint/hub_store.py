"""What dsv4ctl read from the hub, kept on disk so that the next run works offline: the config files of a
commit and the tensor bytes its safetensors headers give (never tensor data).

The cache directory is `$DSV4CTL_CACHE_DIR`, else `$XDG_CACHE_HOME/dsv4ctl`, else `~/.cache/dsv4ctl` (the
state directory, `planning/plan/calibration.py`, keeps records; this one only what can be read again). Keyed by
endpoint, repo and resolved revision:

    hub/<endpoint key>/<org>--<name>/refs/<revision>                     the commit the revision named last
    hub/<endpoint key>/<org>--<name>/<commit>/config.json                 (and tokenizer_config.json, if any)
    hub/<endpoint key>/<org>--<name>/<commit>/weights.json                the header-derived sizes

The environment huggingface_hub reads is read here at each call, with huggingface_hub's own rules (its
constants are fixed when it is imported; a long-lived process or a test changes the environment later):
`HF_ENDPOINT` (huggingface_hub 2.4.0 constants.py:69, trailing `/` stripped), `HF_HUB_OFFLINE` or
`TRANSFORMERS_OFFLINE` (constants.py:194, true as `_is_true` reads it, constants.py:12-19).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dsv4ctl.cache_dir import CACHE_DIR_ENV, cache_dir as shared_cache_dir, write_file
from dsv4ctl.errors import InputError
from dsv4ctl.files import TEMP_HINT, cannot_write, write_whole
from dsv4ctl.planning.checkpoint.geometry import CheckpointWeights

DEFAULT_ENDPOINT = "https://huggingface.co"  # huggingface_hub 2.4.0 constants.py:67 (_HF_DEFAULT_ENDPOINT)
_TRUE = {"1", "ON", "YES", "TRUE"}  # constants.py:12 (ENV_VARS_TRUE_VALUES)
_COMMIT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
CONFIG_FILES = ("config.json", "tokenizer_config.json")  # what a local checkpoint's geometry reads


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def endpoint(environ: Mapping[str, str] | None = None) -> str:
    return (_env(environ).get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline_variable(environ: Mapping[str, str] | None = None) -> str | None:
    """`HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) when it switches the hub off, else None."""
    env = _env(environ)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if (env.get(name) or "").upper() in _TRUE:
            return name
    return None


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """dsv4ctl's cache directory (`dsv4ctl.cache_dir`, the one rule), which the hub's copies need."""
    base = shared_cache_dir(environ)
    if base is None:
        raise InputError("no directory for dsv4ctl's cache: no home directory", hint=f"set {CACHE_DIR_ENV}")
    return base


def check_commit(commit: str, where: str) -> str:
    """A commit name that is safe as one path segment (the hub's are 40 hex digits)."""
    if not isinstance(commit, str) or not _COMMIT_RE.fullmatch(commit):
        raise InputError(f"{where}: the hub named an unusable revision {commit!r}", hint="check HF_ENDPOINT")
    return commit


class HubStore:
    """dsv4ctl's cache of one repo on one endpoint. Writes are atomic; a cache that cannot be written is skipped
    (the plan goes on, the next run asks the hub again)."""

    def __init__(self, endpoint_url: str, repo_id: str, environ: Mapping[str, str] | None = None) -> None:
        digest = hashlib.sha256(endpoint_url.encode()).hexdigest()[:8]
        host = re.sub(r"[^A-Za-z0-9.-]+", "_", endpoint_url.split("://", 1)[-1]).strip("_") or "endpoint"
        self.root = cache_dir(environ) / "hub" / f"{host}-{digest}" / repo_id.replace("/", "--")

    def ref(self, revision: str) -> str | None:
        try:
            commit = (self.root / "refs" / quote(revision, safe="")).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return commit if _COMMIT_RE.fullmatch(commit) else None

    def set_ref(self, revision: str, commit: str) -> None:
        if revision != commit:
            self._write(self.root / "refs" / quote(revision, safe=""), commit.encode())

    def config_dir(self, commit: str) -> Path | None:
        directory = self.root / commit
        return directory if (directory / "config.json").is_file() else None

    def write_config(self, commit: str, files: Mapping[str, bytes]) -> Path:
        """The commit's config files on disk (the cache, else a temporary directory): geometry reads them there."""
        directory = self.root / commit
        if not all(self._write(directory / name, data) for name, data in files.items()):
            try:
                directory = Path(tempfile.mkdtemp(prefix="dsv4ctl-hub-"))
            except OSError as exc:
                raise cannot_write(Path(tempfile.gettempdir()) / "dsv4ctl-hub-…", exc, TEMP_HINT) from None
            for name, data in files.items():
                write_whole(directory / name, data, hint=TEMP_HINT, durable=False)
        return directory

    def weights(self, commit: str, num_hidden_layers: int) -> CheckpointWeights | None:
        try:
            data = json.loads((self.root / commit / "weights.json").read_text(encoding="utf-8"))
            if data.get("num_hidden_layers") != num_hidden_layers:
                return None  # split by another layer count: read again
            return CheckpointWeights(
                total_bytes=int(data["total_bytes"]), expert_bytes=int(data["expert_bytes"]),
                mtp_bytes=int(data["mtp_bytes"]), num_files=int(data["num_files"]),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def write_weights(self, commit: str, num_hidden_layers: int, weights: CheckpointWeights, files: dict[str, int]) -> None:
        record: dict[str, Any] = {**weights.to_json(), "num_hidden_layers": num_hidden_layers, "files": files}
        self._write(self.root / commit / "weights.json", json.dumps(record, indent=1, sort_keys=True).encode())

    @staticmethod
    def _write(path: Path, data: bytes) -> bool:
        return write_file(path, data)
