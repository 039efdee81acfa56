"""Distributed and container errors: NCCL's shared memory and network, Ray's placement and workers, a data-parallel
group's coordinator, a worker that stopped answering, the container runtime's GPU access and its limits."""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

FAMILIES: tuple[Signature, ...] = (
    Signature(
        id="nccl_shm_segment",
        severity="critical",
        tier=1,
        title="NCCL could not create its shared-memory segment ({size_text})",
        meaning=(
            "NCCL's intra-node transport allocates segments in /dev/shm; the container's /dev/shm is too small for them "
            "(Docker's default is 64 MiB)."
        ),
        patterns=(r"Error while creating shared memory segment (?P<segment>/dev/shm/\S+) \(size (?P<size>[0-9]+)\)",),
        actions=(
            "Give the container a larger /dev/shm: docker run --ipc=host, or --shm-size 16g",
            "On Kubernetes, mount an emptyDir with medium: Memory (and a sizeLimit) at /dev/shm; check with df -h /dev/shm",
        ),
        source="NCCL transport/shm (shmutils); advice: vllm-project/vllm#1710, #37982, vllm-project/production-stack#276",
    ),
    Signature(
        id="nccl_ib_register_memory",
        severity="critical",
        tier=1,
        title="NCCL could not register memory with the InfiniBand adapter",
        meaning="ibv_reg_dmabuf_mr ran out of memory: an oversized NCCL_BUFFSIZE, or a low locked-memory limit.",
        patterns=(r"ibv_reg_(?:dmabuf_)?mr failed with error (?P<reason>[A-Za-z ]+)",),
        actions=(
            "Unset NCCL_BUFFSIZE if it is set (the default fits)",
            "Check the locked-memory limit in the container: ulimit -l (unlimited, or docker run --ulimit memlock=-1)",
        ),
        source="NCCL misc/ibvwrap.cc; advice: vllm-project/vllm#19613",
    ),
    Signature(
        id="ray_driver_node_without_gpu",
        severity="critical",
        tier=1,
        title="Ray gave the driver's node no GPU: the vLLM process and Ray disagree about which node it is on",
        meaning=(
            "vLLM starts its first worker on the node where the driver (vllm serve) runs, found by IP address. That "
            "node has no GPU in the placement group: the driver runs off the GPU nodes, or its IP (VLLM_HOST_IP / "
            "get_ip()) is not the address Ray registered for the node (several NICs, IPv4 vs IPv6)."
        ),
        patterns=(r"Ray does not allocate any GPUs on the driver node",),
        actions=(
            "Run the vLLM server process on a GPU node of the Ray cluster (the head, when it has GPUs)",
            "Make the addresses agree on every node, one interface for both (ray start --node-ip-address ADDR, "
            "VLLM_HOST_IP=ADDR); compare with what Ray sees: ray status",
        ),
        source="vllm executor/ray_distributed_executor.py (older: engine/llm_engine.py); advice: vllm-project/vllm#8908, #13521",
    ),
    Signature(
        id="ray_worker_register_failed",
        severity="critical",
        tier=1,
        title="A Ray worker could not register with its raylet",
        meaning=(
            "A worker process lost its connection to the node's raylet before it registered: the raylet died or is "
            "unreachable (its session directory under /tmp/ray full or removed, a Ray version mismatch, memory)."
        ),
        patterns=(r"Failed to register worker (?:\S+ )?to Raylet", r"Unable to register worker with raylet"),
        actions=(
            "Start the server on a Ray node, in the same container as that node's `ray start`: a worker registers with the "
            "raylet through the session's socket under /tmp/ray, which another container or host does not see",
            "On one node, use vLLM's own multiprocessing instead of Ray: --distributed-executor-backend mp",
            "Look at the raylet's own log on that node: /tmp/ray/session_latest/logs/raylet.out; check df -h /tmp and ray status",
        ),
        source="Ray core_worker.cc (C++, glog); advice: vllm-project/vllm#5495, intel/ipex-llm#12965",
    ),
    Signature(
        id="nixl_handshake_failed",
        severity="critical",
        tier=1,
        title="The NIXL handshake with the remote instance failed{request_text_nixl}",
        meaning=(
            "Before it reads a request's KV cache from the remote (prefill) instance, the NIXL connector asks that "
            "instance's side channel for its metadata: a ZMQ socket at the remote's VLLM_NIXL_SIDE_CHANNEL_HOST:"
            "VLLM_NIXL_SIDE_CHANNEL_PORT (vllm/envs.py: localhost and 5600 unless set), with a 5-second wait for the "
            "reply. The reply did not come ({nixl_cause}): the remote instance was down, restarting, or not reachable at "
            "the address it advertised. With kv_load_failure_policy \"fail\" (the default) the request fails; "
            "\"recompute\" computes its KV here instead."
        ),
        patterns=(
            # vllm==0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:1377-1379 "NIXL transfer
            # failure: %s | Context: %s" with failure_type="handshake_failed" (:1472)
            r"NIXL transfer failure: (?P<nixl_failure>\w*handshake\w*)(?: \| Context: \{'failure_type': '\w+', "
            r"'request_id': '(?P<nixl_request>[^']+)')?",
            # the handshake's own frames (base_worker.py:1164 sock.recv_multipart() under zmq.RCVTIMEO 5000)
            r"frame: \S*nixl/\S+ in _nixl_handshake",
            # the side channel answered for another engine than the request's (vllm==0.33.0 base_worker.py
            # _nixl_handshake: "Remote NIXL agent engine ID mismatch. Expected {expected}, received {received}.")
            r"(?P<nixl_failure>Remote NIXL agent engine ID mismatch)",
        ),
        actions=(
            "Check the remote instance is up and its side channel reachable from this node: the address it advertises "
            "(VLLM_NIXL_SIDE_CHANNEL_HOST must be one this node reaches, not localhost across nodes) and port "
            "(VLLM_NIXL_SIDE_CHANNEL_PORT): nc -vz HOST PORT",
            "To compute such requests' KV locally instead of failing them: --kv-transfer-config with "
            "\"kv_load_failure_policy\": \"recompute\"",
        ),
        source=(
            "vllm==0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:1161-1164,1377,1472; "
            "vllm/envs.py:232-233,1721; vllm/config/kv_transfer.py:88 (kv_load_failure_policy: recompute | fail, "
            "default fail)"
        ),
    ),
    Signature(
        id="ray_resources_unavailable",
        severity="critical",
        tier=1,
        title="Ray cannot place what vLLM asked for ({request})",
        meaning="No node of the Ray cluster has the resources of a bundle vLLM requested; the placement group never forms.",
        patterns=(r"No available node types can fulfill resource request (?P<request>\{[^}]*\})",),
        actions=(
            "Check that every node joined with its GPUs (TP × PP must not exceed the GPUs Ray sees): ray status",
            "Pin Ray's node address to the interface vLLM uses: ray start --node-ip-address ADDR with VLLM_HOST_IP=ADDR",
        ),
        source="Ray autoscaler; vllm executor/ray_utils.py; advice: vllm-project/vllm#7815, eugr/spark-vllm-docker#227",
    ),
    Signature(
        id="dp_coordinator_failed",
        severity="critical",
        tier=1,
        title="The data-parallel coordinator did not start",
        meaning=(
            "The DP coordinator process failed to report its ZMQ addresses in time: slow start on a loaded host, or "
            "it could not bind (ports, --data-parallel-address)."
        ),
        patterns=(r"DP Coordinator process failed (?:to report ZMQ addresses )?during startup",),
        actions=(
            "Check --data-parallel-address and --data-parallel-rpc-port are this node's and free: ss -ltnp",
            "On a slow shared host, retry with fewer processes starting at once (one node at a time)",
        ),
        source="vllm==0.32.0 vllm/v1/engine/coordinator.py:67,74; advice: vllm-project/vllm#43611 (open)",
    ),
    Signature(
        id="worker_stopped_answering",
        severity="critical",
        tier=1,
        title="A worker stopped answering the engine (shared-memory broadcast timed out)",
        meaning=(
            "The engine waits for every worker through a shared-memory queue; one worker did not read or answer in time "
            "({timeout_text}), so it was hanging or very slow: a collective waiting on another rank, a kernel that never "
            "finished, or a long compilation."
        ),
        patterns=(r"frame: \S*shm_broadcast\.py:[0-9]+ in (?:timeout_ms|acquire_read|acquire_write|dequeue)",
                  r"No available shared memory broadcast block found in [0-9]+ seconds"),
        actions=(
            "Find the stuck worker while it hangs: py-spy dump --pid PID for each VllmWorker / Worker_TP process",
            "Get NCCL's view of the collective it waits in: NCCL_DEBUG=INFO",
            "{timeout_action}",
        ),
        source=(
            "vllm==0.32.0 vllm/distributed/device_communicators/shm_broadcast.py:705,817; vllm/envs.py:252 "
            "(VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS); advice: vllm-project/vllm#41530, #41125, #40969"
        ),
    ),
    Signature(
        id="container_no_gpu_runtime",
        severity="critical",
        tier=1,
        title="Docker could not give the container a GPU ({docker_text})",
        meaning="The Docker daemon has no NVIDIA runtime registered: nvidia-container-toolkit is missing or not configured.",
        patterns=(r"(?P<docker_text>could not select device driver \"[^\"]*\" with capabilities: \[\[gpu\]\])",),
        actions=(
            "Install nvidia-container-toolkit on the host, then register it and restart Docker: nvidia-ctk runtime "
            "configure --runtime=docker && systemctl restart docker",
        ),
        source="dockerd; advice: NVIDIA/nvidia-docker#1243, OpenBMB/XAgent#273",
    ),
    Signature(
        id="container_cuda_requirement",
        severity="critical",
        tier=1,
        title="The host driver is older than the image's CUDA {cuda_need}",
        meaning=(
            "nvidia-container-cli compares the image's NVIDIA_REQUIRE_CUDA ({cuda_need}) with what the host driver "
            "supports and refuses to start the container."
        ),
        patterns=(r"requirement error: unsatisfied condition: cuda(?P<cuda_need>[<>=]+[0-9.]+)",),
        actions=(
            "Upgrade the host driver to one that supports CUDA {cuda_need_v}, or run an image built for the CUDA the "
            "driver has (nvidia-smi shows it)",
            "Datacenter GPUs can run newer CUDA through forward compatibility: NVIDIA_DISABLE_REQUIRE=true skips the check",
        ),
        source="nvidia-container-toolkit prestart hook; advice: NVIDIA/nvidia-container-toolkit#152",
    ),
    Signature(
        id="no_device_platform",
        severity="critical",
        tier=1,
        title="vLLM found no GPU platform in this process",
        meaning=(
            "vLLM could not tell which device to run on: no GPU is visible (the container has none, or "
            "CUDA_VISIBLE_DEVICES is empty), or this vLLM build has no platform for the device."
        ),
        patterns=(r"Failed to infer device type",),  # vllm==0.32.0 vllm/config/device.py:56
        actions=(
            "Check the GPUs inside the container (docker run --gpus all; on Kubernetes a nvidia.com/gpu limit and the "
            "NVIDIA runtime class): nvidia-smi",
            "Check the vLLM build matches the device: python -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())'",
        ),
        source="vllm==0.32.0 vllm/config/device.py:56; advice: vllm-project/vllm#14075",
    ),
    Signature(
        id="process_limit",
        severity="critical",
        tier=1,
        title="The container ran out of processes or threads ({limit_text})",
        meaning=(
            "A new thread or process could not be created: the container's pids limit (Docker --pids-limit, Kubernetes "
            "podPidsLimit) or ulimit -u is lower than what vLLM's workers, compile threads and tokenizers start."
        ),
        patterns=(r"(?P<limit_text>can't start new thread)", r"(?P<limit_text>pthread_create failed)",
                  r"(?P<limit_text>fork: Resource temporarily unavailable)"),
        actions=(
            "See the limit inside the container (cgroup v2): cat /sys/fs/cgroup/pids.max",
            "Raise it where it is set (-1, or a few thousand; on Kubernetes the kubelet's podPidsLimit or the container "
            "runtime's pids_limit): docker run --pids-limit -1",
            "Fewer threads per process also helps: OMP_NUM_THREADS=8, TOKENIZERS_PARALLELISM=false",
        ),
        source="Python threading / glibc pthread_create (EAGAIN); the container's pids cgroup",
    ),
    Signature(
        id="engine_died_cause_elsewhere",
        severity="critical",
        tier=1,
        title="The engine died{while_text}; its own error is not in these lines",
        meaning=(
            "{who_text} The error that killed it is printed by the EngineCore or a Worker process before this point, or, "
            "when they printed nothing, the process was killed from outside (the kernel's OOM killer, a signal).{frames_text}"
        ),
        patterns=(
            r"EngineDeadError", r"EngineCore encountered an issue\. See stack trace",  # vllm==0.32.0 v1/engine/exceptions.py:16
            r"AsyncEngineDeadError", r"Background loop has errored already",
            r"WorkerProc hit an exception",  # vllm==0.32.0 v1/executor/multiproc_executor.py:1063
        ),
        actions=(
            "{grep_action}",
            "If the engine printed nothing before it died (a container's state then says OOMKilled), look for the OOM "
            "killer on the node: dmesg -T | grep -i -E 'killed process|out of memory'",
            "The server does not recover by itself: restart it (dsv4ctl serve --watchdog exits on a wedged engine so that a "
            "supervisor restarts it)",
        ),
        source="vllm==0.32.0 vllm/v1/engine/exceptions.py:16, vllm/v1/executor/multiproc_executor.py:1063",
    ),
)
