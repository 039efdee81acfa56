"""Weights from the hub's headers, before the download.

For a hub id (`org/name`) that is neither a local path nor in the local Hugging Face cache, the checkpoint's
config.json (and tokenizer_config.json) and its safetensors headers are read from the hub through
huggingface_hub's own API, by HTTP range requests, without tensor data; the bytes are split per rank exactly
as a local checkpoint's (`geometry.tally_tensors`). Only when a plan needs them: `HubWeights` reads the headers
the first time a size is asked, so a plan given `--kv-cache-memory` or `--from-log` never touches the network,
and a built-in id (its KV layout ships with dsv4ctl) reads the hub only for the weights.

What huggingface_hub 2.4.0 provides, and what this relies on (the lower bound in pyproject.toml, 0.20.0, has
each of them):
- `HfApi(endpoint=...)` (hf_api.py:2158); the token is huggingface_hub's own: `HF_TOKEN`, then
  `HUGGING_FACE_HUB_TOKEN` (utils/_auth.py:147-149), else the saved login; sent as `authorization: Bearer ...`
  (utils/_headers.py:119).
- `get_hf_file_metadata(hf_hub_url(...))` (file_download.py:1618, :211): a HEAD of
  `{endpoint}/{repo_id}/resolve/{revision}/config.json`; the commit is its `X-Repo-Commit` header
  (file_download.py:1677; constants.py:94). A response without it is not a Hub (the same check and reason as
  file_download.py:1790-1796).
- `HfApi.hf_hub_download(..., cache_dir=...)` (hf_api.py:6365) for the config files, into a temporary directory:
  the user's Hugging Face cache is left as it was (a snapshot holding only config.json would look downloaded).
- `HfApi.get_safetensors_metadata(repo_id, revision=...)` (hf_api.py:6669): `model.safetensors`, else
  `model.safetensors.index.json` and every shard it names, each header by a range request of its first 100 kB
  (hf_api.py:6944, :6955); the index is fetched with `self.hf_hub_download` (hf_api.py:6777), so `_HeaderApi`
  gives that call the same temporary cache_dir. Each tensor's `TensorInfo` has dtype, shape and data_offsets
  (utils/_safetensors.py:14-40).
- Errors (errors.py): `RepositoryNotFoundError` (:313; also a 401 without a valid token, utils/_http.py:933-936),
  `GatedRepoError` (:343), `RevisionNotFoundError` (:386), `EntryNotFoundError` (:422; `LocalEntryNotFoundError`
  :467 is the one hf_hub_download raises when the hub cannot be reached, file_download.py:1962-1966),
  `NotASafetensorsRepoError` (:180, raised at hf_api.py:6820), `SafetensorsParsingError` (:173),
  `OfflineModeIsEnabled` (:86), `HfHubHTTPError` (:90). Transport errors come from the HTTP client
  (httpx2 in 2.4.0, requests before 1.0) and are treated as "not reachable".

Offline (`HF_HUB_OFFLINE`) or unreachable, what dsv4ctl's cache holds (`planning/checkpoint/hub_store.py`) is used; with
nothing there a plan that needs the weights stops with one line naming what to pass instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dsv4ctl.errors import InputError
from dsv4ctl.files import temporary_directory
from dsv4ctl.planning.checkpoint.geometry import (
    CheckpointWeights,
    Dsv4Geometry,
    _geometry_from_config,
    _read_json,
    tally_tensors,
)
from dsv4ctl.planning.checkpoint.hub_store import CONFIG_FILES, HubStore, cache_dir, check_commit, endpoint, offline_variable

REVISION = "main"
WEIGHTS_HINT = (
    "pass the checkpoint directory (its safetensors headers give the size), --checkpoint-size SIZE (the whole "
    "checkpoint), --weights-memory SIZE (per GPU), --from-log startup.log, or --kv-cache-memory SIZE"
)
# Bits per element of each safetensors dtype (the names the safetensors format writes; sub-byte types packed).
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
_TRANSPORT_MODULES = {"httpx", "httpx2", "httpcore", "requests", "urllib3", "socket", "ssl"}


class HubUnavailable(Exception):
    """The hub cannot be asked (offline, unreachable) and dsv4ctl's cache has not what is needed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class HubRead:
    """A commit's config files as read: from the hub now, or from dsv4ctl's cache (and why)."""

    repo_id: str
    endpoint: str
    revision: str  # as asked: "main", or a commit
    commit: str
    directory: Path  # config.json (and tokenizer_config.json) of that commit
    from_cache: bool
    reason: str | None = None  # why the cache was used instead of the hub


