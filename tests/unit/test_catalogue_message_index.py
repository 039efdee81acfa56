"""The generated message index (dsv4ctl/catalogue/message_index.json.gz and the packed message_index.bin, built by
scripts/build_message_index.py) and its loader: the packed file is the JSON source's data, the data loads and is consistent, known messages of vLLM and of its neighbours are found with the
right source, trivial text matches nothing, bad input never raises, and lookups are fast."""

from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsv4ctl.catalogue import message_index as mi

ROOT = Path(__file__).resolve().parents[2]
ALL_VLLM = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
KINDS = {"raise", "assert", "assert_bare", "log", "format", "error_string"}
PACKAGE_ORDER = ("vllm", "torch", "transformers", "huggingface_hub", "ray", "safetensors", "triton",
                 "nvidia-cuda-runtime", "nvidia-nccl-cu13", "vllm_ascend", "torch_npu")


@pytest.fixture(scope="module")
def raw() -> dict:
    with gzip.open(mi.SOURCE, "rb") as f:
        return json.loads(f.read())


@pytest.fixture(scope="module")
def all_entries() -> tuple[mi.IndexedMessage, ...]:
    assert mi.available(), mi.load_error()
    return mi.entries()


# ------------------------------------------------------------------------------------------- the data
def test_data_loads_and_header_counts_match(raw, all_entries):
    head = mi.header()
    assert head["schema"] == mi.SCHEMA == raw["schema"]
    assert head["generator"].startswith("python scripts/build_message_index.py")
    assert head["packages"]["vllm"] == list(ALL_VLLM)
    for pkg, version in (("torch", "2.14.1"), ("huggingface_hub", "2.4.0"), ("transformers", "5.19.0"),
                         ("ray", "2.60.0"), ("nvidia-cuda-runtime", "13.0.96"), ("nvidia-nccl-cu13", "2.30.7")):
        assert head["packages"][pkg] == [version]
    counts = head["counts"]
    assert counts["entries"] == len(all_entries) == len(raw["entries"])
    by_pkg: dict[str, int] = {}
    by_kind: dict[str, int] = {}
    checks: dict[str, int] = {}
    later: dict[str, int] = {}
    for e in all_entries:
        by_pkg[e.package] = by_pkg.get(e.package, 0) + 1
        by_kind[e.kind] = by_kind.get(e.kind, 0) + 1
        if e.check:
            checks[e.package] = checks.get(e.package, 0) + 1
        if e.later:
            kind = e.later_kind
            later[kind] = later.get(kind, 0) + 1
    assert counts["by_package"] == by_pkg
    assert counts["by_kind"] == by_kind
    assert counts["checks"] == checks and counts["later"] == later
    assert counts["helpers"] == len(raw["helpers"])
    assert checks["vllm"] > 0.9 * by_pkg["vllm"] and set(later) == {"same_text", "reworded", "check_gone"}
    assert by_pkg["vllm"] > 5000 and by_pkg["torch"] > 1000
    for pkg in ("transformers", "huggingface_hub", "ray", "safetensors", "triton"):
        assert by_pkg[pkg] > 20, pkg
    # per release occurrence counts are printed by the generator and kept in the header
    for rel in ALL_VLLM:
        occ = counts["occurrences"]["vllm"][rel]
        assert occ["raise"] > 1000 and occ["assert"] > 500 and occ["log"] > 100 and occ["assert_bare"] > 1000


def test_file_is_reproducible_gzip():
    data = mi.SOURCE.read_bytes()
    assert data[:2] == b"\x1f\x8b"
    assert data[4:8] == b"\x00\x00\x00\x00", "gzip mtime must be 0 for byte-identical rebuilds"
    assert len(data) < 3_000_000


