"""Which of the logs given together are one run of a deployment, and which are separate launches.

A group's conclusions (one root cause across its members, the silent ranks, "the nodes differ") hold only for
the nodes of one run. Logs of separate launches given together (two single-node starts, a restart a day
later) are read each on its own instead, and said to be separate.

Two logs are **tied** to one run when they show it: the data-parallel head a headless node names is the
head's address and RPC port (vllm==0.32.0 vllm/entrypoints/cli/serve.py:239 `… in headless mode, with head
node address tcp://HOST:PORT`; the head's `--data-parallel-address` / `--data-parallel-rpc-port`), the same
multi-node master (`--nnodes` > 1 with `--master-addr` / `--master-port`), or the Ray executor's driver and a
log of Ray workers only (`(RayWorkerWrapper pid=…, ip=…)`). Two logs are **separate launches** when nothing
ties them and

- both show their model, and the models differ; or both show their vLLM release, and the releases differ;
- their times lie more than a day apart (tied or not: a restart is another run of the same deployment);
  less is not read as separate, since the logs of one run may carry times of different zones (a UTC
  `kubectl --timestamps` stamp beside vLLM's local time);
- each is a whole deployment by its own flags: it logged its `non-default args`, and none of them makes it
  part of more (data-parallel across nodes, `--headless`, `--nnodes`, the Ray executor).

What is unknown (a flag a log does not show) separates nothing.
"""

from __future__ import annotations

from dsv4ctl import stamps
from dsv4ctl.group.model import MemberReading

FAR_S = 24 * 3600
# Flags by which a launch is one node of more (vLLM's argument names, as `non-default args` logs them).
_MULTI_NODE = ("headless", "data_parallel_address", "data_parallel_start_rank", "data_parallel_rank",
               "data_parallel_hybrid_lb", "data_parallel_external_lb", "node_rank", "master_addr")


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def whole_by_itself(r: MemberReading) -> bool:
    """A launch whose own flags make it a whole deployment: it logged them, and none joins it to other nodes."""
    if not r.args_logged or r.role == "headless":
        return False
    a = r.args
    if any(a.get(k) not in (None, False) for k in _MULTI_NODE):
        return False
    if (_int(a.get("nnodes")) or 1) > 1 or str(a.get("distributed_executor_backend") or "") == "ray":
        return False
    size, local = _int(a.get("data_parallel_size")) or 1, _int(a.get("data_parallel_size_local"))
    return not (size > 1 and local is not None and local < size)


def _same_endpoint(a: tuple[str, str | None] | None, b: tuple[str, str | None] | None) -> bool:
    return a is not None and b is not None and a[0] == b[0] and (a[1] is None or b[1] is None or a[1] == b[1])


def tied(a: MemberReading, b: MemberReading) -> bool:
    """Evidence in the two logs that they are one run (see the module's text)."""
    if _same_endpoint(a.dp_head, b.dp_head) or _same_endpoint(a.master, b.master):
        return True
    return {a.ray, b.ray} == {"launch", "worker"}


def _model(r: MemberReading) -> str | None:
    value = r.settings.get("model") or r.args.get("model")
    return str(value) if value else None


def _span(r: MemberReading) -> tuple[int, int] | None:
    first, last = stamps.seconds(r.first_time), stamps.seconds(r.last_time)
    if first is None or last is None:
        return None
    return min(first, last), max(first, last)


def apart(a: MemberReading, b: MemberReading) -> str | None:
    """Why the two logs are separate launches, or None when nothing says so."""
    sa, sb = _span(a), _span(b)
    if sa is not None and sb is not None:
        gap = max(sa[0], sb[0]) - min(sa[1], sb[1])
        if gap > FAR_S:
            return f"their times lie {gap // 86400} day{'s' if gap >= 2 * 86400 else ''} apart"
    if tied(a, b):
        return None
    ma, mb = _model(a), _model(b)
    if ma and mb and ma != mb:
        return f"different models ({ma}, {mb})"
    if a.vllm_version and b.vllm_version and a.vllm_version != b.vllm_version:
        return f"different vLLM releases ({a.vllm_version}, {b.vllm_version})"
    if whole_by_itself(a) and whole_by_itself(b):
        return "each is a whole deployment by its own flags (no data-parallel, multi-node or Ray flags join it to another)"
    return None


def runs(members: list[MemberReading]) -> tuple[list[list[MemberReading]], list[str]]:
    """The vLLM logs in runs (in their order: a log joins the first run none of whose logs it is apart from,
    else starts one), and the reasons the runs are apart (empty when there is one run)."""
    out: list[list[MemberReading]] = []
    reasons: list[str] = []
    for r in members:
        for run in out:
            why = [(other, w) for other in run if (w := apart(r, other))]
            if not why:
                run.append(r)
                break
            reasons += [f"{other.label} and {r.label}: {w}" for other, w in why]
        else:
            out.append([r])
    return out, (reasons if len(out) > 1 else [])