def read_config(repo_id: str, revision: str = REVISION, commit: str | None = None) -> HubRead:
    """The config files of `repo_id` at `revision` (or the pinned `commit`): the hub's, else dsv4ctl's cache."""
    ep = endpoint()
    store = HubStore(ep, repo_id)
    if commit is not None and store.config_dir(commit) is not None:
        return HubRead(repo_id, ep, revision, commit, store.config_dir(commit), True, "cached for this commit")
    offline = offline_variable()
    if offline is not None or _hub_missing():
        return _cached(store, repo_id, ep, revision, commit, f"{offline} is set" if offline else _hub_missing())
    with temporary_directory("dsv4ctl-hub-") as tmp, _quiet():
        try:
            api = _api(ep, tmp)
            found = commit or _commit_of(api, repo_id, revision)
            directory = store.config_dir(found) or store.write_config(found, _config_files(api, repo_id, found))
        except Exception as exc:  # noqa: BLE001 - sorted below: the hub's answer, a transport failure, or re-raised
            reason = _unreachable(exc, repo_id, ep, revision, commit)
            return _cached(store, repo_id, ep, revision, commit, reason)
    store.set_ref(revision, found)
    return HubRead(repo_id, ep, revision, found, directory, False)


def read_weights(read: HubRead, num_hidden_layers: int) -> tuple[CheckpointWeights, bool]:
    """The commit's tensor bytes from its safetensors headers (dsv4ctl's cache first), and whether cached."""
    store = HubStore(read.endpoint, read.repo_id)
    cached = store.weights(read.commit, num_hidden_layers)
    if cached is not None:
        return cached, True
    offline = offline_variable()
    if offline is not None or _hub_missing():
        reason = f"{offline} is set" if offline else _hub_missing()
        raise HubUnavailable(f"{reason}, and dsv4ctl's cache ({cache_dir()}) has no headers of commit {read.commit}")
    with temporary_directory("dsv4ctl-hub-") as tmp, _quiet():
        try:
            metadata = _api(read.endpoint, tmp).get_safetensors_metadata(read.repo_id, revision=read.commit)
        except Exception as exc:  # noqa: BLE001 - sorted as in read_config
            reason = _unreachable(exc, read.repo_id, read.endpoint, read.commit, read.commit)
            raise HubUnavailable(f"{reason}, and dsv4ctl's cache has no headers of commit {read.commit}") from None
    files: dict[str, int] = {}
    sizes: list[tuple[str, int]] = []
    where = f"{read.repo_id} at {read.commit}"
    for filename, file_metadata in sorted(metadata.files_metadata.items()):
        for name, info in file_metadata.tensors.items():
            size = tensor_bytes(info.dtype, info.shape, info.data_offsets, f"{where}, {filename}, tensor {name!r}")
            sizes.append((name, size))
            files[filename] = files.get(filename, 0) + size
    weights = tally_tensors(sizes, num_hidden_layers, num_files=len(metadata.files_metadata))
    store.write_weights(read.commit, num_hidden_layers, weights, files)
    return weights, False


