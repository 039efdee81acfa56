"""scripts/release_delta.py and release_report.py: what changed between two vLLM releases, on two tiny `vllm/`
trees written here (the comparison is pure: trees in, data out)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import add_release  # noqa: E402
import release_delta as rd  # noqa: E402
import release_report  # noqa: E402

OLD = {
    "vllm/v1/core/kv_cache_utils.py": '''
        import logging
        logger = logging.getLogger(__name__)

        def _approximate_gcd(values, lower_bound):
            """Old docstring."""
            return min(values)

        def get_kv_cache_configs(cfg):
            if cfg.x:
                raise ValueError("No available memory for the cache blocks. Try raising the limit.")
            logger.info("Auto-fit max_model_len: reduced from %d to %d", 1, 2)
            return cfg
    ''',
    "vllm/v1/worker/gpu_worker.py": '''
        import logging
        logger = logging.getLogger(__name__)

        class Worker:
            def load(self):
                logger.info("Using V2 Model Runner")
                logger.info("Available KV cache memory: %s GiB", 3)
    ''',
    "vllm/v1/metrics/loggers.py": '''
        class PrometheusStatLogger:
            def __init__(self):
                self.g = Gauge(name="vllm:num_requests_running")
                self.c = Counter(name="vllm:num_preemptions")
    ''',
    "vllm/envs.py": '''
        import os
        environment_variables: dict = {
            "VLLM_ENGINE_READY_TIMEOUT_S": lambda: int(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "600")),
            "VLLM_USE_V2_MODEL_RUNNER": lambda: bool(int(os.getenv("VLLM_USE_V2_MODEL_RUNNER", "1"))),
            "VLLM_X": lambda: os.getenv("VLLM_X", "a"),
        }
    ''',
    "vllm/v1/worker/startup_plan.py": "PLAN_SCHEMA_VERSION = 1\n",
}

NEW = {
    # the planner moved to another file: found by name; _approximate_gcd only lost its docstring
    "vllm/v1/core/kv_cache_planning.py": '''
        import logging
        logger = logging.getLogger(__name__)


        def _approximate_gcd(values, lower_bound):
            return min(values)

        def get_kv_cache_configs(cfg):
            if cfg.x:
                raise ValueError("No memory is available for the cache blocks. Try raising the limit.")
            logger.info("--max-model-len auto reduced max_model_len from %d to %d (%s).", 1, 2, "x")
            return cfg.y
    ''',
    "vllm/v1/worker/gpu_worker.py": '''
        import logging
        logger = logging.getLogger(__name__)

        class Worker:
            def load(self):
                logger.info(
                    "Available KV cache memory: "
                    "%s GiB", 3)
                raise RuntimeError("The model runner requires Triton to run here.")
    ''',
    "vllm/v1/metrics/loggers.py": '''
        class PrometheusStatLogger:
            def __init__(self):
                self.g = Gauge(name="vllm:num_requests_running")
    ''',
    "vllm/envs.py": '''
        import os
        environment_variables: dict = {
            "VLLM_ENGINE_READY_TIMEOUT_S": lambda: int(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "900")),
            "VLLM_X": lambda: os.getenv("VLLM_X", "a"),
            "VLLM_Y": lambda: os.getenv("VLLM_Y", "1"),
        }
    ''',
    "vllm/v1/worker/startup_plan.py": "X = 0\nPLAN_SCHEMA_VERSION = 2\n",
}

REGEXES = {
    "v2_runner": r"Using V2 Model Runner",
    "available_kv": r"Available KV cache memory: (-?[0-9]+(?:\.[0-9]+)?) GiB",
    "autofit": r"max_model_len: reduced from ([0-9,]+) to ([0-9,]+)(.*)",
    "uvicorn": r"Application startup complete",
}


def write_tree(root: Path, files: dict[str, str]) -> rd.Tree:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))
    return rd.Tree(root)


@pytest.fixture()
def trees(tmp_path):
    return write_tree(tmp_path / "old", OLD), write_tree(tmp_path / "new", NEW)


def test_functions_compared_by_ast_across_a_moved_file(trees):
    old, new = trees
    targets = (rd.Target("_approximate_gcd", "vllm/v1/core/", "m"), rd.Target("get_kv_cache_configs", "vllm/v1/core/", "m"),
               rd.Target("Worker.load", "vllm/v1/worker/", "fix"), rd.Target("Worker.gone", "vllm/v1/worker/", "fix"))
    rows = {r["function"]: r for r in rd.compare_functions(old, new, targets)}
    assert rows["_approximate_gcd"] == {"function": "_approximate_gcd", "user": "m", "status": "same",
                                        "old": "vllm/v1/core/kv_cache_utils.py:4",
                                        "new": "vllm/v1/core/kv_cache_planning.py:5"}
    assert rows["get_kv_cache_configs"]["status"] == "changed"
    assert rows["Worker.load"]["status"] == "changed"
    assert rows["Worker.gone"]["status"] == "absent"


def test_a_name_in_two_files_outside_its_place_is_not_guessed(tmp_path):
    t = write_tree(tmp_path, {"vllm/a.py": "def f():\n    return 1\n", "vllm/b.py": "def f():\n    return 2\n"})
    assert rd.find_def(t, rd.Target("f", "vllm/c/", "x")) is None
    assert rd.find_def(t, rd.Target("f", "vllm/b.py", "x")).file == "vllm/b.py"


def test_messages_new_gone_reworded(trees):
    old, new = trees
    m = rd.compare_messages(rd.message_templates(old), rd.message_templates(new))
    assert m["counts"]["reworded"] == 1
    r = m["reworded"][0]
    assert r["old"].startswith("No available memory") and r["new"].startswith("No memory is available")
    assert r["old_at"] == "vllm/v1/core/kv_cache_utils.py:10" and r["new_at"] == "vllm/v1/core/kv_cache_planning.py:10"
    assert [x["template"] for x in m["added"]] == ["The model runner requires Triton to run here."]
    assert m["gone"] == [] and m["counts"]["added"] == 1 and m["counts"]["gone"] == 0


def test_env_added_removed_default_changed_and_watched(trees):
    old, new = trees
    e = rd.compare_env(rd.env_table(old), rd.env_table(new), ("VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_USE_V2_MODEL_RUNNER"))
    assert [x["name"] for x in e["added"]] == ["VLLM_Y"]
    assert [x["name"] for x in e["removed"]] == ["VLLM_USE_V2_MODEL_RUNNER"]
    assert [(x["name"], x["old"], x["new"]) for x in e["changed"]] == [("VLLM_ENGINE_READY_TIMEOUT_S", "'600'", "'900'")]
    watched = {w["name"]: w for w in e["watched"]}
    assert watched["VLLM_ENGINE_READY_TIMEOUT_S"]["status"] == "changed"
    assert watched["VLLM_USE_V2_MODEL_RUNNER"]["status"] == "gone"
    assert watched["VLLM_USE_V2_MODEL_RUNNER"]["old_at"] == "vllm/envs.py:4"


def test_metrics_with_exposition_suffixes(trees):
    old, new = trees
    names = ("vllm:num_requests_running", "vllm:num_preemptions_total")
    rows = {r["name"]: r for r in rd.compare_metrics(rd.metric_sites(old, names), rd.metric_sites(new, names))}
    assert rows["vllm:num_requests_running"]["status"] == "same"
    assert rows["vllm:num_requests_running"]["new"] == "vllm/v1/metrics/loggers.py:3"
    assert rows["vllm:num_preemptions_total"]["status"] == "gone"


def test_log_lines_found_reworded_gone(trees):
    old, new = trees
    a, b = rd.log_lines(old, REGEXES), rd.log_lines(new, REGEXES)
    assert a["v2_runner"] == {"text": "Using V2 Model Runner", "where": "vllm/v1/worker/gpu_worker.py:6"}
    assert b["v2_runner"] is None
    # a literal split over two source lines, the %-args of the logger call as placeholders
    assert b["available_kv"] == {"text": "Available KV cache memory: %s GiB", "where": "vllm/v1/worker/gpu_worker.py:6"}
    assert a["autofit"]["where"] == "vllm/v1/core/kv_cache_utils.py:11"
    assert b["autofit"] is None  # "reduced max_model_len from" is another wording: the regex no longer matches
    rows = {r["key"]: r["status"] for r in rd.compare_log_lines(a, b)}
    assert rows == {"v2_runner": "gone", "available_kv": "same", "autofit": "gone", "uvicorn": "absent"}


def test_regex_literals_and_partial_templates():
    assert rd.regex_branches(r"^Shutting down$|Finished (server) process") == [
        (True, ["Shutting down", rd.END]), (False, ["Finished server process"])]
    assert rd.regex_branches(r"Starting to load model (\S+)(?:\.\.\.)?\s*$") == [(False, ["Starting to load model "])]
    # `$`: the line ends with the literal (or a placeholder)
    assert rd.match_runs("Shutting down.", ["Shutting down", rd.END], anchored=True) is None
    assert rd.match_runs("Shutting down", ["Shutting down", rd.END], anchored=True) == (True, 13)
    hole = "\x00"
    # a path or tqdm's counters printed after the literal: held in part, accepted
    assert rd.match_runs(f"Saved startup plan to {hole}", ["Saved startup plan to ", "startup_plan_", ".json"]) == (False, 22)
    assert rd.match_runs("Loading safetensors checkpoint shards", ["Loading safetensors checkpoint shards", "/"]) == (False, 37)
    # another message that starts alike is not the line
    assert rd.match_runs(f"Engine ID mismatch {hole}", ["Engine ", ": Avg prompt throughput: "]) is None
    assert rd.match_runs("x Shutting down", ["Shutting down"], anchored=True) is None


def test_flags_compare():
    old = {"--a": {"default": "0.92", "src": "f.py:1", "opts": ["--a"]}, "--b": {"default": None, "src": "f.py:2", "opts": []}}
    new = {"--a": {"default": "None", "src": "f.py:3", "opts": ["--a"]}, "--c": {"default": "1", "src": "f.py:4", "opts": []}}
    f = rd.compare_flags(old, new)
    assert f["counts"] == {"old": 2, "new": 2, "added": 1, "removed": 1, "default_changed": 1}
    assert f["default_changed"] == [{"flag": "--a", "old": "0.92", "new": "None", "old_at": "f.py:1", "new_at": "f.py:3"}]


def test_startup_plan_schema(trees):
    old, new = trees
    assert rd.startup_plan_schema(old) == {"schema": 1, "at": "vllm/v1/worker/startup_plan.py:1"}
    assert rd.startup_plan_schema(new) == {"schema": 2, "at": "vllm/v1/worker/startup_plan.py:2"}


def test_fix_facts_read_the_guard(tmp_path):
    body = '''
        class DeepseekV4FlashMLAAttention:
            def _forward_prefill(self, q, swa_metadata):
                for query_start, query_end in plan:
                    %s
                    flash_mla_sparse_fwd(q=q[query_start:query_end])
    '''
    bare = write_tree(tmp_path / "a", {"vllm/models/deepseek_v4/nvidia/flashmla.py": body % "pass"})
    guarded = write_tree(tmp_path / "b", {"vllm/models/deepseek_v4/nvidia/flashmla.py":
                                          body % "if query_end == query_start: continue"})
    assert rd.fix_facts(bare)["flashmla-empty-prefill-chunk"] == {"guarded": False}
    assert rd.fix_facts(guarded)["flashmla-empty-prefill-chunk"] == {"guarded": True}
    assert rd.fix_facts(bare)["deepgemm-metadata-clamp"]["imported_by_name"] is None


def test_report_renders_and_json_round_trips(trees, tmp_path):
    old, new = trees
    report = {"schema_version": rd.SCHEMA_VERSION, "old": "0.1.0", "new": "0.2.0",
              "functions": rd.compare_functions(old, new, (rd.Target("_approximate_gcd", "vllm/v1/core/", "planning/mirror"),)),
              "messages": rd.compare_messages(rd.message_templates(old), rd.message_templates(new)),
              "flags": rd.compare_flags({}, {}), "env": rd.compare_env(rd.env_table(old), rd.env_table(new)),
              "metrics": [], "log_lines": rd.compare_log_lines(rd.log_lines(old, REGEXES), rd.log_lines(new, REGEXES)),
              "fixes": {"old": {}, "new": {}}, "startup_plan": {"old": rd.startup_plan_schema(old),
                                                               "new": rd.startup_plan_schema(new)},
              "steps": [{"step": "planner oracle", "command": "x", "rc": 1, "tail": ["unknown release"]}]}
    assert json.loads(json.dumps(report))["schema_version"] == 1
    md = release_report.render(report)
    assert md.startswith("# vLLM 0.2.0 against 0.1.0")
    assert "1 AST-identical" in md and "Startup-plan schema: 1 → 2 (changed)" in md
    assert "**Failed steps:** planner oracle (exit 1)" in md


def test_register_keeps_version_order(tmp_path):
    f = tmp_path / "releases.txt"
    f.write_text("# known\n0.27.1\n0.33.0\n")
    assert add_release.register("0.34.0", f) and add_release.register("0.30.0", f)
    assert not add_release.register("0.33.0", f)
    assert add_release.read_releases(f) == ("0.27.1", "0.30.0", "0.33.0", "0.34.0")


def test_log_lines_file_shape(tmp_path):
    write_tree(tmp_path / "src" / "vllm-0.1.0", OLD)
    write_tree(tmp_path / "src" / "vllm-0.2.0", NEW)
    data = add_release.log_lines_file(tmp_path, ("0.1.0", "0.2.0"), REGEXES)
    assert data["schema_version"] == 1 and data["not_vllm"] == ["uvicorn"]
    assert data["releases"]["0.2.0"]["v2_runner"] is None
    assert data["releases"]["0.1.0"]["v2_runner"]["where"] == "vllm/v1/worker/gpu_worker.py:6"
    assert set(data["releases"]["0.1.0"]) == {"v2_runner", "available_kv", "autofit"}


def test_the_script_prints_json_with_its_schema_version(tmp_path, monkeypatch, capsys):
    write_tree(tmp_path / "src" / "vllm-0.1.0", OLD)
    write_tree(tmp_path / "src" / "vllm-0.2.0", NEW)
    monkeypatch.setattr(add_release, "read_releases", lambda *a: ("0.1.0", "0.2.0"))
    assert add_release.main(["0.2.0", "--wheels", str(tmp_path), "--report-only", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema_version"] == 1 and (out["old"], out["new"]) == ("0.1.0", "0.2.0")
    assert out["startup_plan"]["new"]["schema"] == 2 and out["steps"] == []
    assert "no cli_args.py" in out["flags"]["error"]  # these trees have no `vllm serve` parser
    assert add_release.main(["0.2.0", "--wheels", str(tmp_path), "--report-only"]) == 0
    assert capsys.readouterr().out.startswith("# vLLM 0.2.0 against 0.1.0")


def test_an_unknown_release_is_one_line_not_a_traceback(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        add_release.main(["9.9.9", "--wheels", str(tmp_path), "--report-only"])
    assert e.value.code == 2
    assert "holds no vllm/" in capsys.readouterr().err


def test_the_help_says_the_default_run_rewrites_the_tables_and_needs_the_network(capsys):
    with pytest.raises(SystemExit) as done:
        add_release.main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "rewrites the tables" in text and "needs the network" in text and "unless --wheel" in text
    assert "--report-only reads only what is unpacked and writes nothing" in text
