"""Derive steps of the device, cluster, package, Hub and model families (dsv4ctl/catalogue/families/): what a CUDA or
NPU code means and what operators did about it, which package a module is, the launch's command with the fix."""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from dsv4ctl.diagnosis.answers_common import arg, serve_with, with_command
from dsv4ctl.logs.timeline import StartupTimeline

Details = dict[str, Any]

# Top-level modules operators find missing, with the distribution that provides each, as its wheel's metadata names it
# (pip download <dist> --no-deps: mooncake-transfer-engine 0.3.13.post1 ships `mooncake`, nixl 1.5.2 `nixl`, lmcache
# 0.5.6 `lmcache`, flashinfer-python 0.7.4 `flashinfer`, hf_transfer 0.1.9, ray 2.60.0, triton 3.9.0, torch-npu 2.14.0
# `torch_npu`). DeepGEMM and DeepEP are built from their repositories (no wheel of DeepSeek's on PyPI): no pip name.
_PACKAGES = {
    "mooncake": ("mooncake-transfer-engine", "Mooncake's transfer engine, for the Mooncake KV connector"),
    "nixl": ("nixl", "NIXL, for the NixlConnector"),
    "lmcache": ("lmcache", "LMCache, for the LMCache connector"),
    "deep_gemm": (None, "DeepGEMM, built from deepseek-ai/DeepGEMM at the revision this vLLM release was tested with "
                        "(vLLM's container images ship it)"),
    "deep_ep": (None, "DeepEP, built from deepseek-ai/DeepEP with NVSHMEM"),
    "flash_attn": ("flash-attn", "FlashAttention"),
    "flashinfer": ("flashinfer-python", "FlashInfer"),
    "hf_transfer": ("hf_transfer", "hf_transfer (or unset HF_HUB_ENABLE_HF_TRANSFER)"),
    "ray": ("ray", "Ray, for --distributed-executor-backend ray"),
    "triton": ("triton", "Triton"),
    "torch_npu": ("torch-npu", "torch_npu, for Ascend"),
}
_FRAME_FILE_RE = re.compile(r"frame: (\S+?):[0-9]+ in (\S+)")


def _module(d: Details, tl: StartupTimeline) -> Details | None:
    """A module that is not installed. A package to install is named only where its wheel's metadata says it provides the
    module (_PACKAGES); otherwise the package whose code imports it (the frames) is where to look, never a name guessed
    from the module's."""
    from dsv4ctl.diagnosis import reading

    module = d.get("module") or ""
    top = module.split(".")[0]
    if module == "vllm._C" or module.startswith("vllm._"):
        return {"module_sentence": f"{module} is vLLM's compiled extension. It is missing when vLLM was installed from source "
                "without building it, or when a vLLM source tree in the working directory shadows the installed package.",
                "module_action": "Run from outside the source tree (cd /) so the installed vllm is imported",
                "module_action_2": "Or build the extension: pip install -e . in the vLLM checkout (vllm-project/vllm#1814)"}
    if top == "vllm":
        return {"module_sentence": f"{module} is not in this vLLM: the code that imports it (a plugin, a KV connector such as "
                "LMCache, a launcher) was written for another vLLM release.",
                "module_action": "Install the plugin's release that matches this vLLM (pip show vllm), or the vLLM release it "
                "was built for (LMCache/LMCache#1759)"}
    if top in _PACKAGES:
        pip, what = _PACKAGES[top]
        out = {"module_sentence": f"{module} is {what}; it is not installed in the Python environment vLLM runs in.",
               "module_action_2": f"Then check it imports: python -c 'import {top}'"}
        out["module_action"] = (f"Install it into vLLM's environment: python -m pip install {pip}" if pip else
                                f"Install {what} into vLLM's environment")
        return out
    frames = _FRAME_FILE_RE.findall(d.get("_frames") or "")
    importer = next((p for p in (reading.package_of(f) for f, _fn in reversed(frames)) if p and p != top), None)
    if importer is not None and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", top):
        dist = reading.DISTRIBUTION.get(importer, importer)
        return {"module_sentence": f"{module} is imported by {importer}'s code and is not installed in this Python environment. "
                "No package dsv4ctl knows provides it, and a module's name does not say which package does: it may be a "
                f"compiled part of {importer} (an extension its own build makes).",
                "module_action": f"See whether {importer} ships it: pip show -f {dist} | grep -i {top} (if it should and does not, "
                f"{importer}'s installation is incomplete: rebuild or reinstall {importer} for this platform, or use an "
                "image that ships it)",
                "module_action_2": f"Else install what {importer}'s requirements name for it; then check: python -c 'import {top}'"}
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", top):
        return {"module_sentence": f"{module} is not installed in the Python environment vLLM runs in. No package dsv4ctl knows "
                "provides it, and a module's name does not say which package does.",
                "module_action": f"Find which package provides {top} (the code that imports it names it in its requirements), "
                f"install that into vLLM's environment, then check: python -c 'import {top}'"}
    return None