def tensor_bytes(dtype: str, shape: Any, data_offsets: Any, where: str) -> int:
    """A tensor's bytes from dtype x shape, checked against its data_offsets span (the span for a dtype not known)."""
    span = int(data_offsets[1]) - int(data_offsets[0]) if data_offsets is not None else None
    bits = DTYPE_BITS.get(str(dtype))
    if bits is None:
        if span is None:
            raise InputError(f"{where}: dtype {dtype!r} has no known size and no data_offsets")
        return span
    size = math.ceil(math.prod(int(d) for d in shape or ()) * bits / 8)
    if span is not None and size != span:
        raise InputError(
            f"{where}: {dtype} x {list(shape or ())} is {size} bytes but its data_offsets span {span}",
            hint="the safetensors header is inconsistent; pass --weights-memory SIZE",
        )
    return size


class HubWeights:
    """CheckpointWeights read from the hub's headers the first time a size is asked (never before: the network
    only when a plan needs the weights). With `preset` (a built-in id's geometry), the hub's config.json is
    checked to describe the same KV layout; with `commit`, that revision is read (a partial local snapshot)."""

    from_hub = True

    def __init__(self, repo_id: str, revision: str = REVISION, *, preset: Dsv4Geometry | None = None,
                 commit: str | None = None, read: HubRead | None = None) -> None:
        self.repo_id, self.revision, self.preset, self.commit = repo_id, revision, preset, commit
        self.read: HubRead | None = read  # the config read (set already for a geometry read from the hub)
        self.weights: CheckpointWeights | None = None
        self.weights_from_cache = False

    def resolve(self) -> CheckpointWeights:
        if self.weights is not None:
            return self.weights
        try:
            read = self.read or read_config(self.repo_id, self.revision, self.commit)
            hub_geometry = _geometry_from_config(
                _read_json(read.directory / "config.json"), model=self.repo_id, source="hub", config_path=None,
                weights=None, directory=read.directory,
            )
            if self.preset is not None:
                _check_preset(self.preset, hub_geometry, read)
            self.weights, self.weights_from_cache = read_weights(read, hub_geometry.num_hidden_layers)
        except HubUnavailable as exc:
            raise InputError(
                f"cannot predict KV memory for {self.repo_id}: the weight size per GPU is unknown ({exc.reason})",
                hint=WEIGHTS_HINT,
            ) from None
        except InputError as exc:  # the hub's answer (no such repo, gated, no safetensors): what else gives the size
            hint = exc.hint if exc.hint and WEIGHTS_HINT in exc.hint else f"{exc.hint + '; or ' if exc.hint else ''}{WEIGHTS_HINT}"
            raise InputError(exc.message, hint=hint) from None
        self.read = read
        return self.weights

    # The CheckpointWeights interface (planning/plan/memory.py weights_per_rank reads these).
    total_bytes = property(lambda self: self.resolve().total_bytes)
    expert_bytes = property(lambda self: self.resolve().expert_bytes)
    mtp_bytes = property(lambda self: self.resolve().mtp_bytes)
    num_files = property(lambda self: self.resolve().num_files)
    dense_bytes = property(lambda self: self.resolve().dense_bytes)

    def to_json(self) -> dict[str, int] | None:
        """The sizes read so far (None before the hub was asked: this never asks it)."""
        return self.weights.to_json() if self.weights is not None else None

    def to_state(self) -> dict[str, Any]:
        read = self.read
        return {
            "repo_id": self.repo_id, "revision": self.revision, "endpoint": read.endpoint if read else None,
            "commit": read.commit if read else self.commit, "config_read": read is not None,
            "weights_read": self.weights is not None,
            "read_from": None if read is None else ("cache" if read.from_cache else "hub"),
            "cache_reason": read.reason if read else None,
        }

    def describe(self) -> str:
        read = self.read
        if read is None:
            return f"{self.repo_id} on the hub, not read yet"
        what = "config.json and safetensors headers" if self.weights is not None else "config.json"
        where = f"dsv4ctl's cache ({read.reason})" if read.from_cache else "the hub"
        return f"{self.repo_id} at commit {read.commit} on {read.endpoint}: {what} read from {where}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HubWeights) and (self.repo_id, self.revision, self.commit) == (
            other.repo_id, other.revision, other.commit)

    def __hash__(self) -> int:
        return hash((self.repo_id, self.revision, self.commit))

    def __repr__(self) -> str:
        return f"HubWeights({self.repo_id!r}, {self.revision!r}, read={self.weights is not None})"


