"""fit-length decides once: fits, shrinks or does not fit (vLLM's refusal, or no length surviving the margin), with
one sentence that says why; every line it prints, every figure of its JSON and its exit code follow from that one
decision. Checked over random boxes (busy GPUs, several nodes), sizes, parallelism and lengths, through the planner
and the renderer the command uses, and through the command itself on examples."""

from __future__ import annotations

import io
import json
import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from dsv4ctl.errors import Dsv4ctlError
from dsv4ctl.planning import FitRequest, plan_fit
from dsv4ctl.render.fit import render_fit
from fitkit import FLASH, PRO, GiB, h200, snapshot

GB = 1000**3


def _render(result) -> str:
    buffer = io.StringIO()
    render_fit(result, Console(file=buffer, width=100, no_color=True, highlight=False))
    return buffer.getvalue()


def _length_of(command: str) -> int:
    argv = shlex.split(command)
    return int(argv[argv.index("--max-model-len") + 1])


def _assert_one_decision(result, text: str) -> None:
    doc = result.to_json()
    command = result.vllm_command()
    assert doc["verdict"] == result.verdict and doc["fits"] == result.fits and doc["why"] == result.why
    assert result.why and result.why in " ".join(text.split())  # the decision is said, whole
    if not result.fits:
        # No command for a plan that does not fit, and no recommended length beside a refusal.
        assert command is None and doc["vllm_command"] is None and doc["vllm_flags"] == []
        assert "vllm serve command:" not in text and "Does not fit:" in text
        if result.refusal is not None:
            assert doc["recommended_max_model_len"] == 0
            assert "recommended --max-model-len" not in text and "auto picks" not in text
        else:  # nothing survives the margin: vLLM would start, but no length is recommended
            assert doc["recommended_max_model_len"] == 0 and "no safe length" in result.why
        for alt in result.alternatives:  # what would fit instead: each a command that runs, planned to fit
            argv = shlex.split(alt.vllm_command)
            assert argv[:3] == ["vllm", "serve", result.geometry.model]
            assert alt.recommended_max_model_len > 0 and _length_of(alt.vllm_command) == alt.recommended_max_model_len
            for token in shlex.split(alt.change):
                assert token in argv, (alt.change, alt.vllm_command)
        return
    assert command is not None and "Does not fit:" not in text
    assert ("Fits:" if result.verdict == "fits" else "Shrinks:") in text
    assert shlex.split(command)[:3] == ["vllm", "serve", result.geometry.model]
    assert command in text
    if result.requested_max_model_len is not None:
        # The length asked for, kept: it fits, and how much memory it leaves is said.
        assert _length_of(command) == result.requested_max_model_len
        assert doc["requested_spare_bytes"] is not None and doc["requested_spare_bytes"] >= 0
    else:
        assert result.recommended_max_model_len > 0
        assert _length_of(command) == result.recommended_max_model_len <= max(result.autofit_max_model_len,
                                                                              result.model_max_model_len)
        assert (result.verdict == "fits") == (result.autofit_max_model_len >= result.model_max_model_len)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from([FLASH, PRO]),
    busy=st.lists(st.integers(min_value=0, max_value=120), min_size=8, max_size=8),
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2]),
    dp=st.sampled_from([1, 2]),
    checkpoint_gb=st.sampled_from([150, 160, 300, 865, 1200]),
    utilization=st.sampled_from([0.7, 0.85, 0.92, 0.95]),
    length=st.one_of(st.none(), st.integers(min_value=1024, max_value=2_000_000)),
    batched=st.sampled_from([None, 2048, 8192, 32768]),
)
def test_one_decision_over_random_boxes(model, busy, tp, pp, dp, checkpoint_gb, utilization, length, batched):
    devices = [h200(i, free=max(0, 150_109_880_320 - used * GiB)) for i, used in enumerate(busy)]
    if tp * pp * dp > len(devices):
        return
    request = FitRequest(model=model, tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp,
                         checkpoint_bytes=checkpoint_gb * GB, gpu_memory_utilization=utilization, max_model_len=length,
                         max_num_batched_tokens=batched)
    try:
        result = plan_fit(request, snapshot=snapshot(*devices))
    except Dsv4ctlError as exc:  # refused before any memory (a split the checkpoint cannot take): exit 6 or a usage error
        assert exc.exit_code in (2, 6)
        return
    _assert_one_decision(result, _render(result))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kv_gib=st.floats(min_value=0.1, max_value=80.0),
    margin=st.sampled_from(["5%", "512MiB", "2GiB", "20GiB"]),
    length=st.one_of(st.none(), st.integers(min_value=256, max_value=1_048_576)),
    tp=st.sampled_from([1, 2, 8]),
)
def test_one_decision_with_a_given_kv_memory(kv_gib, margin, length, tp):
    from dsv4ctl.planning import parse_margin

    request = FitRequest(model=FLASH, kv_cache_memory_bytes=int(kv_gib * GiB), margin=parse_margin(margin),
                         max_model_len=length, tensor_parallel_size=tp)
    result = plan_fit(request)
    _assert_one_decision(result, _render(result))


