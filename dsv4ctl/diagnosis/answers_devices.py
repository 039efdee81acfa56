"""Derive steps of the device families (dsv4ctl/catalogue/families/devices.py and the attention backends): what a CUDA,
HIP or Ascend code means, named by the packages that define it (catalogue/gpu_errors), what CANN's own detail line says,
the component a fault names, and which backends a refusal's reasons leave on this platform."""

from __future__ import annotations

import re
from typing import Any, Callable

from dsv4ctl.diagnosis.answers_common import (
    PLATFORM_NAMES, arg, backend_on, platform_file, platform_of, serve_with, with_command,
)
from dsv4ctl.logs.timeline import StartupTimeline

Details = dict[str, Any]

# What CUDA runtime error codes mean in a vLLM deployment, by code, with the threads behind the fix. The code's name and
# text are not written here: they come from the CUDA runtime's own headers and cudaGetErrorString
# (catalogue/gpu_errors, generated from nvidia-cuda-runtime's wheel).
CUDA_CODES: dict[int, tuple[str, tuple[str, ...]]] = {
    1: ("A CUDA call got an argument it refuses. In vLLM this is usually a collective or kernel set-up on a topology it does "
        "not support (custom all-reduce, DeepEP), or a kernel given an empty or oversized shape.",
        ("Rerun with CUDA_LAUNCH_BLOCKING=1 so the failing call raises at its own line",
         "If the frames are in all-reduce or communicator set-up: --disable-custom-all-reduce (vllm-project/vllm#5613)")),
    2: ("The GPU had no memory left for an allocation outside PyTorch's caching allocator (a kernel workspace, NCCL, a CUDA graph).",
        ("Leave more memory outside the KV cache: a lower --gpu-memory-utilization",
         "Or capture fewer CUDA graphs: --enforce-eager to confirm, then a smaller --max-cudagraph-capture-size")),
    3: ("CUDA could not initialise in this process: the driver is not loaded, or CUDA was initialised in a parent before fork.",
        ("Check the driver on the node: nvidia-smi", "Start workers with spawn: VLLM_WORKER_MULTIPROC_METHOD=spawn")),
    35: ("The installed NVIDIA driver is older than the CUDA runtime this torch/vLLM build ships.",
         ("Upgrade the host driver to one that supports the build's CUDA (nvidia-smi shows the driver's CUDA; python -c "
          "'import torch; print(torch.version.cuda)' the build's)", "Or install a torch/vLLM build for the driver's CUDA "
          "(nagadomi/nunif#702)")),
    100: ("This process sees no GPU at all: the container was started without GPUs, or CUDA_VISIBLE_DEVICES is empty or wrong.",
          ("Give the container its GPUs: docker run --gpus all (on Kubernetes a nvidia.com/gpu limit and the NVIDIA runtime class)",
           "Check inside the container: nvidia-smi -L; echo $CUDA_VISIBLE_DEVICES")),
    101: ("A process asked for a GPU index this node does not have: more ranks than visible GPUs, or CUDA_VISIBLE_DEVICES lists fewer.",
          ("Make TP × PP (× local DP) equal the GPUs visible on the node: nvidia-smi -L; echo $CUDA_VISIBLE_DEVICES",)),
    209: ("The build has no kernels compiled for this GPU's architecture.",
          ("Use a vLLM/torch build whose TORCH_CUDA_ARCH_LIST includes this GPU (nvidia-smi --query-gpu=compute_cap --format=csv)",)),
    400: ("A CUDA handle (a stream, event or IPC memory handle) was not valid in this process: IPC across containers or nodes, "
          "or a communicator (DeepEP/NVSHMEM) set up for another fabric.",
          ("If the frames are DeepEP's: another --all2all-backend, or enable IBGDA / the MNNVL fabric API for it (vllm-project/vllm#39925)",
           "Rerun with CUDA_LAUNCH_BLOCKING=1 so the failing call raises at its own line")),
    719: ("A kernel faulted (often an Xid error in the kernel log): the GPU's state is lost for this process.",
          ("Look for Xid errors on the node: dmesg | grep -i xid", "Reset or drain the GPU if they repeat: nvidia-smi -q -d ECC,PAGE_RETIREMENT")),
    802: ("On NVSwitch systems (HGX H100/H200/B200) CUDA waits for the fabric manager, which is not running or not the driver's version.",
          ("Start the fabric manager of the same version as the driver: systemctl enable --now nvidia-fabricmanager "
           "(gpustack/gpustack#1254)", "Check its state: systemctl status nvidia-fabricmanager; nvidia-smi -q | grep -i fabric")),
    803: ("The CUDA driver library this process loaded (libcuda.so.1) does not match the kernel driver: in a container, the "
          "image's CUDA forward-compatibility library (cuda-compat) was loaded over the host driver's.",
          ("Let the host driver's libcuda win: remove the compat path from the loader (rm -f /etc/ld.so.conf.d/cuda-compat.conf && "
           "ldconfig in the image), or VLLM_ENABLE_CUDA_COMPATIBILITY=0 where the image supports it (vllm-project/vllm#33992)",)),
    804: ("CUDA forward compatibility works only on datacenter GPUs; on this GPU the image's CUDA needs a newer host driver.",
          ("Upgrade the host driver to one that supports the image's CUDA natively, or use an image for an older CUDA "
           "(gpustack/gpustack#1254, vllm-project/vllm#4940)",)),
    999: ("CUDA could not talk to the driver: usually the nvidia_uvm module is missing or broken (after a suspend, or /dev/nvidia-uvm "
          "not passed into the container).",
          ("Reload the UVM module with no GPU process running: sudo modprobe -r nvidia_uvm && sudo modprobe nvidia_uvm (pytorch/pytorch#49081)",
           "In a container, check /dev/nvidia-uvm exists: ls -l /dev/nvidia-uvm*")),
}


