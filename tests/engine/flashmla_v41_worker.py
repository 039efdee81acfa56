"""Run in a process whose `vllm` is one release's source tree (test_fix_flashmla_empty_chunk_v41.py): the real
DeepSeek-V4.1 `DeepseekV4FlashMLAAttention._forward_prefill` walks the real chunk plan of
`DeepseekSparseSWAMetadata`; only the GPU kernels, the Triton gathers and the workspace manager are replaced at
their import site. Prints one JSON line: the rows handed to the kernel per case, unpatched and patched."""

from __future__ import annotations

import importlib.metadata
import json
import sys
from types import SimpleNamespace

release, version = sys.argv[1], sys.argv[2]
sys.path.insert(0, release)
_real = importlib.metadata.version
importlib.metadata.version = lambda name: f"{version}+cpu" if name == "vllm" else _real(name)

import torch  # noqa: E402



class _NoCudaEvent:  # module bodies build CUDA events; none is recorded here
    def __init__(self, *args, **kwargs):
        pass


torch.cuda.Event = _NoCudaEvent
import vllm.models.deepseek_v41.nvidia.flashmla as module  # noqa: E402
from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWAMetadata  # noqa: E402

from dsv4ctl.fixes import flashmla_empty_prefill_chunk as fix  # noqa: E402

WINDOW, MAX_MODEL_LEN, MAX_BATCHED, HEAD_DIM, HEADS = 128, 4096, 8, 512, 2
calls: list[int] = []


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, attn_sink, topk_length, out):
    calls.append(int(q.shape[0]))
    out += 1
    return out, None, None


class Workspace:
    def get_simultaneous(self, *specs):
        return [torch.zeros(shape, dtype=dtype) for shape, dtype in specs]


module.flash_mla_sparse_fwd = flash_mla_sparse_fwd
module.combine_topk_swa_indices = lambda topk, qsl, *a, out, **k: out
module.dequantize_and_gather_k_cache = lambda *a, **k: None
module.current_workspace_manager = Workspace


def layer():
    cls = module.DeepseekV4FlashMLAAttention
    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    obj.compress_ratio, obj.window_size, obj.max_num_batched_tokens = 1, WINDOW, MAX_BATCHED
    obj.topk_indices_buffer = torch.zeros((MAX_BATCHED, 512), dtype=torch.int32)
    obj.scale, obj.attn_sink, obj._prefill_num_heads = 0.04, torch.zeros(HEADS), HEADS
    return obj


def batch(decodes, prefills):
    queries = decodes + [q for _, q in prefills]
    offsets = torch.tensor([0] + torch.tensor(queries).cumsum(0).tolist(), dtype=torch.int32)
    seq = torch.tensor([s for s, _ in prefills], dtype=torch.int32)
    qlen = torch.tensor([q for _, q in prefills], dtype=torch.int32)
    gather = qlen + torch.clamp(seq - qlen, min=0, max=WINDOW - 1)
    return DeepseekSparseSWAMetadata(
        block_table=torch.zeros((len(queries), 16), dtype=torch.int32),
        slot_mapping=torch.zeros(int(offsets[-1]), dtype=torch.int64), block_size=32,
        query_start_loc=offsets.clone(), query_start_loc_cpu=offsets,
        num_decodes=len(decodes), num_prefills=len(prefills), num_decode_tokens=sum(decodes),
        num_prefill_tokens=int(qlen.sum()), prefill_seq_lens=seq.clone(), prefill_seq_lens_cpu=seq,
        prefill_gather_lens=gather, prefill_query_lens_cpu=qlen, prefill_window_size=WINDOW,
        prefill_max_model_len=MAX_MODEL_LEN, prefill_max_num_batched_tokens=MAX_BATCHED,
    )


def run(prefills):
    calls.clear()
    meta = batch([1], prefills)
    total = int(meta.query_start_loc_cpu[-1])
    q = torch.zeros((total, HEADS, HEAD_DIM), dtype=torch.bfloat16)
    out = torch.zeros_like(q)
    skip = meta.num_decode_tokens
    layer()._forward_prefill(q=q[skip:], positions=torch.zeros(total - skip, dtype=torch.int64),
                             compressed_k_cache=torch.zeros(1), swa_k_cache=torch.zeros(1), output=out[skip:],
                             attn_metadata=SimpleNamespace(block_table=meta.block_table.clone(), block_size=64),
                             swa_metadata=meta)
    return {"kernel_rows": list(calls), "rows": out[skip:, 0, 0].float().tolist()}


CASES = {"four_then_empty": [(4096, 1)] * 4 + [(4096, 0)], "empty_between": [(4096, 1), (4096, 0), (4096, 1)]}
result = {"guarded": fix._guards_empty_range(module.DeepseekV4FlashMLAAttention._forward_prefill)}
result["unpatched"] = {name: run(p) for name, p in CASES.items()}
result["install"] = fix.install_v41(module)
result["patched"] = {name: run(p) for name, p in CASES.items()}
print("RESULT " + json.dumps(result))
