"""A model id's checkpoint in the local Hugging Face cache: found, never downloaded.

`find_snapshot("deepseek-ai/DeepSeek-V4-Flash")` returns the snapshot directory vLLM would load (the
revision `refs/main` names), so `fit-length` reads the config and the safetensors headers there.

The cache directory follows huggingface_hub's own precedence (huggingface_hub/constants.py):
`$HF_HUB_CACHE`, else the legacy `$HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`, else
`$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub` (each with `~` and `$VAR` expanded).
It is read from the environment at each call, not from huggingface_hub's import-time constants.

With huggingface_hub installed, its cache API (`try_to_load_from_cache`, which only reads the disk)
resolves the revision; without it, or when it finds nothing, a plain scan of the documented layout
`models--{org}--{name}/{refs/main, snapshots/<rev>/config.json}` does. huggingface_hub is imported
only when the repo's cache folder exists, so the common path costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REVISION = "main"


def hub_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The hub cache directory, as huggingface_hub computes it from the environment."""
    env = os.environ if environ is None else environ

    def expand(path: str) -> str:
        return os.path.expandvars(os.path.expanduser(path))

    if env.get("HF_HUB_CACHE"):
        return Path(expand(env["HF_HUB_CACHE"]))
    if env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(expand(env["HUGGINGFACE_HUB_CACHE"]))
    if env.get("HF_HOME"):
        home = expand(env["HF_HOME"])
    else:
        home = os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
        home = expand(home)
    return Path(home) / "hub"


def repo_folder(model_id: str, cache: Path) -> Path | None:
    """`models--org--name` for `org/name` (None for anything that is not a hub model id)."""
    parts = model_id.split("/")
    if len(parts) != 2 or not all(parts) or any(p in (".", "..") or p.startswith("-") for p in parts):
        return None
    return cache / f"models--{parts[0]}--{parts[1]}"


def is_repo_id(text: str) -> bool:
    """`org/name` as the hub names a model: what the local cache and the hub are asked about."""
    return repo_folder(text, Path()) is not None


def find_snapshot(model_id: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The cached snapshot directory of `org/name` that holds a config.json, or None. Never downloads."""
    cache = hub_cache_dir(environ)
    repo = repo_folder(model_id, cache)
    if repo is None or not repo.is_dir():
        return None
    found = _through_huggingface_hub(model_id, cache)
    if found is not None:
        return found
    return _scan(repo)


def _through_huggingface_hub(model_id: str, cache: Path) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        path = try_to_load_from_cache(model_id, "config.json", cache_dir=str(cache), revision=REVISION)
    except Exception:  # noqa: BLE001 - an id the hub library refuses, a changed API: fall back to the scan
        return None
    return Path(path).parent if isinstance(path, str) and Path(path).is_file() else None


def _scan(repo: Path) -> Path | None:
    """The revision `refs/main` names, else the most recently modified snapshot with a config.json."""
    snapshots = repo / "snapshots"
    try:
        ref = (repo / "refs" / REVISION).read_text(encoding="utf-8").strip()
    except OSError:
        ref = ""
    if ref and (snapshots / ref / "config.json").is_file():
        return snapshots / ref
    try:
        candidates = [d for d in snapshots.iterdir() if (d / "config.json").is_file()]
    except OSError:
        return None
    return max(candidates, key=lambda d: d.stat().st_mtime) if candidates else None