@pytest.mark.parametrize("args, code", [
    (("--kv-cache-memory", "512MiB"), 6),  # no safe length: exit 6, no command
    (("--kv-cache-memory", "9.81GiB", "--margin", "20GiB"), 6),
    (("--kv-cache-memory", "9.81GiB", "--max-model-len", "2000000"), 6),  # above the model's maximum: refused
    (("--kv-cache-memory", "9.81GiB", "--max-model-len", "500000"), 0),  # the length asked for, kept
    (("--kv-cache-memory", "9.81GiB"), 0),
])
def test_the_command_follows_the_decision(cli, args, code):
    text = cli("fit-length", FLASH, *args)
    doc = json.loads(cli("fit-length", FLASH, *args, "--json").stdout)
    assert text.exit_code == code and doc["fits"] == (code == 0)
    assert ("vllm serve command:" in text.stdout) == (code == 0) and (doc["vllm_command"] is not None) == (code == 0)
    # A plan that does not fit prints no command of its own: only what would fit instead, each planned.
    printed = [line.strip() for line in text.stdout.splitlines() if line.strip().startswith("vllm serve ") and not line.strip().endswith(":")]
    expected = [doc["vllm_command"]] if code == 0 else [a["vllm_command"] for a in doc["alternatives"]]
    assert printed == expected
    if "--max-model-len" in args and code == 0:
        assert "--max-model-len 500000" in doc["vllm_command"] and "(fits:" in text.stdout


def test_a_busy_gpu_gets_vllms_own_remedy(tmp_path, cli):
    """One GPU with 40 GiB taken by another process: vLLM refuses the start (free memory below the budget); the
    answer is the refusal, the utilization that leaves room (vLLM's own advice) with its command, and the process."""
    from dsv4ctl.gpu import GpuProcess

    devices = [h200(i) for i in range(8)]
    busy = devices[3]
    import dataclasses

    devices[3] = dataclasses.replace(busy, free_bytes=busy.free_bytes - 40 * GiB, used_bytes=40 * GiB,
                                     processes=(GpuProcess(999, "python", 40 * GiB),))
    path = tmp_path / "busy.json"
    path.write_text(json.dumps(snapshot(*devices).to_json()))
    doc = json.loads(cli("fit-length", FLASH, "--gpus", str(path), "-tp", "8", "--checkpoint-size", "160GB",
                         "--json").stdout)
    assert doc["verdict"] == "does_not_fit" and doc["recommended_max_model_len"] == 0
    assert doc["why"].startswith("vLLM would refuse: Free memory on device cuda:3")
    util = [a for a in doc["alternatives"] if a["change"].startswith("--gpu-memory-utilization")]
    assert util and float(util[0]["change"].split()[1]) < 0.92 and "vLLM's own advice" in util[0]["why"]
    assert any("pid 999 (python)" in n for n in doc["notes"])
    text = cli("fit-length", FLASH, "--gpus", str(path), "-tp", "8", "--checkpoint-size", "160GB")
    assert text.exit_code == 6 and "auto picks" not in text.stdout and "more GPU memory is needed" not in text.stdout