def geometry_from_hub(repo_id: str) -> Dsv4Geometry:
    """A hub id's geometry from its config.json on the hub (or dsv4ctl's cache of it); weights when asked."""
    try:
        read = read_config(repo_id)
    except HubUnavailable as exc:
        raise InputError(
            f"{repo_id}: not a local checkpoint or config.json, not in the local Hugging Face cache, and its "
            f"config.json cannot be read from the hub ({exc.reason})",
            hint="pass the checkpoint directory or its config.json (with --weights-memory SIZE), or let dsv4ctl reach "
            "the hub (HF_ENDPOINT, HF_HUB_OFFLINE)",
        ) from None
    config = _read_json(read.directory / "config.json")
    geometry = _geometry_from_config(config, model=repo_id, source="hub", config_path=None, weights=None,
                                     directory=read.directory)
    return replace(geometry, weights=HubWeights(repo_id, read.revision, commit=read.commit, read=read), revision=read.commit)


_PRESET_FIELDS = ("architecture", "num_hidden_layers", "compress_ratios", "num_nextn_predict_layers", "sliding_window",
                  "head_dim", "index_head_dim", "model_max_model_len")


def _check_preset(preset: Dsv4Geometry, hub: Dsv4Geometry, read: HubRead) -> None:
    """The plan's KV layout came from the preset; the weights must belong to a checkpoint with that layout."""
    differ = [f for f in _PRESET_FIELDS if getattr(preset, f) != getattr(hub, f)]
    if differ:
        shown = ", ".join(f"{f} {getattr(hub, f)!r} (preset {getattr(preset, f)!r})" for f in differ[:3])
        raise InputError(
            f"{read.repo_id} at commit {read.commit}: the hub's config.json differs from dsv4ctl's built-in preset "
            f"(the layout planned): {shown}",
        )  # HubWeights.resolve adds what to pass instead


def _cached(store: HubStore, repo_id: str, ep: str, revision: str, commit: str | None, reason: str) -> HubRead:
    found = commit or store.ref(revision)
    directory = store.config_dir(found) if found else None
    if found is None or directory is None:
        raise HubUnavailable(f"{reason}, and dsv4ctl's cache ({cache_dir()}) has no copy of {revision}")
    return HubRead(repo_id, ep, revision, found, directory, True, reason)


def _api(ep: str, cache: str) -> Any:
    """huggingface_hub's HfApi (imported only here: commands that need no hub never load it), whose downloads go to
    `cache`, a temporary directory."""
    from huggingface_hub import HfApi

    class _HeaderApi(HfApi):
        def hf_hub_download(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("cache_dir") is None:
                kwargs["cache_dir"] = cache
            return super().hf_hub_download(*args, **kwargs)

    return _HeaderApi(endpoint=ep)


def _hub_missing() -> str | None:
    """Why huggingface_hub cannot be used (it is a dependency, but a trimmed environment may lack it)."""
    import importlib.util

    return None if importlib.util.find_spec("huggingface_hub") else "huggingface_hub is not installed"


@contextmanager
def _quiet() -> Iterator[None]:
    """No progress bars while the hub is read (the answer is one plan), and no tqdm monitor thread left behind: tqdm
    starts one with its first bar even when the bar is disabled, and a process with a thread no longer forks
    diagnose's parallel scan. `monitor_interval = 0` is tqdm's documented switch; `HF_HUB_DISABLE_PROGRESS_BARS=0`
    keeps the bars (huggingface_hub 2.4.0 utils/tqdm.py:131-136: the variable has priority)."""
    import tqdm
    from huggingface_hub import constants
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    interval, tqdm.tqdm.monitor_interval = tqdm.tqdm.monitor_interval, 0
    silence = not are_progress_bars_disabled() and getattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", None) is not False
    if silence:
        disable_progress_bars()
    try:
        yield
    finally:
        tqdm.tqdm.monitor_interval = interval
        if silence:
            enable_progress_bars()


def _commit_of(api: Any, repo_id: str, revision: str) -> str:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo_id, "config.json", revision=revision, endpoint=api.endpoint)
    metadata = get_hf_file_metadata(url)  # a HEAD; commit_hash is X-Repo-Commit (file_download.py:1677)
    if not metadata.commit_hash:  # huggingface_hub's own check and words, file_download.py:1790-1796
        raise InputError(
            f"{api.endpoint} did not name the commit of {repo_id} (no X-Repo-Commit header): it does not seem to be "
            "served by a Hugging Face Hub endpoint",
            hint="point HF_ENDPOINT at a Hub-compatible endpoint",
        )
    return check_commit(metadata.commit_hash, repo_id)


