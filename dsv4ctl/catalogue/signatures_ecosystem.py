"""Catalogue entries for the messages of the packages around vLLM: torch and NCCL, the CUDA runtime,
Ray, huggingface_hub, transformers, and the operating system (open files, disk, shared memory, the
kernel's OOM killer as vLLM reports it).

Every pattern is copied from the installed package that prints the message; `source` names the
package, version and file (`path:line` for Python sources; for compiled libraries the binary and,
in parentheses, the C++ source file named next to the string in it). Binaries were read with
`strings -a`; the wording of a message may differ in other versions of a compiled library.

Kept whole: data, one entry per message (see signatures.py).
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

# torch 2.14.1 (CUDA 13 build) links these; their text is what a vLLM on that torch prints.
_LIBNCCL = "nvidia-nccl-cu13==2.30.7 nvidia/nccl/lib/libnccl.so.2 (ncclGetErrorString)"
_CUDART = "nvidia-cuda-runtime==13.0.96 nvidia/cu13/lib/libcudart.so.13 (cudaGetErrorString)"
# The errno texts ("[Errno 28] No space left on device") are glibc's strerror, as Python prints them.
_LIBC = "glibc==2.36 /lib/x86_64-linux-gnu/libc.so.6 (strerror)"
_PYNCCL = (
    "vllm==0.32.0 vllm/distributed/device_communicators/pynccl_wrapper.py:448; "
    "vllm==0.27.1 vllm/distributed/device_communicators/pynccl_wrapper.py:417"
)
_NCCL_DEBUG_ACTION = (
    "Rerun with NCCL_DEBUG=INFO (or NCCL_DEBUG=WARN) set in the environment: NCCL then prints a "
    "'NCCL WARN' line naming the call that failed"
)

# Where vLLM reports a worker's or engine core's exit code (the lines the exit-code signatures match).
_WORKER_EXIT_SOURCE = (
    "vllm==0.32.0 vllm/v1/executor/multiproc_executor.py:316; "
    "vllm==0.27.1 vllm/v1/executor/multiproc_executor.py:296; "
    "vllm==0.33.0 vllm/v1/executor/multiproc_executor.py:381; "
    "vllm==0.32.0 vllm/v1/engine/utils.py:1434"
)

SIGNATURES: tuple[Signature, ...] = (
    # ------------------------------------------------------------------ torch / NCCL
    Signature(
        id="eco_nccl_watchdog_timeout",
        echo=True,
        severity="critical",
        tier=1,
        fatal=True,
        title="NCCL collective timed out (ProcessGroupNCCL watchdog)",
        meaning=(
            "torch's ProcessGroupNCCL watchdog saw a collective operation run past its timeout and takes "
            "the process down. A collective only completes when every rank joins it, so this rank waited for "
            "another one that hung, crashed or was killed; the timeout is the echo, the cause is on the rank "
            "that stopped first."
        ),
        patterns=(
            r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq_num>[0-9]+), "
            r"OpType=(?P<op_type>[A-Z_]+).*Timeout\(ms\)=(?P<timeout_ms>[0-9]+)\)",
            r"Watchdog caught collective operation timeout",
        ),
        actions=(
            "Find the rank that stopped first: read every worker's (and every node's) log for the earliest "
            "error or exit before this line",
            "Check host memory and the kernel log on each node: dmesg -T | grep -i -E 'oom|xid'",
            _NCCL_DEBUG_ACTION,
        ),
        source="torch==2.14.1 torch/lib/libtorch_cuda.so (c10d/ProcessGroupNCCL.cpp)",
    ),
    Signature(
        id="eco_nccl_system_error",
        severity="critical",
        title="NCCL system error (a system call or external library call failed)",
        meaning=(
            "NCCL reported ncclSystemError: a system call it made (socket, shared memory, malloc) or an "
            "external library (InfiniBand verbs) failed. In a container the usual cause is a /dev/shm too "
            "small for NCCL's shared-memory transport (Docker gives 64 MiB by default); across nodes, a "
            "socket or network interface problem."
        ),
        patterns=(
            r"NCCL error: unhandled system error",
        ),
        actions=(
            _NCCL_DEBUG_ACTION,
            "In a container give NCCL shared memory (with docker run --shm-size 16g, or the host's IPC namespace): docker run --ipc=host …",
            "Across nodes, list the network interfaces (ip -br addr) and set NCCL_SOCKET_IFNAME to the one the "
            "nodes reach each other on",
        ),
        source=f"{_LIBNCCL}; {_PYNCCL}",
    ),
    Signature(
        id="eco_nccl_internal_error",
        severity="critical",
        title="NCCL internal error",
        meaning=(
            "NCCL reported ncclInternalError: one of its own consistency checks failed. It is often a "
            "mismatch between the NCCL library and the driver or the GPUs' topology (P2P/NVLink state), "
            "or several NCCL libraries loaded in one process."
        ),
        patterns=(
            r"NCCL error: internal error - please report this issue to the NCCL developers",
        ),
        actions=(
            _NCCL_DEBUG_ACTION,
            "Check which NCCL vLLM loads (the 'Found nccl from library' line) and that only one is installed: "
            "python3 -m pip list | grep -i nccl",
            "Check the GPU links: nvidia-smi topo -m",
        ),
        source=f"{_LIBNCCL}; {_PYNCCL}",
    ),
    Signature(
        id="eco_nccl_invalid_usage",
        severity="critical",
        title="NCCL invalid usage",
        meaning=(
            "NCCL reported ncclInvalidUsage: it was called in a way it does not allow, most often two ranks "
            "on the same GPU (CUDA_VISIBLE_DEVICES or the device index per rank is wrong) or ranks that "
            "disagree on the collective they run."
        ),
        patterns=(
            r"NCCL error: invalid usage",
        ),
        actions=(
            _NCCL_DEBUG_ACTION,
            "Check that every rank sees a different GPU: echo $CUDA_VISIBLE_DEVICES; nvidia-smi -L",
        ),
        source=f"{_LIBNCCL}; {_PYNCCL}",
    ),
    Signature(
        id="eco_nccl_remote_error",
        echo=True,
        severity="critical",
        fatal=True,
        title="NCCL remote error: a peer process exited or the network failed",
        meaning=(
            "NCCL reported ncclRemoteError: the process at the other end of a connection went away (it "
            "crashed or was killed) or the network between the nodes failed. The cause is on the peer: this "
            "rank only saw it disappear."
        ),
        patterns=(
            r"remote process exited or there was a network error",
        ),
        actions=(
            "Read the other ranks' and nodes' logs for the first error or exit before this line",
            "Check host memory and the kernel log on each node: dmesg -T | grep -i -E 'oom|xid|link'",
            _NCCL_DEBUG_ACTION,
        ),
        source=f"{_LIBNCCL}; {_PYNCCL}",
    ),
    Signature(
        id="eco_nccl_cuda_oom",
        severity="critical",
        title="NCCL could not allocate GPU memory for its buffers",
        meaning=(
            "A CUDA allocation NCCL made for its communication buffers failed with 'out of memory': the GPU "
            "was already full when the communicator was set up (another process on the GPU, or too little "
            "headroom left). NCCL then reports 'unhandled cuda error', which is not a kernel fault here."
        ),
        patterns=(r"NCCL WARN Cuda failure (?:[0-9]+ )?'out of memory'",),
        actions=(
            "Check what else holds GPU memory: dsv4ctl gpus",
            "Leave NCCL room: lower --gpu-memory-utilization (e.g. by 0.03)",
        ),
        source=(
            "nvidia-nccl-cu13==2.30.7 nvidia/nccl/lib/libnccl.so.2 (include/alloc.h); " + _CUDART
        ),
    ),
    Signature(
        id="eco_shm_insufficient",
        severity="critical",
        title="/dev/shm too small",
        meaning=(
            "The shared-memory filesystem /dev/shm has less free space than vLLM's message queues or NCCL's "
            "shared-memory transport need. Containers get 64 MiB by default, far too little for a "
            "multi-GPU vLLM."
        ),
        patterns=(
            r"Insufficient space in /dev/shm",
            r"NCCL WARN Error: failed to extend /dev/shm/nccl-",
            r"NCCL WARN Error while [a-z ]+ shared memory segment /dev/shm/nccl-",
        ),
        actions=(
            "Give the container the host's IPC namespace or a bigger /dev/shm (docker run --shm-size 16g; on Kubernetes mount an "
            "emptyDir with medium Memory at /dev/shm): docker run --ipc=host …",
            "See the space: df -h /dev/shm",
        ),
        source=(
            "vllm==0.32.0 vllm/distributed/device_communicators/shm_broadcast.py:254; "
            "vllm==0.27.1 vllm/distributed/device_communicators/shm_broadcast.py:245; "
            "nvidia-nccl-cu13==2.30.7 nvidia/nccl/lib/libnccl.so.2 (os/linux.cc)"
        ),
    ),
    Signature(
        id="eco_worker_sigbus",
        severity="critical",
        title="A vLLM process was killed by SIGBUS: shared memory exhausted",
        meaning=(
            "A vLLM process got signal 7 (SIGBUS, a bus error). vLLM's, NCCL's and Ray's processes exchange data "
            "through /dev/shm; when it is full, touching a page of a shared segment raises SIGBUS, so this almost "
            "always means /dev/shm is too small (containers get 64 MiB by default)."
        ),
        patterns=(
            r"died unexpectedly \(exit code: -7\)",
            r"Failed core proc\(s\): \{[^}]*: -7[,}]",
            # abseil's failure signal handler, as Ray's processes print it (ray==2.60.0 ray/core/src/ray/raylet/raylet:
            # "*** %s received at time=%ld%s ***")
            r"\*\*\* SIGBUS received at time=",
        ),
        actions=(
            "Give the container the host's IPC namespace or a bigger /dev/shm (docker run --shm-size 16g): docker run --ipc=host …",
            "See the space: df -h /dev/shm",
        ),
        source=_WORKER_EXIT_SOURCE,
    ),
    Signature(
        id="eco_host_oom_killed",
        severity="critical",
        tier=1,  # an inference from the exit code: the kernel's own log line (eco_kernel_oom_kill) outranks it
        title="A vLLM process was killed by SIGKILL (exit code -9): most likely the host's OOM killer",
        meaning=(
            "A vLLM process ended with signal 9 (SIGKILL) and printed nothing: nothing in Python can catch "
            "it. Unless someone ran kill -9, this is the Linux OOM killer (host RAM, not GPU memory, ran "
            "out — loading weights of a large checkpoint in several workers at once, or a container memory "
            "limit)."
        ),
        patterns=(
            r"died unexpectedly \(exit code: -9\)",
            r"Failed core proc\(s\): \{[^}]*: -9[,}]",
        ),
        actions=(
            "Confirm in the kernel log: dmesg -T | grep -i -E 'killed process|out of memory'",
            "Check the host (or container limit) memory: free -g",
            "Give the host or container more memory, or run fewer vLLM instances on it",
        ),
        source=_WORKER_EXIT_SOURCE,
    ),
    Signature(
        id="eco_kernel_oom_kill",
        severity="critical",
        fatal=True,
        title="The kernel's OOM killer killed a process (host or container memory ran out)",
        meaning=(
            "The kernel log says the OOM killer killed process {pid} ({comm}): {scope}. Host RAM, or the "
            "container's memory limit, ran out (not GPU memory); vLLM's processes peak there while workers load "
            "the checkpoint's weights."
        ),
        patterns=(
            r"(?P<scope>Out of memory|Memory cgroup out of memory): Killed process (?P<pid>[0-9]+) \((?P<comm>[^)]+)\)",
        ),
        actions=(
            "Give the host (or the container's memory limit) more memory, or run fewer vLLM instances on it",
            "See the memory while it loads: free -g",
        ),
        source="linux-source-6.1==6.1.176 mm/oom_kill.c:959",
    ),
    Signature(
        id="eco_container_oom_killed",
        severity="critical",
        fatal=True,
        title="The container was OOM-killed (its memory limit)",
        meaning=(
            "The container runtime reports the container terminated with reason OOMKilled: it hit its memory "
            "limit (host RAM, not GPU memory) and the kernel killed it (exit code 137 = 128 + SIGKILL). vLLM's "
            "processes peak there while workers load the checkpoint's weights."
        ),
        patterns=(r"\bOOMKilled\b",),
        actions=(
            "Raise the container's memory limit (resources.limits.memory), or load with fewer workers per pod",
            "The limit it had is under Limits: memory in the pod's kubectl describe output",
        ),
        source=(
            "containerd==1.6.20 usr/bin/containerd (the CRI's OOMKilled reason); "
            "kubernetes-client==1.20.2 usr/bin/kubectl (describe: Last State, Reason, Exit Code)"
        ),
    ),
    # ------------------------------------------------------------------ CUDA runtime texts torch raises
    Signature(
        id="eco_cuda_no_kernel_image",
        severity="critical",
        title="No kernel image for this GPU (wheel not built for its architecture)",
        meaning=(
            "A CUDA kernel has no binary for this GPU's compute capability: the torch, vLLM or extension "
            "wheel was built for other architectures (typical for a new GPU such as B200/SM100 or SM120 with "
            "a wheel built before it, or an old GPU with a wheel that dropped it)."
        ),
        patterns=(r"no kernel image is available for execution on the device",),
        actions=(
            "See the GPU's architecture: nvidia-smi --query-gpu=name,compute_cap --format=csv",
            "See the architectures torch was built for: python3 -c 'import torch; print(torch.cuda.get_arch_list())'",
            "Install torch and vLLM wheels built for this architecture (the CUDA version of the wheel matters), or build "
            "vLLM from source with TORCH_CUDA_ARCH_LIST set to this GPU's compute capability",
        ),
        source=_CUDART,
    ),
    Signature(
        id="eco_cuda_ecc_error",
        severity="critical",
        fatal=True,
        title="Uncorrectable ECC error on the GPU",
        meaning=(
            "The GPU reported an uncorrectable ECC memory error: a hardware fault (or a retired-page "
            "condition). The CUDA context is lost; the GPU needs a reset and, if it repeats, service."
        ),
        patterns=(r"uncorrectable ECC error encountered",),
        actions=(
            "See the GPU's ECC state: nvidia-smi -q -d ECC,PAGE_RETIREMENT",
            "Look for Xid errors in the kernel log: dmesg -T | grep -i xid",
            "Drain the node and reset the GPU as root with no process on it (nvidia-smi -r); replace it if it repeats",
        ),
        source=_CUDART,
    ),
    Signature(
        id="eco_cuda_device_busy",
        severity="critical",
        title="GPU busy or unavailable",
        meaning=(
            "CUDA could not create a context on the GPU: it is in Exclusive_Process compute mode and another "
            "process holds it, or it is Prohibited, or it is in a bad state after a fault."
        ),
        patterns=(r"CUDA-capable device\(s\) is/are busy or unavailable",),
        actions=(
            "See the compute mode and the processes on each GPU: nvidia-smi -q -d COMPUTE; nvidia-smi",
            "Stop the other process, or set the default mode (as root): nvidia-smi -c DEFAULT",
        ),
        source=_CUDART,
    ),
    Signature(
        id="eco_cuda_device_assert",
        severity="critical",
        fatal=True,
        title="CUDA device-side assert triggered",
        meaning=(
            "A kernel's own assertion failed on the GPU (an index out of range, for example a token id "
            "outside the vocabulary, or NaN/inf probabilities in sampling). The CUDA context is unusable "
            "afterwards and the Python frame that reports it is usually not the kernel that asserted."
        ),
        patterns=(r"device-side assert triggered",),
        actions=(
            "Rerun once with CUDA_LAUNCH_BLOCKING=1 to see the kernel that asserted",
            "If it started with one request, retry that request alone to reproduce it",
        ),
        source=_CUDART,
    ),
    Signature(
        id="eco_cublas_error",
        severity="critical",
        title="cuBLAS call failed",
        meaning=(
            "A cuBLAS call returned {cublas_status}. CUBLAS_STATUS_NOT_INITIALIZED or ALLOC_FAILED when the "
            "handle is created usually means the GPU had no memory left for cuBLAS's workspace; "
            "EXECUTION_FAILED is often an earlier asynchronous CUDA error surfacing in the GEMM; "
            "ARCH_MISMATCH / NOT_SUPPORTED mean this GPU or dtype is not supported by the call."
        ),
        patterns=(r"CUDA error: (?P<cublas_status>CUBLAS_STATUS_[A-Z_]+) when calling",),
        actions=(
            "Leave cuBLAS some memory: lower --gpu-memory-utilization (e.g. by 0.05)",
            "Rerun once with CUDA_LAUNCH_BLOCKING=1 to see which kernel fails first",
            "Check what else holds GPU memory: dsv4ctl gpus",
        ),
        source=(
            "torch==2.14.1 torch/lib/libtorch_cuda.so (ATen/cuda/CublasHandlePool.cpp, ATen/cuda/CUDABlas.cpp)"
        ),
    ),
    # ------------------------------------------------------------------ Ray
    Signature(
        id="eco_ray_oom_killed",
        severity="critical",
        fatal=True,
        title="Ray's memory monitor killed a worker (node low on host memory)",
        meaning=(
            "Ray's memory monitor saw the node's host memory above its kill threshold (95 % by default) and "
            "killed a worker to free it; with vLLM that worker is usually one of the engine's GPU workers "
            "loading weights, so the engine dies with it."
        ),
        patterns=(
            r"Workers \(tasks / actors\) killed due to memory pressure \(OOM\), [0-9]+ Workers crashed due to "
            r"other reasons at node \(ID: \w+, IP: (?P<node_ip>[0-9A-Fa-f.:]+)\)",
            r"worker\(s\) were killed due to the node running low on memory\. Memory on the node "
            r"\(IP: (?P<node_ip>[0-9A-Fa-f.:]+),",
            r"Workers \(tasks / actors\) killed due to memory pressure \(OOM\)",
            r"worker\(s\) were killed due to the node running low on memory",
            r"Task was killed due to the node running low on memory",
        ),
        actions=(
            "See what the memory monitor killed and why: ray logs raylet.out -ip {node_ip}",
            "See the node's memory: free -g (on that node)",
            "Give the node more host memory, or run fewer workers on it; the kill threshold is "
            "RAY_memory_usage_threshold, set in the environment of ray start",
        ),
        source=(
            "ray==2.60.0 ray/core/src/ray/raylet/raylet (src/ray/raylet/node_manager.cc); "
            "ray==2.48.0 ray/core/src/ray/raylet/raylet (src/ray/raylet/node_manager.cc)"
        ),
    ),
    Signature(
        id="eco_ray_worker_system_error",
        severity="critical",
        tier=1,
        fatal=True,
        title="A Ray worker died of an unexpected system error",
        meaning=(
            "Ray's raylet saw a worker process (in vLLM an engine worker, RayWorkerWrapper) exit while it ran a "
            "task, without an error of its own: killed by a signal or crashed. Ray itself names the likely "
            "causes: the kernel's OOM killer (SIGKILL, host memory), a forced `ray stop`, or a crash (SIGSEGV)."
        ),
        patterns=(
            r"A worker died or was killed while executing a task by an unexpected system error",
        ),
        actions=(
            "Check host memory on the worker's node: dmesg -T | grep -i -E 'killed process|out of memory'",
            "Read the dead worker's own log on its node (the Worker PID Ray names): ray logs worker-*.err",
            "If it crashed (SIGSEGV), rerun once with --enforce-eager to rule out CUDA-graph capture",
        ),
        source="ray==2.60.0 ray/core/src/ray/raylet/raylet (the raylet binary's string table)",
    ),
    Signature(
        id="eco_ray_actor_died",
        echo=True,
        severity="critical",
        tier=1,
        fatal=True,
        title="A Ray actor (vLLM worker) died",
        meaning=(
            "A Ray actor, in vLLM one of the engine's workers (RayWorkerWrapper), died before finishing a "
            "task. Ray reports the death; the reason is the worker's own last output (or Ray's memory "
            "monitor, or the kernel's OOM killer)."
        ),
        patterns=(
            r"The actor died unexpectedly before finishing this task",
            r"The actor is dead because its worker process has died",
        ),
        actions=(
            "Read that worker's last lines (Ray tags them with its pid and ip) before this line",
            "Check host memory on the worker's node: dmesg -T | grep -i -E 'killed process|out of memory'",
        ),
        source=(
            "ray==2.60.0 ray/exceptions.py:463; "
            "ray==2.60.0 ray/core/src/ray/gcs/gcs_server (src/ray/gcs/actor/gcs_actor_manager.cc)"
        ),
    ),
    Signature(
        id="eco_ray_placement_group",
        severity="critical",
        title="Ray cannot place the engine's workers (not enough GPUs in the cluster or on the driver's node)",
        meaning=(
            "vLLM asks Ray for a placement group with one GPU bundle per worker; the cluster never had enough "
            "free GPUs for it (or the node running the API server has none), so the start gave up."
        ),
        patterns=(
            r"Cannot provide a placement group (?:requiring|of)",
            r"is not included in a placement group",
            r"Current node has no [A-Z]+ available\. current_node_resource=",
        ),
        actions=(
            "See the cluster's GPUs and what holds them: ray status; ray list nodes",
            "Ask for no more GPUs than the cluster has: --tensor-parallel-size × --pipeline-parallel-size "
            "≤ the free GPUs",
            "Start vLLM on a node that has GPUs itself (the driver's node must hold a bundle)",
        ),
        source=(
            "vllm==0.32.0 vllm/v1/executor/ray_utils.py:490; vllm==0.32.0 vllm/v1/executor/ray_utils.py:502; "
            "vllm==0.32.0 vllm/v1/executor/ray_utils.py:311; vllm==0.32.0 vllm/v1/executor/ray_utils.py:635; "
            "vllm==0.27.1 vllm/v1/executor/ray_utils.py:652; "
            "vllm==0.33.0 vllm/v1/executor/ray_utils.py:246; vllm==0.27.1 vllm/v1/executor/ray_utils.py:490"
        ),
    ),
    # ------------------------------------------------------------------ huggingface_hub / transformers
    Signature(
        id="eco_hf_gated_repo",
        severity="critical",
        title="Gated Hugging Face repository: no access with this token",
        meaning=(
            "The model's repository is gated: downloading its files needs a token of an account that has "
            "accepted the model's terms, and the request had none or one without access."
        ),
        patterns=(
            r"Cannot access gated repo for url",
            r"You are trying to access a gated repo",
        ),
        actions=(
            "Accept the model's terms on its Hugging Face page with your account",
            "Log in on this machine with a token of that account, or set HF_TOKEN in the server's environment: hf auth login",
        ),
        source=(
            "huggingface_hub==2.4.0 huggingface_hub/utils/_http.py:890; "
            "transformers==5.19.0 transformers/utils/hub.py:611"
        ),
    ),
    Signature(
        id="eco_hf_repo_not_found",
        severity="critical",
        title="Hugging Face repository not found",
        meaning=(
            "The Hub answered that the repository does not exist for this request: the model id is misspelt, "
            "or the repository is private and the request had no token with access to it."
        ),
        patterns=(
            r"Repository Not Found for url",
        ),
        actions=(
            "Check the model id (organisation/name, case included): hf models info {model!q}",
            "For a private repository, log in with a token that can read it, or set HF_TOKEN in the server's "
            "environment: hf auth login",
        ),
        source=(
            "huggingface_hub==2.4.0 huggingface_hub/utils/_http.py:947"
        ),
    ),
    Signature(
        id="eco_hf_offline_not_cached",
        severity="critical",
        title="Model files not in the local cache, and the Hub cannot be reached (offline)",
        meaning=(
            "Downloads were disabled (HF_HUB_OFFLINE=1 or local_files_only) or the Hub could not be reached, "
            "and the files are not in the Hugging Face cache this process reads (HF_HOME / HF_HUB_CACHE)."
        ),
        patterns=(
            r"Cannot find an appropriate cached snapshot folder for the specified revision on the local "
            r"disk and outgoing traffic has been disabled",
        ),
        actions=(
            "Download the model once where the Hub is reachable, into the cache this server reads: "
            "hf download {model!q}",
            "Check which cache this process reads: echo $HF_HOME $HF_HUB_CACHE (or pass a local directory as the model)",
        ),
        source=(
            "huggingface_hub==2.4.0 huggingface_hub/_snapshot_download.py:389"
        ),
    ),
    Signature(
        id="eco_hf_invalid_token",
        severity="critical",
        title="Hugging Face token rejected (401 invalid credentials)",
        meaning=(
            "The Hub rejected the token sent with the request (HTTP 401 'Invalid credentials in "
            "Authorization header'): HF_TOKEN or the stored token is wrong, expired or revoked. "
            "HF_TOKEN takes precedence over a token stored by hf auth login."
        ),
        patterns=(r"Invalid credentials in Authorization header",),
        actions=(
            "Check which token is used and whether it is valid: hf auth whoami",
            "Replace it, and unset or fix HF_TOKEN, which takes precedence: hf auth login --force",
        ),
        source="huggingface_hub==2.4.0 huggingface_hub/utils/_http.py:935",
    ),
    Signature(
        id="eco_hf_token_forbidden",
        severity="critical",
        title="Hugging Face token lacks a permission (403 Forbidden)",
        meaning=(
            "The Hub accepted the token but refused it this file (HTTP 403): typically a fine-grained token "
            "without read access to public gated repositories, or one scoped to other repositories."
        ),
        patterns=(
            r"^403 Forbidden: ",
            r"Make sure your token has the correct permissions",
        ),
        actions=(
            "Check which account and token are used: hf auth whoami",
            "Give the fine-grained token read access to public gated repositories (and this repository) in the "
            "Hub's Access Tokens settings, or log in with a read token: hf auth login --force",
        ),
        source="huggingface_hub==2.4.0 huggingface_hub/utils/_http.py:963; huggingface_hub==2.4.0 huggingface_hub/utils/_http.py:965",
    ),
    Signature(
        id="eco_hf_rate_limited",
        severity="critical",
        title="Hugging Face Hub rate limit reached (429)",
        meaning=(
            "The Hub refused the request with HTTP 429: this IP or account made too many requests in the "
            "current window (many servers starting at once all look the model up). vLLM retried and gave up."
        ),
        patterns=(
            r"429 Too Many Requests: you have reached your '(?P<rate_limit>[^']+)' rate limit",
            r"429 Too Many Requests for url",
        ),
        actions=(
            "Log in, or set HF_TOKEN in the server's environment, so the requests count against your account's higher "
            "limit: hf auth login",
            "Download the model once and start the servers from the cache without Hub look-ups: hf download {model!q}, "
            "then run vLLM with HF_HUB_OFFLINE=1",
        ),
        source="huggingface_hub==2.4.0 huggingface_hub/utils/_http.py:974; huggingface_hub==2.4.0 huggingface_hub/utils/_http.py:986",
    ),
    Signature(
        id="eco_hf_revision_not_found",
        severity="critical",
        title="Hugging Face revision not found",
        meaning=(
            "The repository exists but has no branch, tag or commit named as the requested revision "
            "(--revision, --tokenizer-revision or --code-revision)."
        ),
        patterns=(r"Revision Not Found for url",),
        actions=(
            "Use a branch, tag or commit the repository has (its Files page lists them), or drop --revision to use main",
            "Check the repository: hf models info {model!q}",
        ),
        source="huggingface_hub==2.4.0 huggingface_hub/utils/_http.py:881",
    ),
    Signature(
        id="eco_transformers_unknown_model_type",
        severity="critical",
        title="transformers does not know the checkpoint's model type",
        meaning=(
            "The checkpoint's config.json says model_type `{model_type}`, which neither vLLM's own config "
            "registry nor the installed transformers knows: transformers is too old for this checkpoint, "
            "or the checkpoint needs its remote code."
        ),
        patterns=(
            r"has model type `(?P<model_type>[^`]+)` but Transformers does not recognize this architecture",
        ),
        actions=(
            "Upgrade transformers to a release that knows `{model_type}` (the message itself says the installed one may "
            "be out of date): python3 -m pip install -U transformers, then pip check for what vLLM requires",
            "If the model ships its own code and you trust it: --trust-remote-code",
        ),
        source="transformers==5.19.0 transformers/models/auto/configuration_auto.py:432",
    ),
    # ------------------------------------------------------------------ operating system
    Signature(
        id="eco_too_many_open_files",
        severity="critical",
        title="Too many open files (file-descriptor limit)",
        meaning=(
            "The process hit its open-file limit (ulimit -n). vLLM raises the soft limit itself at start, "
            "but a low hard limit (container or systemd default) caps it; many checkpoint shards, sockets "
            "and shared-memory segments use descriptors."
        ),
        patterns=(
            r"(?<!`)OSError: \[Errno 24\] Too many open files",
            r"^\[Errno 24\] Too many open files",
        ),
        actions=(
            "See the limits: ulimit -Sn; ulimit -Hn",
            "Raise them: ulimit -n 65536 before starting (docker run --ulimit nofile=65536:65536 …, "
            "systemd LimitNOFILE=65536)",
        ),
        source=(
            "vllm==0.32.0 vllm/utils/system_utils.py:258; vllm==0.27.1 vllm/utils/system_utils.py:302; "
            + _LIBC
        ),
    ),
    Signature(
        id="eco_no_space_left",
        severity="critical",
        title="No space left on device",
        meaning=(
            "A write failed because the filesystem is full: usually the Hugging Face cache while "
            "downloading the checkpoint, or the torch.compile / vLLM cache under ~/.cache."
        ),
        patterns=(
            r"\[Errno 28\] No space left on device",
            r"Not enough free disk space to download the file",
        ),
        actions=(
            "See which filesystem is full: df -h ~/.cache ${{HF_HOME:-~/.cache/huggingface}} /tmp",
            "Point the caches at a larger disk: export HF_HOME=/path/on/big/disk VLLM_CACHE_ROOT=/path/on/big/disk/vllm",
        ),
        source="huggingface_hub==2.4.0 huggingface_hub/file_download.py:774; " + _LIBC,
    ),
)