def test_packed_file_is_the_json_source_packed(raw, all_entries):
    # what diagnose opens is the reviewable source, byte for byte as the generator packs it
    assert mi.DATA.read_bytes() == mi.pack(raw)
    assert mi.DATA.stat().st_size < 4_000_000
    head = {k: v for k, v in raw.items() if k not in ("entries", "helpers")}
    assert mi.header() == head
    fields = raw["fields"]
    for e, row in zip(all_entries, raw["entries"]):
        r = dict(zip(fields, row))
        assert (e.package, e.template, e.pattern, e.function) == (r["package"], r["template"], r["pattern"], r["function"])
        assert (e.check, e.later) == (r["check"], r["later"])
        assert [s.check for s in e.sources] == [src[3] if len(src) > 3 else None for src in r["sources"]]
    # the helpers table is its own section, decoded at its first use
    assert mi._load().packed.helpers() == raw["helpers"]


def test_opening_reads_only_the_buckets():
    code = ("import time; from dsv4ctl.catalogue import message_index as m; t = time.perf_counter(); "
            "assert m.available(); idx = m._load(); assert not idx.blocks; "
            "hit = m.lookup_line('ValueError: Total number of attention heads (32) must be divisible by tensor "
            "parallel size (3).'); assert hit is not None; "
            "assert 0 < len(idx.blocks) < 0.1 * len(idx.offsets), len(idx.blocks); "
            "assert idx.packed._helper_table is None; assert m.helper('uses_mrope'); "
            "assert idx.packed._helper_table is not None")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_entries_are_sorted_and_well_formed(raw, all_entries):
    rank = {p: i for i, p in enumerate(PACKAGE_ORDER)}
    keys = [(rank[e.package], e.package, e.template, e.kind, e.exception or "", e.level or "", e.function, e.pattern)
            for e in all_entries]
    assert keys == sorted(keys)
    versions = raw["packages"]
    seen = set()
    for e in all_entries:
        assert e.kind in KINDS
        assert (e.level is not None) == (e.kind == "log")
        assert e.sources and all(s.releases for s in e.sources)
        assert set(e.releases) <= set(versions[e.package])
        assert all(f.startswith("--") and "_" not in f for f in e.flags)
        assert not e.flags or e.package == "vllm"
        re.compile(e.pattern)
        key = (e.package, e.kind, e.exception, e.level, e.function, e.pattern)
        assert key not in seen, key  # one entry per message, its releases as source rows
        seen.add(key)
        for s in e.sources:
            assert list(s.releases) == sorted(s.releases, key=mi._version_key)
        assert e.cite.startswith(f"{e.package}=={e.newest[0]} ")
        assert len(e.check) <= 400 and (e.check == "" or e.check.startswith(("if ", "assert ")))
        assert not e.check or e.kind in ("raise", "assert", "assert_bare", "log")
        assert not e.check or e.check.startswith("assert ") or e.kind not in ("assert", "assert_bare")
        assert all(s.check != e.check for s in e.sources)  # a row's own check only where it differs
        assert not e.later or (e.package == "vllm" and e.releases[-1] != versions["vllm"][-1]
                               and e.later_kind is not None)
        hash(e)  # still usable in sets and as a key


def test_patterns_find_their_own_templates(all_entries):
    rng = random.Random(7)
    for e in rng.sample(all_entries, 500):
        text = "".join(p if p is not None else "42" for p in mi.template_parts(e.template))
        assert re.search(e.pattern, text, re.DOTALL), e.template


# ------------------------------------------------------------------------------------------ known messages
def _one(hit: mi.IndexedMessage | None) -> mi.IndexedMessage:
    assert hit is not None
    return hit


def _files(hit: mi.IndexedMessage) -> set[str]:
    return {s.file for s in hit.sources}


def test_tp_heads_divisibility():
    hit = _one(mi.lookup_line("ValueError: Total number of attention heads (32) must be divisible by tensor "
                              "parallel size (3)."))
    assert (hit.package, hit.kind, hit.exception) == ("vllm", "raise", "ValueError")
    assert _files(hit) == {"vllm/config/model.py"}
    assert hit.function == "ModelConfig.verify_with_parallel_config"
    assert hit.releases == ALL_VLLM
    assert "--tensor-parallel-size" in hit.flags
    assert hit.cite == "vllm==0.34.0 vllm/config/model.py:1581"
    assert "vllm==0.33.0 vllm/config/model.py:1561" in hit.cites()
    assert "vllm==0.27.1 vllm/config/model.py:1317" in hit.cites()
    assert hit.cites()[0] == hit.cite


