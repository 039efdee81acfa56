"""GPU, driver and accelerator errors: CUDA's error codes, CUDA in a forked process, DeepEP and custom all-reduce
CUDA checks, ROCm's device access, Ascend's CANN codes.

CUDA's codes and texts are the runtime's own (cudaGetErrorString, CUDA runtime 13.0.96, in the message index);
`dsv4ctl.diagnosis.answers` maps a code or a text to what it means and what operators did about it.
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

FAMILIES: tuple[Signature, ...] = (
    Signature(
        id="cuda_reinit_in_fork",
        severity="critical",
        tier=1,
        title="CUDA was initialised before vLLM forked its workers",
        meaning=(
            "Something in the parent process touched CUDA before the workers were started with fork, and a forked "
            "child cannot use CUDA. vLLM picks fork unless told otherwise when it thinks CUDA is not initialised."
        ),
        patterns=(r"Cannot re-initialize CUDA in forked subprocess",),  # torch==2.13.0 torch/cuda/__init__.py:518
        actions=(
            "Start the workers with spawn: VLLM_WORKER_MULTIPROC_METHOD=spawn",
            "In a script that uses vLLM's Python API, guard its entry point with if __name__ == '__main__': (spawn "
            "re-imports the main module)",
        ),
        source="torch==2.13.0 torch/cuda/__init__.py:518; advice: vllm-project/vllm#7151, #15681, #5637",
    ),
    Signature(
        id="custom_all_reduce_cuda_error",
        severity="critical",
        tier=1,
        title="vLLM's custom all-reduce failed a CUDA call ({cuda_text})",
        meaning=(
            "The CUDA check in vLLM's custom all-reduce kernel ({where}) failed. The custom all-reduce needs peer access "
            "between every pair of GPUs and IPC buffers; it fails on some topologies, drivers and multi-node groups."
        ),
        patterns=(r"(?:Cuda error|Failed:)[^\n]*?(?P<where>custom_all_reduce\.cuh:[0-9]+) '(?P<cuda_text>[^']+)'",),
        actions=(
            "Fall back to NCCL's all-reduce: --disable-custom-all-reduce{serve_disable_car_sep}{serve_disable_car}",
            "If it persists, check the driver and peer access: nvidia-smi topo -m",
        ),
        source="vllm csrc/custom_all_reduce.cuh (CUDACHECK); advice: vllm-project/vllm#5613, #53894",
    ),
    Signature(
        id="deepep_cuda_error",
        severity="critical",
        tier=1,
        title="DeepEP's buffer failed a CUDA call ({cuda_text})",
        meaning=(
            "DeepEP (the expert-parallel all-to-all, --all2all-backend deepep_*) could not set up its buffer ({where}). "
            "Across nodes it needs InfiniBand with IBGDA (NVSHMEM), on GB200 MNNVL the cuMem fabric API, and free GPU "
            "memory for the NVSHMEM buffer."
        ),
        patterns=(r"(?:CUDA error|Failed)[^\n]*?(?P<where>deep_ep\.cpp:[0-9]+) '(?P<cuda_text>[^']+)'",),
        actions=(
            "Try another all-to-all backend first, to confirm it is DeepEP's: {a2a_other}",
            "Across nodes, enable IBGDA for NVSHMEM (vLLM's tools/ep_kernels/configure_system_drivers.sh) and check the IB "
            "fabric; on MNNVL (GB200) DeepEP must use the fabric API",
            "Leave GPU memory for DeepEP's buffer: a lower --gpu-memory-utilization",
        ),
        source=(
            "DeepEP csrc/deep_ep.cpp (CUDA_CHECK); vllm==0.32.0 vllm/config/parallel.py (all2all_backend); advice: "
            "vllm-project/vllm#39925, NVIDIA-NeMo/RL#1045, sgl-project/sglang#29942"
        ),
    ),
    Signature(
        id="cuda_error_code",
        severity="critical",
        tier=1,
        title="{runtime} error: {cuda_text} ({cuda_name})",
        meaning="{cuda_meaning} The code's name and text are the {runtime} runtime's own{cuda_cite}.",
        patterns=(
            # torch==2.13.0 c10/cuda/CUDAFunctions.cpp: "Unexpected error from cudaGetDeviceCount(). … Error 804: …"
            r"Error (?P<code>[0-9]+): (?P<cuda_text>[a-z][^.\n]*)",
            r"cuda runtime error \((?P<code>[0-9]+)\) : (?P<cuda_text>[^\n]+?)(?: at |$)",
            r"code=(?P<code>[0-9]+)\((?P<cuda_name>cuda\w+)\)",
            r"(?:CUDA|Cuda) error:? (?P<cuda_text>[A-Za-z][A-Za-z ,/-]+[a-z])",
            # torch==2.13.0 torch/cuda/__init__.py (the UserWarning on a failed CUDA init)
            r"CUDA initialization: CUDA (?P<cuda_text>unknown error)",
            r"(?P<cuda_name>CUDA_ERROR_[A-Z_]+)",
            r"(?P<cuda_name>cudaError[A-Za-z]+)",
        ),
        actions=("{cuda_action}", "{cuda_action_2}", "{cuda_action_3}"),
        source=(
            "the code's name and text: nvidia-cuda-runtime==13.0.96 include/driver_types.h and cudaGetErrorString "
            "(catalogue/gpu_errors); torch==2.13.0 c10/cuda/CUDAFunctions.cpp; advice per code in "
            "dsv4ctl/diagnosis/answers_world.py, each with its threads"
        ),
    ),
    Signature(
        id="rocm_device_access",
        severity="critical",
        tier=1,
        title="The container cannot use the AMD GPUs ({rocm_text})",
        meaning=(
            "ROCm needs /dev/kfd and /dev/dri inside the container and the user in the groups that own them (video, "
            "render); without them HIP sees no device."
        ),
        patterns=(
            r"(?P<rocm_text>No HIP GPUs are available)",
            r"(?P<rocm_text>Unable to open /dev/kfd read-write: Permission denied)",
            r"(?P<rocm_text>is not member of \"(?:video|render)\" group)",
        ),
        actions=(
            "Pass the devices and groups: docker run --device=/dev/kfd --device=/dev/dri --group-add video --group-add render …",
            "The numeric group ids must match the host's owners of /dev/kfd and /dev/dri/renderD*: ls -ln /dev/kfd /dev/dri",
        ),
        source="torch ROCm build torch/cuda/__init__.py (_lazy_init), ROCm's rocminfo; advice: ROCm/vllm#893",
    ),
    Signature(
        id="rocm_no_code_object",
        severity="critical",
        tier=1,
        title="The ROCm build has no kernels for this GPU's architecture ({rocm_text})",
        meaning="The torch/vLLM ROCm build was compiled for other gfx targets than the GPU in this node.",
        patterns=(r"(?P<rocm_text>hipErrorNoBinaryForGpu)", r"HIP error: (?P<rocm_text>invalid device function)"),
        actions=(
            "Use a build whose PYTORCH_ROCM_ARCH includes this GPU (rocminfo | grep gfx names it)",
            "To find the missing ISA: AMD_LOG_LEVEL=5; consumer GPUs sometimes run as a supported ISA with HSA_OVERRIDE_GFX_VERSION",
        ),
        source="HIP runtime (hip_fatbin.cpp); advice: ROCm/legacy-rocm-build#2061, #4208",
    ),
    Signature(
        id="ascend_npu_error",
        severity="critical",
        tier=1,
        title="Ascend NPU error {npu_code}",
        meaning="{npu_meaning}",
        patterns=(
            r"(?P<npu_kind>NPU out of memory)\. Tried to allocate (?P<npu_code>[0-9.]+ [KMG]iB)",
            r"(?P<npu_code>EI0006)[: ].*?socket times out",
            r"(?P<npu_kind>Invalid device id)",
            r"error code is (?P<npu_code>5070[0-9]{2})",
            # an ACL code a CANN call reports (torch_npu's table names it: NPUErrorCodes.h)
            r"(?:error code is |retCode is |ErrCode=|retCode=)(?P<npu_code>[1-5][0-9]{5})\b",
            r"(?P<npu_code>E[EZHL][0-9]{4})[: \[)]",
            r"detail:(?P<npu_code>E[0-9A-Z][0-9]{4}): Inner Error",
            r"(?P<npu_kind>undefined symbol)[^\n]*(?:torch_npu|atb|libtbe|Ascend)",
        ),
        actions=("{npu_action}", "{npu_action_2}"),
        source=(
            "torch_npu (NPUCachingAllocator, npu_sys_ctrl.cpp), HCCL (EI0006), CANN runtime codes; advice: "
            "vllm-project/vllm-ascend#393, #449, #1653, #5710"
        ),
    ),
    Signature(
        id="deepgemm_arch_unsupported",
        severity="critical",
        tier=1,
        title="DeepGEMM has no kernel for this GPU ({what})",
        meaning=(
            "DeepGEMM's own check ({where}) refused: its kernels exist for SM90 (Hopper) and SM100 (Blackwell datacenter); "
            "an older DeepGEMM has none for SM120/SM121 (RTX PRO 6000, GB10), and A100 (SM80) has none at all."
        ),
        patterns=(r"Assertion error \((?P<where>[^)]*deepgemm[^)]*\.hpp:[0-9]+)\): (?P<what>Unsupported architecture|Unknown recipe)",),
        actions=(
            "Use a vLLM build whose DeepGEMM pin supports this GPU (SM120 support: deepseek-ai/DeepGEMM#324, vllm-project/vllm#43477)",
            "Where the model does not need it, keep FP8 linear layers off DeepGEMM: VLLM_USE_DEEP_GEMM=0",
        ),
        source="DeepGEMM csrc/apis/hyperconnection.hpp:56, csrc/utils/layout.hpp:76 (bundled in vLLM's .deps/deepgemm-src); advice: vllm-project/vllm#52035, #41849",
    ),
    Signature(
        id="cuda_graph_capture_refused",
        severity="critical",
        tier=1,
        title="An operation that CUDA-graph capture does not allow ran during capture",
        meaning=(
            "While vLLM captured CUDA graphs, a kernel or host call that is illegal inside a capture (a synchronisation, "
            "an allocation, a host-device copy) ran: the model's code path or a custom hook is not capture-safe."
        ),
        patterns=(r"operation not permitted when stream is capturing", r"cudaErrorStreamCaptureUnsupported",
                  r"operation failed due to a previous error during capture"),
        actions=(
            "Confirm it with CUDA graphs off: --enforce-eager{serve_eager_sep}{serve_eager}",
            "Then keep graphs where they work: --compilation-config '{{\"cudagraph_mode\": \"PIECEWISE\"}}'",
        ),
        source="CUDA runtime (cudaErrorStreamCaptureUnsupported) through torch's capture; advice: vllm-project/vllm#9094, #11587",
    ),
    Signature(
        id="visible_devices_conflict",
        severity="critical",
        tier=1,
        title="{a_var} and {b_var} name different GPUs",
        meaning=(
            "On ROCm vLLM reads both variables and refuses when they disagree ({a_var}='{a_val}', {b_var}='{b_val}'): "
            "a launcher or base image set one, the operator the other."
        ),
        patterns=(r"Inconsistent GPU visibility env vars: (?P<a_var>\w+)='(?P<a_val>[^']*)' vs (?P<b_var>\w+)='(?P<b_val>[^']*)'",),
        actions=("Set only one of them (HIP_VISIBLE_DEVICES on ROCm) and unset the other: unset {b_var}",
                 "Or give both the same list: {b_var}={a_val}"),
        source="vllm==0.32.0 vllm/platforms/rocm.py:147",
    ),
)
