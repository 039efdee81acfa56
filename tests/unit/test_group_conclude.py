"""The group's comparison of its nodes and its runs (group.conclude, group.runs), on members as the reader makes
them: a flag is compared only where a log shows it; a log that printed its flags shows the ones it left out at
vLLM's default; a headless node and a Ray worker node, which print none, show only what their engines log."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dsv4ctl.group.conclude import MUST_MATCH, conclude, shown_value
from dsv4ctl.group.model import Member, MemberReading
from dsv4ctl.group.runs import apart, runs, whole_by_itself

HEAD_ARGS = {"model": "/models/DeepSeek-V4-Pro", "data_parallel_size": 2, "data_parallel_size_local": 1,
             "data_parallel_address": "10.0.0.1", "data_parallel_rpc_port": 13345}


def member(name: str, *, args: dict[str, Any] | None = None, settings: dict[str, Any] | None = None,
           version: str | None = "0.32.0", verdict: str = "healthy", first: str = "11-03 10:00:00",
           last: str = "11-03 10:05:00", role: str = "single", **ties: Any) -> MemberReading:
    return MemberReading(
        member=Member(name=name, path=name), ranks=[], rank_basis="none", role=role, verdict=verdict, exit_code=0,
        root_cause=None, root_title=None, root_line=None, root_text=None, root_time=None, first_time=first,
        last_time=last, vllm_version=version, max_model_len=None, fixes=[], args=dict(args or {}),
        settings=dict(settings or {}), args_logged=args is not None, **ties)


def differ(members: list[MemberReading]) -> list[tuple[str, str]]:
    """The group's "the nodes differ" findings (the rank findings aside: these members hold no ranks)."""
    reading = conclude(members, [m.member.name for m in members], None)
    return [(f.id, f.detail) for f in reading.findings if f.id.endswith("_differ")]


def test_a_flag_left_out_of_printed_args_is_its_default():
    a = member("a.log", args={**HEAD_ARGS}, dp_head=("10.0.0.1", "13345"))
    b = member("b.log", args={**HEAD_ARGS, "pipeline_parallel_size": 1, "data_parallel_start_rank": 1},
               dp_head=("10.0.0.1", "13345"))
    assert shown_value(a, "pipeline_parallel_size") == 1
    assert not differ([a, b])
    c = member("c.log", args={**HEAD_ARGS, "pipeline_parallel_size": 2, "data_parallel_start_rank": 1},
               dp_head=("10.0.0.1", "13345"))
    assert differ([a, c]) == [("group_settings_differ", "a.log: 1; c.log: 2")]


def test_a_log_without_printed_args_shows_only_its_engines_config():
    head = member("head.log", args={**HEAD_ARGS, "tensor_parallel_size": 8}, dp_head=("10.0.0.1", "13345"))
    node = member("node.log", role="headless", settings={"model": "/models/DeepSeek-V4-Pro", "max_model_len": 4096},
                  dp_head=("10.0.0.1", "13345"))
    assert shown_value(node, "tensor_parallel_size") is not shown_value(head, "tensor_parallel_size")
    assert not differ([head, node])  # 8 against unknown: nothing to say


def test_values_decided_later_are_not_compared():
    a = member("a.log", args={**HEAD_ARGS, "max_model_len": -1, "kv_cache_dtype": "auto"}, dp_head=("10.0.0.1", None))
    b = member("b.log", args={**HEAD_ARGS, "max_model_len": 131072, "kv_cache_dtype": "fp8", "data_parallel_start_rank": 1},
               dp_head=("10.0.0.1", None))
    assert not differ([a, b])


@settings(deadline=None)  # the first example loads the flag table
@given(st.sampled_from(MUST_MATCH), st.one_of(st.integers(-2, 1 << 20), st.booleans(), st.text(max_size=8)))
@example("model", "\u00b2")  # a digit to str.isdigit(), not to int()
def test_a_worker_log_never_makes_the_nodes_differ(key, value):
    head = member("head.log", args={**HEAD_ARGS, key: value}, ray="launch")
    workers = member("node1.log", args=None, role="ray_worker", ray="worker")
    assert not differ([head, workers])


def test_separate_launches_and_one_run():
    single = member("oom.log", args={"model": "deepseek-ai/DeepSeek-V4-Pro", "tensor_parallel_size": 4})
    other = member("port.log", args={"model": "deepseek-ai/DeepSeek-V4-Pro", "port": 8001})
    assert whole_by_itself(single) and "whole deployment" in apart(single, other)
    reading = conclude([single, other], ["oom.log", "port.log"], None)
    assert reading.separate and reading.root is None and not reading.findings
    # a Ray driver and a Ray worker node's log are one run; a log of another model is not
    driver = member("node0.log", args={"model": "m", "distributed_executor_backend": "ray"}, ray="launch")
    workers = member("node1.log", args=None, role="ray_worker", ray="worker", version=None)
    qwen = member("qwen.log", args={"model": "Qwen/Qwen3-0.6B", "distributed_executor_backend": "ray"}, ray="launch")
    launches, why = runs([driver, workers, qwen])
    assert [[r.member.name for r in run] for run in launches] == [["node0.log", "node1.log"], ["qwen.log"]]
    assert any("different models" in w for w in why)
    # tied by the data-parallel head, two nodes stay one run whatever else differs (and that is a finding)
    head = member("head.log", args=HEAD_ARGS, dp_head=("10.0.0.1", "13345"), version="0.32.0")
    node = member("node.log", role="headless", dp_head=("10.0.0.1", "13345"), version="0.31.0")
    assert not conclude([head, node], ["head.log", "node.log"], None).separate
    assert differ([head, node]) == [("group_versions_differ", "head.log: 0.32.0; node.log: 0.31.0")]