def test_kv_cache_too_small_from_a_real_log_line():
    line = ("(EngineCore pid=7790) ERROR 10-21 08:17:02 [core.py:1510] ValueError: To serve at least one request with "
            "the model's max seq len (1048576), (10.06 GiB KV cache is needed, which is larger than the available KV "
            "cache memory (8.02 GiB). Based on the available memory, the estimated maximum model length is 488704. Try "
            "increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
            "`max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/"
            "conserving_memory/ for more details.")
    hit = _one(mi.lookup_line(line))
    assert (hit.package, hit.kind, hit.exception) == ("vllm", "raise", "ValueError")
    assert hit.function == "_check_enough_kv_cache_memory"
    assert hit.releases == ALL_VLLM[:-1]
    # kv_cache_utils.py up to 0.32.0; 0.33.0 moved the check to kv_cache_planning.py
    in_utils = {r for s in hit.sources if s.file == "vllm/v1/core/kv_cache_utils.py" for r in s.releases}
    assert in_utils == set(ALL_VLLM[:-2])
    assert hit.cite == "vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:78"
    # vllm==0.34.0 vllm/v1/core/kv_cache_planning.py:124-132: the same check, its advice now a `hint`
    assert hit.later["reworded"] == "0.34.0" and "Decreasing `max_model_len` also reduces" in hit.later["template"]
    assert "--max-model-len" in hit.flags


def test_batched_tokens_below_max_model_len_with_flags():
    line = ("  Value error, max_num_batched_tokens (8192) is smaller than max_model_len (131072). This effectively "
            "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. "
            "Please increase max_num_batched_tokens or decrease max_model_len. [type=value_error, input_value=...]")
    hit = _one(mi.lookup_line(line))
    assert (hit.package, hit.exception, hit.function) == ("vllm", "ValueError", "SchedulerConfig.verify_max_model_len")
    assert _files(hit) == {"vllm/config/scheduler.py"}
    assert hit.releases == ALL_VLLM
    assert {"--max-num-batched-tokens", "--max-model-len", "--enable-chunked-prefill"} <= set(hit.flags)
    # a pydantic ValidationError around it must not hide it
    assert mi.lookup(line.strip(), "pydantic_core._pydantic_core.ValidationError") == hit


def test_deepseek_v4_fp8_ds_mla_assert_then_value_error():
    old = _one(mi.lookup_line("AssertionError: DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got auto"))
    assert (old.kind, old.exception) == ("assert", "AssertionError")
    assert _files(old) == {"vllm/models/deepseek_v4/attention.py"}
    assert old.releases == ("0.27.1", "0.28.0", "0.29.0")
    assert old.function == "_resolve_dsv4_kv_cache_dtype"
    assert "--kv-cache-dtype" in old.flags
    new = _one(mi.lookup_line("ValueError: DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got bfloat16. "
                              "Please set `--kv-cache-dtype fp8` or select a backend that supports bfloat16 KV cache."))
    assert (new.kind, new.exception) == ("raise", "ValueError")
    assert "vllm/models/deepseek_v4/attention.py" in _files(new)
    assert new.releases == ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")


def test_deepseek_v4_experts_divisible_by_ep_size():
    hit = _one(mi.lookup_line("AssertionError: n_physical_experts=257 must be divisible by ep_size=8. "
                              "Adjust num_redundant_experts."))
    assert (hit.kind, hit.exception) == ("assert", "AssertionError")
    assert _files(hit) == {"vllm/models/deepseek_v4/nvidia/model.py"}
    assert hit.function == "DeepseekV4MoE._init_mega_moe_experts"
    assert hit.releases == ALL_VLLM


def test_bare_assert_source_line():
    hit = _one(mi.lookup_line("    assert active_topk_width >= cm.max_seq_len // self.compress_ratio"))
    assert (hit.kind, hit.exception) == ("assert_bare", "AssertionError")
    assert hit.template == "assert active_topk_width >= cm.max_seq_len // self.compress_ratio"
    assert _files(hit) == {"vllm/models/deepseek_v4/sparse_mla.py"}
    assert hit.releases == ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
    assert hit.cite == "vllm==0.34.0 vllm/models/deepseek_v4/sparse_mla.py:260"