def _cuda(d: Details, tl: StartupTimeline) -> Details | None:
    from dsv4ctl.catalogue import gpu_errors  # the CUDA runtime's own names and texts: loaded by the answers that ask

    # A ROCm log: torch's HIP build prints HIP's errors (and, where hipify kept the word, "CUDA error: "); its codes are
    # HIP's, named by HIP's own enum, not NVIDIA's.
    if platform_of(d.get("_texts") or "") == "ROCM":
        code = d.get("code")
        found = gpu_errors.hip(int(code)) if code else gpu_errors.hip(str(d.get("cuda_name") or ""))
        if found is None:
            return None
        return {"runtime": "HIP", "cuda_name": f"{found.name}, {found.code}", "cuda_text": d.get("cuda_text") or found.name,
                "cuda_meaning": (found.doc or f"HIP reported {found.name}.") + " This is a ROCm (AMD) log: the code is "
                "HIP's, not the CUDA runtime's.", "cuda_cite": f" ({found.cite})" if found.cite else "",
                "cuda_action": "Check the GPU is one this ROCm build supports: rocminfo | grep gfx, and python -c 'import "
                "torch; print(torch.version.hip)'"}
    found = None
    for key in ("code", "cuda_name", "cuda_text"):
        value = d.get(key)
        if value:
            found = gpu_errors.cuda(int(value) if key == "code" else str(value).strip())
            if found is not None:
                break
    if found is None or found.code not in CUDA_CODES:
        return None
    meaning, actions = CUDA_CODES[found.code]
    cite = f" ({found.cite})" if found.cite else ""
    out: Details = {"runtime": "CUDA", "cuda_name": f"{found.name}, {found.code}",
                    "cuda_text": found.text or found.doc or found.name, "cuda_meaning": meaning, "cuda_cite": cite}
    for key, action in zip(("cuda_action", "cuda_action_2", "cuda_action_3"), actions):
        out[key] = action
    return out


def _custom_ar(d: Details, tl: StartupTimeline) -> Details:
    return with_command("serve_disable_car", serve_with(tl, {"disable_custom_all_reduce": True}))


