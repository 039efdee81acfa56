"""`flashmla-empty-prefill-chunk` without vLLM: the plan split (pure) and the decisions taken from
vLLM's files alone at registration (no vLLM module imported)."""

from __future__ import annotations

import pytest

import dsv4ctl.fixes as fixes
from dsv4ctl.fixes import flashmla_empty_prefill_chunk as fix


@pytest.mark.parametrize("chunks, nonempty, expected", [
    ([(0, 3, 10, 20)], (True, True, True), [(0, 3, 10, 20)]),
    ([(0, 4, 10, 20), (4, 5, 8, 16)], (True, True, True, True, False), [(0, 4, 10, 20)]),
    ([(0, 4, 10, 20), (4, 5, 8, 16)], (False, True, True, True, True), [(1, 4, 10, 20), (4, 5, 8, 16)]),
    ([(0, 5, 10, 20)], (True, False, True, False, True), [(0, 1, 10, 20), (2, 3, 10, 20), (4, 5, 10, 20)]),
    ([(0, 2, 10, 20)], (False, False), []),
])
def test_split_plan_skips_zero_query_requests_and_keeps_each_chunks_sizes(chunks, nonempty, expected):
    out = fix.split_plan(chunks, nonempty)
    assert out == expected
    assert all(end > start for start, end, *_ in out)
    covered = [i for start, end, *_ in out for i in range(start, end)]
    assert covered == [i for i, flag in enumerate(nonempty) if flag]  # each non-empty request once, in order


def fake_vllm(tmp_path, attention: bool, kernels: bool):
    root = tmp_path / "vllm"
    (root / "models" / "deepseek_v4" / "nvidia").mkdir(parents=True)
    if attention:
        (root / "models" / "deepseek_v4" / "nvidia" / "flashmla.py").write_text("")
    if kernels:
        (root / "_flashmla_C.abi3.so").write_bytes(b"")
    return root


@pytest.mark.parametrize("value", ["all", "flashmla-empty-prefill-chunk"])
def test_a_vllm_without_the_deepseek_v4_flashmla_attention_is_not_applicable(tmp_path, monkeypatch, value):
    root = fake_vllm(tmp_path, attention=False, kernels=True)
    monkeypatch.setattr(fix, "_vllm_dir", lambda: root)
    outcome = fixes._precheck(fix.NAME, fixes.parse_selection(value))
    assert outcome is not None and outcome.status == fixes.NOT_APPLICABLE
    assert "vllm/models/deepseek_v4/nvidia/flashmla.py" in outcome.reason


def test_a_build_without_flashmla_kernels_does_not_need_it_under_all(tmp_path, monkeypatch):
    root = fake_vllm(tmp_path, attention=True, kernels=False)
    monkeypatch.setattr(fix, "_vllm_dir", lambda: root)
    outcome = fixes._precheck(fix.NAME, fixes.parse_selection("all"))
    assert outcome is not None and outcome.status == fixes.NOT_NEEDED and "no FlashMLA kernels" in outcome.reason
    # named explicitly it is installed whatever its need: decided on the target's import
    assert fixes._precheck(fix.NAME, fixes.parse_selection(fix.NAME)) is None


def test_a_cuda_build_defers_to_the_targets_import(tmp_path, monkeypatch):
    root = fake_vllm(tmp_path, attention=True, kernels=True)
    monkeypatch.setattr(fix, "_vllm_dir", lambda: root)
    assert fixes._precheck(fix.NAME, fixes.parse_selection("all")) is None


def test_a_check_that_finds_other_code_plans_not_applicable_without_a_warning():
    check = fixes.FixCheck(fix.NAME, False, None, "_forward_prefill has an unexpected signature")
    outcome = fixes.plan(fixes.parse_selection("all"), check)
    assert outcome.status == fixes.NOT_APPLICABLE
    assert fixes.summary_line({fix.NAME: outcome}).startswith(
        "dsv4ctl fixes: flashmla-empty-prefill-chunk not applicable (_forward_prefill has an unexpected signature)")
    # the other fixes keep their skipped-with-warning behaviour
    other = fixes.FixCheck(fixes.STALE_MAX_MODEL_LEN, False, None, "missing")
    assert fixes.plan(fixes.parse_selection("all"), other).status == fixes.SKIPPED