def test_vllm_log_record_and_chat_template():
    hit = _one(mi.lookup_line("(EngineCore_DP0 pid=4242) ERROR 12-01 10:00:00 [multiproc_executor.py:380] Worker proc "
                              "VllmWorker-3 died unexpectedly (exit code: -9), shutting down executor."))
    assert (hit.kind, hit.level, hit.exception) == ("log", "ERROR", None)
    assert hit.function == "MultiprocExecutor.start_worker_monitor.monitor_workers"
    # the line of a log entry is the logger call's, the one vLLM prints as [file.py:N]
    assert hit.cite == "vllm==0.34.0 vllm/v1/executor/multiproc_executor.py:404"
    assert "vllm==0.33.0 vllm/v1/executor/multiproc_executor.py:380" in hit.cites()
    chat = _one(mi.lookup("As of transformers v4.44, default chat template is no longer allowed, so you must provide "
                          "a chat template if the tokenizer does not define one."))
    assert chat.package == "vllm" and "0.33.0" in chat.releases
    assert chat.newest[1].file == "vllm/renderers/hf.py"


def test_huggingface_hub_gated_repo_both_lines():
    first = _one(mi.lookup_line("huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-6a)"))
    second = _one(mi.lookup_line("Cannot access gated repo for url "
                                 "https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash/resolve/main/config.json."))
    assert first == second
    assert (first.package, first.exception) == ("huggingface_hub", "GatedRepoError")
    assert first.cite == "huggingface_hub==2.4.0 huggingface_hub/utils/_http.py:890"


def test_transformers_unknown_model_type():
    hit = _one(mi.lookup_line("ValueError: The checkpoint you are trying to load has model type `deepseek_v4` but "
                              "Transformers does not recognize this architecture. This could be because of an issue "
                              "with the checkpoint, or because your version of Transformers is out of date."))
    assert (hit.package, hit.exception) == ("transformers", "ValueError")
    assert _files(hit) == {"transformers/models/auto/configuration_auto.py"}
    assert hit.releases == ("5.19.0",)


def test_ray_no_running_instance():
    hit = _one(mi.lookup_line("ConnectionError: Could not find any running Ray instance. Please specify the one to "
                              "connect to by setting `--address` flag or `RAY_ADDRESS` environment variable."))
    assert (hit.package, hit.exception) == ("ray", "ConnectionError")
    assert _files(hit) == {"ray/_private/services.py"}


def test_cuda_runtime_and_nccl_strings():
    cuda = _one(mi.lookup_line("torch.AcceleratorError: CUDA error: an illegal memory access was encountered"))
    assert (cuda.package, cuda.kind) == ("nvidia-cuda-runtime", "error_string")
    assert cuda.function == "cudaGetErrorString(700)"
    assert cuda.cite == "nvidia-cuda-runtime==13.0.96 libcudart.so.13 cudaGetErrorString(700)"
    nccl = _one(mi.lookup_line("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
                               "c10d/NCCLUtils.cpp:77, unhandled system error (run with NCCL_DEBUG=INFO for details), "
                               "NCCL version 2.30.7"))
    assert (nccl.package, nccl.function) == ("nvidia-nccl-cu13", "ncclGetErrorString(2)")
    assert nccl.cite == "nvidia-nccl-cu13==2.30.7 libnccl.so.2 ncclGetErrorString(2)"


def test_torch_and_safetensors():
    st = _one(mi.lookup_line("safetensors_rust.SafetensorError: Error while deserializing header: header too large"))
    assert (st.package, st.exception) == ("safetensors", "safetensors_rust.SafetensorError")
    assert st.newest[1].file == "bindings/python/src/lib.rs"
    fmt = [e for e in mi.entries() if e.package == "torch" and e.function == "C10D_NCCL_CHECK"]
    assert fmt and fmt[0].newest[1].file == "torch/include/torch/csrc/distributed/c10d/NCCLUtils.hpp"