def _deepep(d: Details, tl: StartupTimeline) -> Details:
    now = arg(tl, "all2all_backend")
    other = "allgather_reducescatter" if now != "allgather_reducescatter" else "naive"
    cmd = serve_with(tl, {"all2all_backend": other})
    return {"a2a_other": cmd or f"--all2all-backend {other}"}


_NPU = {
    "NPU out of memory": ("The NPU ran out of memory ({code} more was asked for).",
                          "Leave more NPU memory free: a lower --gpu-memory-utilization, --max-num-seqs or --max-model-len",
                          "Reduce fragmentation: PYTORCH_NPU_ALLOC_CONF=expandable_segments:True"),
    "EI0006": ("HCCL timed out waiting for a socket from another rank: that rank is stuck or unreachable.",
               "Find the rank that did not arrive (its own log); raise HCCL_CONNECT_TIMEOUT only if it was merely slow",
               "Check the ranks reach each other on the HCCL interface (HCCL_SOCKET_IFNAME)"),
    "Invalid device id": ("The process asked for an NPU index the visible devices do not have.",
                          "Use a contiguous ASCEND_RT_VISIBLE_DEVICES range, so that logical ids start at 0",
                          "With Ray: RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 and ASCEND_RT_VISIBLE_DEVICES on each node"),
    "undefined symbol": ("torch_npu, CANN and vllm-ascend are not the combination they were built for.",
                         "Install the torch_npu / CANN / vllm-ascend versions the vllm-ascend release documents (or its image)",
                         "Install vllm first, then vllm-ascend, so that vllm-ascend's pinned torch wins"),
}


# CANN's own account of an error code, after it in the log: "EZ9999[PID: 8472] 2026-05-14-02:02:46.251.038
# AclNN_Inner_Error(EZ9999):  <detail>" / "EZ9999: [PID: 40917] … <detail>.[FUNC:…][FILE:…]" (vllm-ascend 0.23.0.post1
# docs/source/faqs.md:160 shows one as pasted).
_CANN_DETAIL_RE = re.compile(r"(?P<code>E[0-9A-Z][0-9]{4})(?:\)?:?\s*\[PID: ?[0-9]+\]| ?\[PID: ?[0-9]+\])[^\n]*?"
                             r"(?:\((?P=code)\):|[0-9]{2}:[0-9]{2}:[0-9.]+)\s+(?P<detail>[^\n\[]{8,}?)\s*(?:\[FUNC:|$)", re.M)
# vllm-ascend 0.23.0.post1 vllm_ascend/utils.py:1109-1110: "Current mc2 operators only perform communication space
# partitioning based on HCCL_BUFFSIZE configuration."
_MC2_OPS_RE = re.compile(r"MoeDistribute(?:Dispatch|Combine)\w*|\bmc2\b", re.I)