def _config_files(api: Any, repo_id: str, commit: str) -> dict[str, bytes]:
    from huggingface_hub.utils import EntryNotFoundError, LocalEntryNotFoundError

    files: dict[str, bytes] = {}
    for name in CONFIG_FILES:
        try:
            files[name] = Path(api.hf_hub_download(repo_id, name, revision=commit)).read_bytes()
        except EntryNotFoundError as exc:
            if isinstance(exc, LocalEntryNotFoundError) or name == "config.json":
                raise
    return files


def _unreachable(exc: Exception, repo_id: str, ep: str, revision: str, commit: str | None) -> str:
    """The reason when `exc` says the hub could not be reached; raises the InputError the hub's own answer means;
    re-raises anything else (a bug stays visible)."""
    from huggingface_hub import utils as hf_errors

    what = f"{repo_id} at {commit or revision} on {ep}"
    if isinstance(exc, InputError):
        raise exc
    if isinstance(exc, hf_errors.OfflineModeIsEnabled):
        return "huggingface_hub is in offline mode"
    if isinstance(exc, hf_errors.GatedRepoError):
        raise InputError(f"{what}: the repo is gated", hint="accept its terms on the model page and set HF_TOKEN") from None
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        raise InputError(f"{what}: no such model (or a private one: set HF_TOKEN)", hint="check the model id") from None
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        raise InputError(f"{what}: no such revision", hint="check the model id and revision") from None
    if isinstance(exc, hf_errors.EntryNotFoundError) and not isinstance(exc, hf_errors.LocalEntryNotFoundError):
        raise InputError(f"{what}: no config.json", hint="is it a model repo of a transformers checkpoint?") from None
    if isinstance(exc, hf_errors.NotASafetensorsRepoError):  # what hf_api.py:6820-6822 says it lacks
        raise InputError(f"{what}: no model.safetensors or model.safetensors.index.json", hint=WEIGHTS_HINT) from None
    if isinstance(exc, hf_errors.SafetensorsParsingError):
        raise InputError(f"{what}: a safetensors header cannot be parsed ({_first_line(exc)})", hint=WEIGHTS_HINT) from None
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, hf_errors.HfHubHTTPError) and isinstance(status, int) and 400 <= status < 500 and status not in (408, 429):
        raise InputError(f"{what}: the hub answered HTTP {status}", hint="check the model id, HF_TOKEN and HF_ENDPOINT") from None
    cause = exc.__cause__ if isinstance(exc, hf_errors.LocalEntryNotFoundError) and exc.__cause__ else exc
    if isinstance(cause, (OSError, TimeoutError)) or any(c.__module__.split(".")[0] in _TRANSPORT_MODULES
                                                          for c in type(cause).__mro__):
        return f"{ep} is not reachable ({type(cause).__name__}: {_first_line(cause)})"
    raise exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]