def test_exception_type_preference():
    msg = "Total number of attention heads (32) must be divisible by tensor parallel size (3)."
    assert _one(mi.lookup(msg, "ValueError")).exception == "ValueError"
    # a type that does not match must not block a long literal match
    assert _one(mi.lookup(msg, "SomethingElseError")).exception == "ValueError"
    assert _one(mi.lookup("CUDA error: an illegal memory access was encountered", "torch.AcceleratorError")).package \
        == "nvidia-cuda-runtime"


# ------------------------------------------------------------------------------- the raise site's check
def _entry(package: str, template_start: str, function: str, exception: str | None = None) -> mi.IndexedMessage:
    found = [e for e in mi.entries() if e.package == package and e.template.startswith(template_start)
             and e.function == function and exception in (None, e.exception)]
    found = [e for e in found if e.template == template_start] or found
    assert len(found) == 1, [e.template for e in found]
    return found[0]


def test_check_of_an_if_guarded_raise():
    # vllm==0.33.0 vllm/config/model.py:1559-1564: `if total_num_attention_heads % tensor_parallel_size != 0: raise`
    hit = _one(mi.lookup_line("ValueError: Total number of attention heads (32) must be divisible by tensor "
                              "parallel size (3)."))
    assert hit.check == "if total_num_attention_heads % tensor_parallel_size != 0"
    assert all(s.check is None for s in hit.sources)  # every release guards it the same way
    assert hit.check_in("0.27.1") == hit.check and hit.check_in("0.26.0") is None
    assert hit.later == {}  # in the newest release: nothing later to say


def test_check_of_an_assert():
    # vllm==0.33.0 vllm/models/deepseek_v4/nvidia/model.py:355 `assert self.n_physical_experts % self.ep_size == 0`
    hit = _one(mi.lookup_line("AssertionError: n_physical_experts=257 must be divisible by ep_size=8. "
                              "Adjust num_redundant_experts."))
    assert hit.check == "assert self.n_physical_experts % self.ep_size == 0"
    bare = _one(mi.lookup_line("    assert active_topk_width >= cm.max_seq_len // self.compress_ratio"))
    assert bare.check == "assert active_topk_width >= cm.max_seq_len // self.compress_ratio"


def test_check_of_else_elif_and_chain_else():
    # vllm==0.33.0 vllm/config/model.py:2677-2683 (0.34.0 :2721-2727): `if envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN: logger.warning_once(...)
    # else: raise ValueError(f"{msg} To allow overriding this maximum, ...")`
    long_len = _entry("vllm", "{msg} To allow overriding this maximum", "_get_and_verify_max_len")
    assert long_len.check == "if not (envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN)"
    assert long_len.cite == "vllm==0.34.0 vllm/config/model.py:2725"
    # vllm==0.33.0 vllm/config/vllm.py:3532-3535: `elif self.mamba_config.backend != MambaBackendEnum.TRITON: raise`
    elif_ = _entry("vllm", "--use-replayssm requires --mamba-backend triton or flashinfer",
                   "VllmConfig.validate_mamba_cached_kernel")
    assert elif_.check == "if self.mamba_config.backend != MambaBackendEnum.TRITON"
    # vllm==0.28.0 vllm/v1/attention/backends/triton_attn.py:380-393: the else: that ends an if/elif chain raises
    # when none of the chain's tests held
    chain = _entry("vllm", "Unknown cache layout: {cache_layout}", "TritonAttentionBackend.get_kv_cache_stride_order")
    assert chain.check == ("if not (cache_layout == 'NHD' and include_num_layers_dimension or cache_layout == 'NHD' or "
                           "(cache_layout == 'HND' and include_num_layers_dimension) or (cache_layout == 'HND'))")


def test_a_check_that_changed_between_releases():
    # vllm==0.31.0 vllm/engine/arg_utils.py:2096 `if i >= len(cvd_ids):`, 0.32.0 :2133 `if not 0 <= i < len(cvd_ids):`
    e = _entry("vllm", "--device-ids index {i} is out of range for", "EngineArgs._resolve_device_ids")
    assert e.check == "if not 0 <= i < len(cvd_ids)"
    assert e.check_in("0.31.0") == "if i >= len(cvd_ids)" and e.check_in("0.32.0") == e.check
    old = {r for s in e.sources if s.check == "if i >= len(cvd_ids)" for r in s.releases}
    assert old == {"0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0"}