def _abi(d: Details, tl: StartupTimeline) -> Details | None:
    lib = d.get("lib") or ""
    name = lib.rsplit("/", 1)[-1] if lib else "A compiled extension"
    pkg = next((p for p in ("vllm", "flash_attn", "torch_npu", "xformers", "deep_gemm", "flashinfer", "mooncake") if f"/{p}" in lib), None)
    out: Details = {"lib_name": name, "symbol_short": d.get("symbol", "")[:60], "package_hint": pkg or "the package that ships it"}
    if pkg == "vllm":
        out["vllm_c_action"] = ("vLLM's own extension: reinstall this vLLM with the torch it pins, never a torch upgraded "
                                "by hand: pip install --force-reinstall \"vllm==$(pip show vllm | sed -n 's/^Version: //p')\"")
    return out


def _shared_lib(d: Details, tl: StartupTimeline) -> Details:
    return {"lib_base": re.sub(r"\.so.*$", "", d.get("lib") or "")}


def _version(d: Details, tl: StartupTimeline) -> Details | None:
    need = (d.get("need") or "").replace(" ", "") or (">=" + d["need_v"] if d.get("need_v") else "")
    if not need or not d.get("package"):
        return None
    have = d.get("have")
    return {"need": need, "need_spec": need, "have_text": f"{have} " if have else ""}


def _toolchain(d: Details, tl: StartupTimeline) -> Details | None:
    text = d.get("tool_text") or ""
    if d.get("arch"):
        return {"tool_text": f"ptxas does not know {d['arch']}",
                "tool_meaning": f"Triton's bundled ptxas is older than this GPU ({d['arch']}).",
                "tool_action": "Point Triton at the CUDA toolkit's ptxas: TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas (triton-lang/triton#8539)",
                "tool_action_2": "Or upgrade Triton to a release that knows the architecture"}
    if "C compiler" in text:
        return {"tool_meaning": "Triton compiles a small C launcher at run time and found no C compiler in the image.",
                "tool_action": "Install one in the image: apt-get install -y build-essential (or set CC to an existing compiler)"}
    if "Python.h" in text:
        return {"tool_meaning": "Triton's launcher build needs the Python headers of the interpreter, which the image lacks.",
                "tool_action": "Install them: apt-get install -y python3-dev (the package for this Python's version)"}
    if "NVCC" in text:
        return {"tool_meaning": f"DeepGEMM compiles its kernels at run time with nvcc and needs nvcc ≥ {d.get('nvcc_need')}.",
                "tool_action": "Point CUDA_HOME (and PATH) at a CUDA toolkit with a new enough nvcc (vllm-project/vllm#49051)"}
    return None


def _trust(d: Details, tl: StartupTimeline) -> Details:
    repo = d.get("repo")
    return {"repo_text": repo or "The model's repository", **with_command("serve_trust", serve_with(tl, {"trust_remote_code": True}))}


def _windows(d: Details, tl: StartupTimeline) -> Details:
    texts = " ".join(str(v) for v in d.values() if isinstance(v, str))
    if re.search(r"[A-Za-z]:\\\\|[A-Za-z]:\\[A-Za-z]|\\site-packages\\|\.pyd\b|win32|WinError", texts):
        return {"windows_text": "; here the paths are Windows', where vLLM does not run natively",
                "windows_action": "vLLM does not support native Windows: run it under WSL2 or in a Linux container"}
    return {"windows_text": ""}