def _npu(d: Details, tl: StartupTimeline) -> Details | None:
    from dsv4ctl.catalogue import gpu_errors  # torch_npu's ACL texts: loaded by the answers that ask

    kind = d.get("npu_kind") or ""
    code = d.get("npu_code") or ""
    texts = d.get("_texts") or ""
    key = kind or ("EI0006" if code == "EI0006" else "")
    if key in _NPU:
        meaning, a1, a2 = _NPU[key]
        return {"npu_code": code or kind, "npu_meaning": meaning.format(code=code), "npu_action": a1, "npu_action_2": a2}
    detail = next((m.group("detail").strip().rstrip(".") for m in _CANN_DETAIL_RE.finditer(texts)), None)
    acl = gpu_errors.acl(code) if code.isdecimal() else None
    if acl is None and not re.match(r"E[0-9A-Z][0-9]{4}", code):
        # A code torch_npu's table does not name: CANN's own code for the same report, where the log prints one.
        m = re.search(r"(?<![A-Za-z0-9])(E[0-9A-Z][0-9]{4})(?=[:\[)])", texts)
        if m is None:
            return None
        code = m.group(1)
    if acl is not None:
        meaning = f"The CANN runtime reported ACL error {code}: \"{acl.text}\" ({acl.cite})."
    else:
        meaning = f"The CANN runtime reported {code}"
        meaning += f": \"{detail}\"." if detail else ": an operator failed on the NPU."
    action = "Rerun with ASCEND_LAUNCH_BLOCKING=1 to name the failing operator (then unset it: it is slow)"
    action_2 = "Read the device log (plog, under ~/ascend/log) for the code behind it"
    if detail and re.search(r"\baivec\b|\baicore\b|\bAI Core\b|\baicpu\b", detail, re.I):
        meaning += (" The NPU's AI Core (its compute unit) raised an exception while running an operator: a device-side "
                    "fault of that kernel, the CUDA illegal-memory-access of an Ascend.")
    if detail and re.search(r"Hccl\w*Alloc\w*Resource|HcclAllocCom", detail):
        meaning += " HCCL could not allocate the communication resources the operator needs."
        if _MC2_OPS_RE.search(texts):
            action = ("The MoE dispatch/combine (MC2) operators take their communication space from HCCL_BUFFSIZE "
                      "(vllm_ascend/utils.py:1109 in vllm-ascend 0.23.0.post1): check it is set large enough for this "
                      "EP size, and the memory left for HCCL on the NPU")
    return {"npu_code": code, "npu_meaning": meaning, "npu_action": action, "npu_action_2": action_2,
            **({"cann_detail": detail} if detail else {})}



def _backend_refused(d: Details, tl: StartupTimeline) -> Details:
    """What the refusal's reasons and the platform the frames show say of the backend, and the names that answer a
    reason (the backends of this platform whose names say they do sparse attention, for 'sparse not supported')."""
    from dsv4ctl.catalogue import vllm_flags  # every release's backends: loaded by the answers that ask

    backend, reasons = d.get("backend") or "", (d.get("reasons") or "").replace("'", "")
    texts = d.get("_texts") or ""
    platform = platform_of(texts, words=False)
    chosen = arg(tl, "attention_backend")
    out: Details = {"reasons": reasons, "platform_text": ""}
    out["chosen_text"] = (f"This launch asked for it (--attention-backend {chosen})." if chosen else
                          "The log does not show the launch asking for it: --attention-backend or VLLM_ATTENTION_BACKEND "
                          "names it when set, and vLLM's own selection picks it when neither is.")
    if platform and not backend_on(backend, platform):
        out["platform_text"] = (f" {backend} is a backend of another platform than this start's "
                                f"({PLATFORM_NAMES[platform]}: its frames are in vllm/{platform_file(platform)}).")
    release = vllm_flags.resolved_release(tl.vllm_version)
    names = [n for n in vllm_flags.choices("attention_backend", tl.vllm_version) if backend_on(n, platform)] \
        if platform else []
    if "sparse" in reasons.lower() and names:
        sparse = [n for n in names if "SPARSE" in n and n != backend]
        rel = release.release if release else "the newest release indexed"
        out["backend_pick"] = (f"Name a backend that does sparse attention on {PLATFORM_NAMES[platform]}: --attention-backend NAME "
                               f"(vLLM {rel} has {', '.join(sparse[:10])})")
    else:
        out["backend_pick"] = "Name a backend that takes this configuration: --attention-backend NAME (vllm serve --help=all)"
    out["backend_drop"] = ("Or start without --attention-backend, letting vLLM choose" if chosen else
                           "If --attention-backend or VLLM_ATTENTION_BACKEND is set in the deployment, check what it names")
    return out


DERIVE: dict[str, Callable[[Details, StartupTimeline], Details | None]] = {
    "cuda_error_code": _cuda,
    "custom_all_reduce_cuda_error": _custom_ar,
    "deepep_cuda_error": _deepep,
    "ascend_npu_error": _npu,
    "attention_backend_refused": _backend_refused,
}