def test_later_same_text_under_another_exception():
    # vllm==0.27.1 vllm/v1/structured_output/backend_guidance.py:281 raises ValueError; 0.28.0 :285 VLLMValidationError
    old = _entry("vllm", "No structural tags found in the grammar spec.", "serialize_guidance_grammar", "ValueError")
    assert old.exception == "ValueError" and old.releases == ("0.27.1",)
    assert old.later == {"same_text": "0.28.0", "exception": "VLLMValidationError"}


def test_later_reworded_under_the_same_condition():
    # vllm==0.29.0 vllm/models/deepseek_v4/attention.py:105 `assert kv_cache_dtype.startswith("fp8"), (...)`;
    # 0.30.0 :111 `if not kv_cache_dtype.startswith("fp8"): raise ValueError(... Please set `--kv-cache-dtype fp8` ...)`
    old = _one(mi.lookup_line("AssertionError: DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got auto"))
    assert old.check == "assert kv_cache_dtype.startswith('fp8')"
    assert old.later["reworded"] == "0.30.0"
    assert old.later["template"].startswith("DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got "
                                            "{kv_cache_dtype}. Please set `--kv-cache-dtype fp8`")
    # vllm==0.29.0 vllm/config/vllm.py:2893 `if self.mamba_config.backend != MambaBackendEnum.TRITON:`, reworded 0.30.0
    triton = _entry("vllm", "--use-replayssm requires --mamba-backend triton", "VllmConfig.validate_mamba_cached_kernel")
    assert triton.template == "--use-replayssm requires --mamba-backend triton"
    assert triton.later == {"reworded": "0.30.0", "template": "--use-replayssm requires --mamba-backend triton or flashinfer"}


def test_later_check_gone():
    # vllm==0.28.0 vllm/config/vllm.py:2574 `if self.num_speculative_tokens > 0: raise ValueError(...)`; 0.29.0 no
    # longer tests it (its :2854 assigns `... = self.num_speculative_tokens > 0`)
    gone = _one(mi.lookup_line("ValueError: --use-replayssm does not support speculative decoding"))
    assert gone.releases[-1] == "0.28.0" and gone.check == "if self.num_speculative_tokens > 0"
    assert gone.later == {"check_gone": "0.29.0"}


def test_helpers_from_the_config_sources():
    # vllm==0.34.0 vllm/config/model.py:2010-2012 and vllm/transformers_utils/config.py:766-772
    prop = mi.helper("ModelConfig.uses_mrope")
    assert prop == (("vllm==0.34.0 vllm/config/model.py:2010-2012",
                     "@property\ndef uses_mrope(self) -> bool:\n    return uses_mrope(self.hf_config)"),)
    both = mi.helper("uses_mrope")
    assert both[0] == prop[0] and both[1][0] == "vllm==0.34.0 vllm/transformers_utils/config.py:766-772"
    assert both[1][1].startswith("def uses_mrope(config: PreTrainedConfig) -> bool:")
    # what those call in turn (vllm/transformers_utils/config.py:762-763)
    assert mi.helper("_uses_mrope")[-1][1].endswith("return _mrope_section(config) is not None")
    assert mi.helper("no_such_helper") is None and mi.helper(None) is None  # type: ignore[arg-type]
    # every helper a check names, each at most 12 lines, each cited
    for name, defs in mi._load().packed.helpers().items():
        for cite, src in defs:
            assert re.fullmatch(r"vllm==0\.\d+\.\d+ vllm/(config|transformers_utils)/\w+\.py:\d+-\d+", cite), name
            assert src.count("\n") < 30 and src.lstrip().startswith(("@", "def ", "async def ")), name