def _spec(d: Details, tl: StartupTimeline) -> Details:
    cfg = arg(tl, "speculative_config")
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError:
            cfg = None
    if isinstance(cfg, dict) and "num_speculative_tokens" not in cfg:
        fixed = {**cfg, "num_speculative_tokens": 3}
        cmd = serve_with(tl, {"speculative_config": fixed})
        return {"spec_fixed": cmd or "--speculative-config '" + json.dumps(fixed) + "'"}
    return {}


def _feature(d: Details, tl: StartupTimeline) -> Details | None:
    text = d.get("feature_text") or ""
    if len(text) < 8:
        return None
    low = text.lower()
    args = tl.serve_args or {}
    flags = [f"--{k.replace('_', '-')}" for k in args if k not in ("model", "model_tag")]
    out: Details = {"feature_flags_text": f"This launch set: {' '.join(flags[:12])}." if flags else ""}
    asked = re.findall(r"(?:[Ee]nable it with|[Ss]et|[Pp]ass|[Aa]dd|[Uu]se) (--[a-z][\w-]+)", text)
    if asked or re.search(r"\brequires\b", low):
        out["feature_action"] = (f"Do what the message asks: add {' '.join(dict.fromkeys(asked))}" if asked else
                                 "Turn on what the message says it requires")
        cmd = serve_with(tl, {a.lstrip("-").replace("-", "_"): True for a in asked}) if asked else None
        if cmd and all(not a.startswith("--no-") for a in asked):
            out["feature_action"] += f": {cmd}"
        out["feature_action_2"] = "Or the alternative the message names (another backend or method), where it names one"
        return out
    if "speculative" in low or "draft" in low or "spec" in low:
        out["feature_action"] = "Start without --speculative-config, or with a method this model supports (for DeepSeek: mtp)"
    elif "lora" in low:
        out["feature_action"] = "Start without --enable-lora, or serve a model whose architecture supports LoRA"
    elif "cuda graph" in low or "cudagraph" in low:
        out["feature_action"] = "Capture fewer graph kinds: --compilation-config '{\"cudagraph_mode\": \"PIECEWISE\"}', or --enforce-eager"
    elif "expert parallel" in low:
        out["feature_action"] = "Start without --enable-expert-parallel"
    elif "pipeline" in low:
        out["feature_action"] = "Use tensor or data parallelism instead of --pipeline-parallel-size"
    else:
        out["feature_action"] = "Turn off the feature the message names (the flag that enabled it), or use a release that implements it"
    out["feature_action_2"] = "Check whether a newer vLLM implements it: its release notes, or its vllm serve --help=all"
    return out


def _block(d: Details, tl: StartupTimeline) -> Details:
    sizes = [int(x) for x in re.findall(r"[0-9]+", d.get("sizes") or "")]
    block = int(d.get("block") or 0)
    good = sorted({s for s in sizes if s > 0})
    fix = max((s for s in good if s >= 16), default=None) or (good[-1] if good else None)
    out: Details = {"sizes_text": f" (they take {', '.join(map(str, good))})" if good else ""}
    if fix and fix != block:
        out["block_fix"] = fix
        out.update(with_command("serve_block", serve_with(tl, {"block_size": fix})))
    return out


def _backend(d: Details, tl: StartupTimeline) -> Details:
    if d.get("head"):
        return {"head_text": f" (head size {d['head']})", "reasons_text": "",
                "backend_action": "Use the backend that takes every head size, as the message says: --attention-backend FLEX_ATTENTION"
                " (VLLM_ATTENTION_BACKEND=FLEX_ATTENTION on older releases)"}
    reasons = re.findall(r"(\w+) is not valid[^\n]*?Reason: \[([^\]]*)\]", d.get("rest") or "")
    text = "; ".join(f"{b}: {r}" for b, r in reasons[:4])
    return {"head_text": "", "reasons_text": f" ({text})" if text else ""}


def _tp_smaller(d: Details, tl: StartupTimeline) -> Details:
    tp = tl.tensor_parallel_size
    if tp and tp > 1:
        return {"tp_text": f" ({tp})", "tp_smaller": f" than {tp}: {tp // 2}" + (f" or {tp // 4}" if tp >= 4 else "")}
    return {"tp_text": "", "tp_smaller": ""}


def _seqs(d: Details, tl: StartupTimeline) -> Details:
    half = max(1, int(d.get("seqs") or 2) // 2)
    return {"seqs_half": half, **with_command("serve_seqs", serve_with(tl, {"max_num_seqs": half}))}


def _util(d: Details, tl: StartupTimeline) -> Details:
    now = arg(tl, "gpu_memory_utilization")
    return {"util_hint": f" (this launch: {now})" if now else " (the log does not show it; vLLM 0.27.1-0.33.0 default to 0.92)"}


def _kv_len(d: Details, tl: StartupTimeline) -> Details:
    return with_command("serve_len", serve_with(tl, {"max_model_len": int(d["kv_tokens"])}))


def _request_limit(d: Details, tl: StartupTimeline) -> Details | None:
    if d.get("mm_limit"):
        n = int(d["mm_limit"]) + 1
        return {"limit_action": f"If such requests are expected, start with a higher limit: --limit-mm-per-prompt "
                f"'{{\"{d.get('modality', 'image')}\": {n}}}' (vllm-project/vllm#13513)"}
    if d.get("logprobs"):
        return {"limit_action": "If clients need more, start with a larger --max-logprobs (vllm-project/vllm#5312)"}
    text = d.get("limit_text") or ""
    if "allowed-local-media-path" in text:
        return {"limit_action": "Start with --allowed-local-media-path DIR (the directory the file URLs are under), or send "
                "http(s) or data: URLs"}
    if "tool choice" in text:
        return {"limit_action": "Start with --enable-auto-tool-choice --tool-call-parser NAME (the parser for the model: "
                "deepseek_v3, deepseek_v31, …: the list vllm serve --help=all prints; vllm-project/vllm#17792)"}
    return None


def _nixl(d: Details, tl: StartupTimeline) -> Details:
    texts = d.get("_texts") or ""
    cause = ("zmq.error.Again: the 5 s receive timeout ran out" if "zmq.error.Again" in texts or "Resource temporarily "
             "unavailable" in texts else "the log does not show the socket's own error")
    if "engine ID mismatch" in texts:
        cause = ("a reply came, from another engine than the request's: the side channel address reached a different "
                 "vLLM instance, as when VLLM_NIXL_SIDE_CHANNEL_HOST is left at localhost with several instances there")
    request = d.get("nixl_request")
    return {"nixl_cause": cause, "request_text_nixl": f" (request {request})" if request else ""}


def _hub(d: Details, tl: StartupTimeline) -> Details:
    repo = d.get("repo") or (tl.model if tl.model and "/" in tl.model and not tl.model.startswith("/") else None)
    out: Details = {"repo_or_model": repo or "the model", "status": d.get("status") or "401"}
    if repo:
        out["repo"] = repo
    return out


def _host(d: Details, tl: StartupTimeline) -> Details:
    return {"host_or_hub": d.get("host") or "the Hugging Face Hub"}


def _timeout(d: Details, tl: StartupTimeline) -> Details:
    return {"timeout_text": "the engine's execute timeout, VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, default 300 s in vllm/envs.py",
            "timeout_action": "Only if the work is legitimately slow (a first compile): VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=900"}


def _cuda_need(d: Details, tl: StartupTimeline) -> Details:
    return {"cuda_need_v": re.sub(r"^[<>=]+", "", d.get("cuda_need") or "")}


def _size(d: Details, tl: StartupTimeline) -> Details:
    size = int(d.get("size") or 0)
    return {"size_text": f"{size / 2**20:.1f} MiB in {d.get('segment')}" if size else d.get("segment", "")}


def _sglang(d: Details, tl: StartupTimeline) -> Details:
    cause = (d.get("cause") or "").strip()
    return {"cause_text": f" ({cause})" if cause else ""}


def _eager(d: Details, tl: StartupTimeline) -> Details:
    return with_command("serve_eager", serve_with(tl, {"enforce_eager": True}))


def _path_q(d: Details, tl: StartupTimeline) -> Details:
    import shlex

    return {"path_q": shlex.quote(d.get("path") or "")}


def _kv_budget(d: Details, tl: StartupTimeline) -> Details | None:
    max_len, need, avail = int(d["max_len"]), float(d["need"]), float(d["avail"])
    stated = re.search(r"estimated maximum model length is ([0-9]+)", " ".join(str(v) for v in d.values() if isinstance(v, str)))
    if stated:
        fit, basis = int(stated.group(1)), "vLLM's own estimate in the message"
    elif need > 0:
        fit = int(max_len * avail / need) // 16 * 16
        basis = (f"an estimate: {max_len:,} × {avail} / {need}, rounded down to 16 (KV memory grows about linearly with "
                 "the length; vLLM's own estimate can be lower by the block granularity)")
    else:
        return None
    cpu = "cpu" in str(tl.vllm_version or "") or bool(re.search(r"VLLM_CPU|cpu_worker|CPU", " ".join(str(v) for v in d.values() if isinstance(v, str))))
    more = ("a larger VLLM_CPU_KVCACHE_SPACE (the CPU backend's KV budget, in GiB)" if cpu else
            "a higher --gpu-memory-utilization, or more GPUs (--tensor-parallel-size), or --kv-cache-dtype fp8")
    return {"fit_len": fit, "estimate_text": f"The longest that fits: {fit:,} ({basis}).", "more_memory": more,
            **with_command("serve_len", serve_with(tl, {"max_model_len": fit}))}


def _engine_died(d: Details, tl: StartupTimeline) -> Details:
    import shlex

    text = " ".join(str(v) for v in d.values() if isinstance(v, str))
    worker = "WorkerProc hit an exception" in text
    serving = "serving" in text or "/v1/" in text or "chat_completion" in text or "render_chat_request" in text
    frames = re.findall(r"frame: (\S+?):[0-9]+ in (\w+)", text)
    triton = next((f for f, _ in frames if "/triton/" in f), None)
    log = d.get("_log_path")
    pattern = "(EngineCore|Worker)[^ ]* .*(ERROR|Error|Exception)"
    grep = (f"Find the engine's own error in the whole log: grep -n -E {shlex.quote(pattern)} {shlex.quote(log)}" if log else
            "Find the engine's own error in the full log (not an excerpt): the EngineCore and Worker lines marked ERROR "
            "before this one")
    return {
        "while_text": " while serving" if serving else "",
        "who_text": ("A worker's exception was logged, but its exception line is not in these lines." if worker else
                     "The API server found its engine core dead and answers requests with errors."),
        "frames_text": (f" The worker's traceback runs into Triton's kernel launcher ({triton}): a Triton kernel failed to "
                        "compile or launch." if triton else ""),
        "grep_action": grep,
    }


def _pip(d: Details, tl: StartupTimeline) -> Details | None:
    names = [p for p in re.split(r"[,\s]+", d.get("packages") or "") if re.fullmatch(r"[A-Za-z][\w.-]*", p)]
    if not names:
        return None
    return {"packages": ", ".join(names), "pip_args": " ".join(n.replace("_", "-") for n in names)}


DERIVE: dict[str, Callable[[Details, StartupTimeline], Details | None]] = {
    "module_not_installed": _module,
    "extension_abi_mismatch": _abi,
    "shared_library_missing": _shared_lib,
    "package_version_required": _version,
    "jit_toolchain_missing": _toolchain,
    "remote_code_not_trusted": _trust,
    "architecture_inspection_failed": _windows,
    "speculative_config_incomplete": _spec,
    "feature_not_supported": _feature,
    "block_size_unsupported": _block,
    "attention_backend_unavailable": _backend,
    "quantized_shape_tp": _tp_smaller,
    "sampler_warmup_oom": _seqs,
    "no_memory_for_kv_blocks": _util,
    "kv_tokens_below_max_len": _kv_len,
    "request_over_server_limit": _request_limit,
    "nixl_handshake_failed": _nixl,
    "hub_access_denied": _hub,
    "hub_unreachable": _host,
    "worker_stopped_answering": _timeout,
    "container_cuda_requirement": _cuda_need,
    "nccl_shm_segment": _size,
    "sglang_cuda_graph_capture": _sglang,
    "cuda_graph_capture_refused": _eager,
    "model_path_taken_as_hub_id": _path_q,
    "kv_budget_too_small": _kv_budget,
    "hub_revision_missing": _hub,
    "engine_died_cause_elsewhere": _engine_died,
    "remote_code_needs_packages": _pip,
}