def test_pydantic_wrapped_config_errors():
    # vllm==0.33.0 vllm/config/parallel.py:545-549, 0.34.0 :583-587 (ParallelConfig is a pydantic dataclass: pydantic prints the
    # ValueError as "Value error, <message> [type=value_error, ...]")
    line = ("Value error, data_parallel_size_local (4) must be <= data_parallel_size (2) [type=value_error, "
            "input_value=ArgsKwargs(...), input_type=ArgsKwargs]")
    hit = _one(mi.lookup_line(line))
    assert (hit.package, hit.exception) == ("vllm", "ValueError")
    assert hit.function == "ParallelConfig._validate_parallel_config"
    assert hit.cite == "vllm==0.34.0 vllm/config/parallel.py:585"
    assert hit.check == "if self.data_parallel_size_local > self.data_parallel_size"
    assert mi.lookup_line("  " + line) == hit
    # vllm==0.33.0 vllm/config/vllm.py:1587-1588, an assert in VllmConfig.__post_init__: "Assertion failed, <message>"
    pd = _one(mi.lookup_line("  Assertion failed, PD with decode_context_parallel_size > 1 is only supported for MLA "
                             "models. [type=assertion_error, input_value=ArgsKwargs((), {'model_config': "
                             "ModelConfig(model='x')}), input_type=ArgsKwargs]"))
    assert (pd.kind, pd.function) == ("assert", "VllmConfig.__post_init__")
    assert pd.check == "assert self.model_config.use_mla or dcp_size == 1"


# ------------------------------------------------------------------------------------- nothing and never
@pytest.mark.parametrize("text", [
    "", "x", "   ", "error", "ValueError", "ValueError: ", "AssertionError", "RuntimeError: x",
    "The quick brown fox jumps over the lazy dog while the orchestra tunes its instruments in the hall.",
    "INFO 12-01 10:00:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
])
def test_trivial_or_unrelated_text_matches_nothing(text):
    assert mi.lookup(text) is None
    assert mi.lookup_line(text) is None


@pytest.mark.parametrize("bad", [None, 12, b"bytes", ["list"], "(" * 5000, "\x00\xff" * 100, "a.*?" * 3000,
                                 "Error: " + "x" * 1_000_000, "\n" * 1000, "ValueError: " + "(" * 100])
def test_any_input_never_raises(bad):
    mi.lookup(bad)  # type: ignore[arg-type]
    mi.lookup_line(bad)  # type: ignore[arg-type]
    mi.lookup(bad, bad)  # type: ignore[arg-type]


def test_missing_or_corrupt_file_gives_none(tmp_path):
    line = "ValueError: Total number of attention heads (32) must be divisible by tensor parallel size (3)."
    try:
        mi.reset(tmp_path / "absent.json.gz")
        assert not mi.available()
        assert mi.lookup_line(line) is None and mi.entries() == () and mi.header() == {}
        assert mi.load_error()
        bad = tmp_path / "corrupt.json.gz"
        bad.write_bytes(b"\x1f\x8b not gzip at all")
        mi.reset(bad)
        assert not mi.available() and mi.lookup_line(line) is None
        wrong = tmp_path / "wrong.json.gz"
        wrong.write_bytes(gzip.compress(b'{"schema": 999}'))
        mi.reset(wrong)
        assert not mi.available() and mi.lookup(line) is None
        packed = mi.DATA.read_bytes()
        for name, blob in (("schema", packed[:8] + (999).to_bytes(4, "little") + packed[12:]),
                           ("truncated", packed[: len(packed) // 2]), ("magic", b"DSV4MIX\x01" + packed[8:])):
            path = tmp_path / f"{name}.bin"
            path.write_bytes(blob)
            mi.reset(path)
            assert not mi.available() and mi.lookup_line(line) is None, name
    finally:
        mi.reset()
    assert mi.available() and mi.lookup_line(line) is not None


def test_import_is_lazy():
    code = ("import sys, dsv4ctl.catalogue; assert 'dsv4ctl.catalogue.message_index' not in sys.modules; "
            "from dsv4ctl.catalogue import message_index as m; assert not m._DATA.loaded; "
            "base = ('dsv4ctl.catalogue', 'dsv4ctl.re_cache', 'dsv4ctl.cache_dir', 'dsv4ctl.files', 'dsv4ctl.errors'); "  # the parts every part may use
            "assert not any(k.startswith('dsv4ctl.') and not k.startswith(base) for k in sys.modules), "
            "sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_lookup_speed(all_entries):
    rng = random.Random(11)
    sample = rng.sample(all_entries, 400)
    msgs = ["".join(p if p is not None else "7" for p in mi.template_parts(e.template)) for e in sample]
    noise = ["(EngineCore pid=1) INFO 12-01 10:00:0%d [gpu_model_runner.py:2%d] Loading weights took %d.5 seconds"
             % (i % 10, i, i) for i in range(100)]
    t0 = time.perf_counter()
    hits = [mi.lookup(m, e.exception) for m, e in zip(msgs, sample)]
    misses = [mi.lookup_line(n) for n in noise]
    mean_ms = (time.perf_counter() - t0) / (len(msgs) + len(noise)) * 1000
    assert all(h is not None for h in hits)
    # the same message (or one as specific that is the same text in another function or package)
    same = sum(h.pattern == e.pattern for h, e in zip(hits, sample))
    assert same >= 0.95 * len(sample)
    assert all(h is None for h in misses)
    assert mean_ms < 5, f"mean lookup {mean_ms:.2f} ms"


def test_a_common_phrase_inside_another_message_names_nothing():
    # torch's "{device_type} is not available" is led by a placeholder: its few words inside vLLM's older
    # DeepGEMM message do not make it that message.
    assert mi.lookup_line("RuntimeError: DeepGEMM backend is not available or outdated. Please install or update "
                          "the `deep_gemm` to a newer version to enable FP8 kernels.") is None
    # The CUDA runtime's "invalid argument" names the CUDA error only where CUDA's format puts it.
    assert mi.lookup_line("ValueError: invalid argument for --served-model-name: expected a list") is None
    cuda = mi.lookup_line("torch.AcceleratorError: CUDA error: invalid argument")
    assert cuda is not None and cuda.function == "cudaGetErrorString(1)"


def test_other_accelerators():
    # vllm-ascend: no release that pairs with vLLM 0.27-0.33 is on the registry; its newest is read. torch_npu 2.14.0.
    head = mi.header()
    assert head["packages"]["vllm_ascend"] == ["0.23.0.post1"] and head["packages"]["torch_npu"] == ["2.14.0"]
    hit = _one(mi.lookup_line("ValueError: ACL graph is incompatible with ASCEND_LAUNCH_BLOCKING=1. Please unset "
                              "ASCEND_LAUNCH_BLOCKING or set it to 0. If you need ASCEND_LAUNCH_BLOCKING for debugging, "
                              "consider other methods — for example, check the plog files (default: $HOME/ascend/log/"
                              "debug) for more information about runtime errors."))
    assert hit.package == "vllm_ascend" and _files(hit) == {"vllm_ascend/platform.py"}
    # vLLM's own message that vllm-ascend repeats in its patches is still vLLM's
    assert _one(mi.lookup_line("EngineCore failed to start.")).package == "vllm"
    # torch_npu's NPU/OPS/HCCL checks end with the text of the ACL code: "[Error]: <text>" (NPUErrorCodes.h)
    acl = _one(mi.lookup_line("[Error]: Model execution failed."))
    assert acl.function == "AclErrorCode(507011)" and acl.cite == "torch_npu==2.14.0 NPUErrorCodes.h AclErrorCode(507011)"
    assert mi.lookup_line("Model execution failed because the input was empty") is None  # not after "[Error]: "


def test_every_anchor_word_finds_its_bucket_through_the_hash_table(raw):
    """The packed buckets are the JSON source's: each anchor word (and the empty one) finds exactly its entries,
    a word no entry has finds none."""
    from dsv4ctl.catalogue.message_index_file import PackedIndex

    fields = list(raw["fields"])
    a = fields.index("anchor")
    want: dict[str, list[int]] = {"": []}
    for i, row in enumerate(raw["entries"]):
        words = row[a].split()
        for w in words:
            want.setdefault(w, []).append(i)
        if not words:
            want[""].append(i)
    packed = PackedIndex(mi.DATA.read_bytes())
    assert packed.word_count == len(want)
    for w, ids in want.items():
        assert list(packed.bucket(w)) == ids, w
    for absent in ("zzzz-no-such-anchor", "Ünïcödé", "\udcff"):
        assert list(packed.bucket(absent)) == []
