"""Catalogue entries for a start that waits: what vLLM and Ray print while they wait, the warnings that say why
(a shortage in the warning's own numbers), the records an exception follows from, and the findings diagnose
derives from them (`start_stuck`, `request_error`, `client_request_refused`).

Each pattern is copied from the source that prints it; `source` cites the file:line in vLLM 0.27.1, 0.32.0
(installed) and 0.33.0, and the file of the other packages (Ray 2.60.0, transformers 5.19.0, CPython 3.11).
Waits and warnings are notes (`role="note"`): alone they fail nothing; `dsv4ctl.diagnosis.stuck` decides
when a wait is the start's last evidence (verdict `stuck`) and when a warning is the cause.

Kept whole: data, one entry per message (see signatures.py).
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

_RAY_UTILS = "vllm/v1/executor/ray_utils.py"

SIGNATURES: tuple[Signature, ...] = (
    # ------------------------------------------------------------------ waits
    Signature(
        id="wait_placement_group",
        severity="warning",
        role="note",
        title="vLLM waited for Ray to create its placement group",
        meaning=(
            "vLLM asked Ray for one GPU bundle per worker ({specs}) and was still waiting after {seconds} s; it "
            "logs this with a doubling interval (10, 30, 70, 150 … s) until the group forms or its time-out ends it."
        ),
        patterns=(
            r"Waiting for creating a placement group of specs for (?P<seconds>[0-9]+) seconds\. "
            r"specs=(?P<specs>\[[^\]]*\])",
        ),
        actions=("See which GPUs Ray has and who holds them: ray status; ray list nodes",),
        source=f"vllm==0.27.1 {_RAY_UTILS}:468; vllm==0.32.0 {_RAY_UTILS}:468; vllm==0.33.0 {_RAY_UTILS}:224",
    ),
    Signature(
        id="wait_dp_coordinator",
        severity="warning",
        role="note",
        title="An engine waited for the data-parallel coordinator",
        meaning=(
            "A data-parallel engine finished its own start and waits for the DP coordinator's READY message before "
            "it completes the handshake; it logs this every 10 s while it waits."
        ),
        patterns=(r"Waiting for READY message from DP Coordinator",),
        actions=("Check that every data-parallel rank was started and reaches this point: each node's own log",),
        source="vllm==0.27.1 vllm/v1/engine/core.py:1127; vllm==0.32.0 vllm/v1/engine/core.py:1247; "
        "vllm==0.33.0 vllm/v1/engine/core.py:1285",
    ),
    Signature(
        id="wait_engines",
        severity="warning",
        role="note",
        title="The API server waited for its engine processes",
        meaning=(
            "The API server waits for {local} local and {remote} remote engine process(es) to {what} (logged at "
            "DEBUG level every 10 s)."
        ),
        patterns=(
            r"Waiting for (?P<local>[0-9]+) local, (?P<remote>[0-9]+) remote core engine proc\(s\) to "
            r"(?P<what>connect|start)",
        ),
        actions=("Check that every engine was started and can reach this address: each node's own log",),
        source="vllm==0.27.1 vllm/v1/engine/utils.py:1239,1244; vllm==0.32.0 vllm/v1/engine/utils.py:1402,1407; "
        "vllm==0.33.0 vllm/v1/engine/utils.py:1444,1449",
    ),
    Signature(
        id="wait_frontend",
        severity="warning",
        role="note",
        title="An engine waited for the API server's init message",
        meaning="An engine registered with the API server and waits for its init message (logged at DEBUG level).",
        patterns=(r"Waiting for init message from front-end",),
        actions=("Check that the API server (the head node) is running and reachable from this node",),
        source="vllm==0.27.1 vllm/v1/engine/core.py:1252; vllm==0.32.0 vllm/v1/engine/core.py:1371; "
        "vllm==0.33.0 vllm/v1/engine/core.py:1419",
    ),
    Signature(
        id="wait_nccl_init",
        severity="info",
        role="note",
        title="NCCL communicator init (NCCL_DEBUG=INFO)",
        meaning="NCCL reported a communicator's init ({nccl_state}).",
        patterns=(r"NCCL INFO .*Init (?P<nccl_state>START|COMPLETE)",),
        actions=(),
        source="nvidia-nccl-cu13==2.30.7 nvidia/nccl/lib/libnccl.so.2 (init.cc, the 'Init START' / 'Init COMPLETE' "
        "lines under NCCL_DEBUG=INFO); vllm==0.32.0 vllm/distributed/device_communicators/pynccl.py:180 "
        "(ncclCommInitRank, no time-out)",
    ),
    Signature(
        id="wait_download",
        severity="info",
        role="note",
        title="The checkpoint was being downloaded from the Hugging Face Hub",
        meaning="huggingface_hub's download bar: {done} of {total} files fetched.",
        patterns=(
            r"Fetching (?P<total>[0-9]+) files:\s*(?P<percent>[0-9]+)%\|[^|]*\|\s*(?P<done>[0-9]+)/[0-9]+"
            r"(?: \[(?P<elapsed>[0-9:]+)<)?",
        ),
        actions=(),
        source="huggingface_hub==2.4.0 huggingface_hub/_snapshot_download.py:425 (tqdm_desc 'Fetching %d files'), "
        "tqdm's bar ('NN%|…| n/N [elapsed<remaining, …]')",
    ),
    # ------------------------------------------------------------------ warnings whose numbers can be the cause
    Signature(
        id="ray_cluster_gpus_short",
        severity="warning",
        role="note",
        title="Ray's cluster had fewer GPUs than the start needs",
        meaning=(
            "When vLLM created its placement group, the Ray cluster had fewer {device}s than the engine's world "
            "size (tensor × pipeline parallel). vLLM does not give up at once: it waits for GPUs to join."
        ),
        patterns=(
            r"The number of required (?P<device>[A-Z]+)s exceeds the total number of available [A-Z]+s in the "
            r"placement group\.(?! Required)",
        ),
        actions=(
            "See the cluster's GPUs (every node must have joined with its GPUs): ray status",
            "Ask for no more GPUs than the cluster has: --tensor-parallel-size × --pipeline-parallel-size ≤ its GPUs",
        ),
        source=f"vllm==0.27.1 {_RAY_UTILS}:631; vllm==0.32.0 {_RAY_UTILS}:614; vllm==0.33.0 {_RAY_UTILS}:365",
    ),
    Signature(
        id="ray_node_gpus_short",
        severity="warning",
        role="note",
        title="The world size is larger than this node's GPUs",
        meaning=(
            "vLLM needs {required} GPUs and this node has {available}: the rest must come from other nodes of the "
            "Ray cluster (normal for a multi-node start)."
        ),
        patterns=(r"Tensor parallel size \((?P<required>[0-9]+)\) exceeds available GPUs \((?P<available>[0-9]+)\)",),
        actions=("See the cluster's GPUs: ray status",),
        source=f"vllm==0.27.1 {_RAY_UTILS}:560; vllm==0.32.0 {_RAY_UTILS}:543; vllm==0.33.0 {_RAY_UTILS}:294",
    ),
    Signature(
        id="ray_object_store_on_tmp",
        severity="warning",
        role="note",
        title="Ray's object store fell back from /dev/shm to a slower directory",
        meaning=(
            "/dev/shm had only {shm_bytes} bytes free, less than Ray's object store, so Ray put it in {directory}."
        ),
        patterns=(
            r"The object store is using (?P<directory>\S+) instead of /dev/shm because /dev/shm has only "
            r"(?P<shm_bytes>[0-9]+) bytes available",
        ),
        actions=(
            "Give the container a bigger /dev/shm (docker run --shm-size 16g, or the host's IPC namespace; on Kubernetes "
            "an emptyDir with medium Memory at /dev/shm): docker run --ipc=host …",
            "See the space: df -h /dev/shm",
        ),
        source="ray==2.60.0 ray/_private/services.py:2248",
    ),
    Signature(
        id="ray_disk_over_capacity",
        severity="warning",
        role="note",
        title="Ray's file-system monitor: its directory is almost full",
        meaning="Ray found {path} over {percent}% full ({available} available of {capacity}).",
        patterns=(
            r"(?P<path>/\S*) is over (?P<percent>[0-9.]+)% full, available space: (?P<available>[0-9.]+(?: ?[KMGT]i?B)?)"
            r"(?: bytes)?; capacity: (?P<capacity>[0-9.]+(?: ?[KMGT]i?B)?)",
        ),
        actions=(
            "See the space (Ray's session directory is /tmp/ray unless ray start --temp-dir says otherwise): df -h /tmp",
            "Give Ray a larger directory: ray start --temp-dir=/path/on/a/big/disk, or mount a bigger /tmp",
        ),
        source="ray==2.60.0 ray/core/src/ray/raylet/raylet (file_system_monitor.cc: ' is over ', "
        "'% full, available space: ', '; capacity: ')",
    ),
    # ------------------------------------------------------------------ records an exception follows from
    Signature(
        id="trust_remote_code_prompt",
        severity="critical",
        title="transformers asked whether to run the checkpoint's code, and no one could answer",
        meaning=(
            "The checkpoint {model} ships its own Python code and transformers was not told to trust it, so it "
            "asked on stdin; a server has no one at stdin, so input() ends in EOFError (or the prompt times "
            "out) and loading fails. A launcher that passes trust_remote_code to vLLM but not to every "
            "transformers call it makes (a tokenizer, a processor) does this too."
        ),
        patterns=(
            r"The repository (?:for )?(?P<model>\S+?) contains custom code which must be executed to correctly ?load "
            r"the model",
            r"The repository (?:for )?(?P<model>\S+?) references custom code contained in",
        ),
        actions=(
            "If you trust the checkpoint's code: add --trust-remote-code (trust_remote_code=True for LLM(...))",
            "If it is set already, the call that asked was made without it: pass trust_remote_code=True to the "
            "AutoTokenizer/AutoProcessor call of your launcher",
        ),
        source="transformers==5.19.0 transformers/dynamic_module_utils.py:743,749 (resolve_trust_remote_code's "
        "message, the prompt's input() at :763, the ValueError at :775)",
    ),
    Signature(
        id="model_inspection_subprocess_failed",
        severity="critical",
        title="vLLM's model-inspection subprocess failed",
        meaning=(
            "vLLM inspects the model class {architecture} in a child Python process (python -m "
            "vllm.model_executor.models.registry); that process failed, so even a supported architecture is then "
            "reported as not supported or failed to be inspected. The child's own error is in its output "
            "(after 'Error raised in subprocess'), usually an import that fails in this environment."
        ),
        patterns=(r"Error in inspecting model architecture '(?P<architecture>[^']+)'",),
        actions=(
            "Run the inspection yourself to see the child's error: python -m vllm.model_executor.models.registry",
            "Fix what that prints (a compiled extension built for another torch, a missing package); vLLM runs on "
            "Linux only",
        ),
        source="vllm==0.27.1 vllm/model_executor/models/registry.py:1045; "
        "vllm==0.32.0 vllm/model_executor/models/registry.py:1120; "
        "vllm==0.33.0 vllm/model_executor/models/registry.py:1164",
    ),
    Signature(
        id="spawn_unguarded_main",
        severity="critical",
        title="A spawned process re-ran the script's main module (no `if __name__ == \"__main__\":` guard)",
        meaning=(
            "vLLM starts its workers with the spawn method, which imports the script's main module again in each "
            "child; a script that creates the LLM at module level starts a second engine there, and Python stops "
            "it while the child is still bootstrapping."
        ),
        patterns=(r"An attempt has been made to start a new process before the",),
        actions=(
            "Put the script's code under if __name__ == \"__main__\": (vLLM's troubleshooting guide, 'Python "
            "multiprocessing')",
        ),
        source="cpython==3.11.7 Lib/multiprocessing/spawn.py:140-142 (_check_not_importing_main); without it in the "
        "log, vLLM's config lines printed again after the engine's (vllm==0.5.0 vllm/config.py:623, "
        "vllm/engine/llm_engine.py:161): dsv4ctl/diagnosis/analyzer.py StartAnalyzer._watch_rerun",
    ),
)

# Findings diagnose derives (no line of their own matches them).
DERIVED: tuple[Signature, ...] = (
    Signature(
        id="start_stuck",
        severity="critical",
        role="cause",
        tier=1,
        title="The start is stuck: {waiting_for}",
        meaning=(
            "The last thing this start shows is a wait ({waiting_for}), and nothing failed or went on after it. "
            "{since_text} {silent_text} {timeout_text}"
        ),
        patterns=(),
        actions=(
            "See where the silent process is: {py_spy}",
            "Rerun with NCCL_DEBUG=INFO to see whether it waits in an NCCL collective or communicator init",
            "On Ray, see that every node joined with its GPUs: ray status",
            "On several nodes, set VLLM_HOST_IP on each node to the address Ray (and the other nodes) use for it",
        ),
        source="derived: the start's last evidence is a wait (dsv4ctl/diagnosis/stuck.py)",
    ),
    Signature(
        id="request_error",
        severity="warning",
        role="request",
        title="One request failed; the server kept serving",
        meaning=(
            "The traceback is raised while the server handled one request ({where}), and nothing after it stops "
            "the server: the request failed, the server is healthy."
        ),
        patterns=(),
        actions=("Look at the request that failed{request_text}: its parameters are what this error names",),
        source="derived: the frames of vLLM's request path (dsv4ctl/diagnosis/serving_view.py)",
    ),
    Signature(
        id="client_request_refused",
        severity="warning",
        role="request",
        title="The server refused a client's request ({status})",
        meaning=(
            "The server answered {status} to {request}: an error of the client's request (a wrong path, model "
            "name or parameter), not of the server, which was up to answer it."
        ),
        patterns=(),
        actions=("Check the client's request: the path and model name the server serves (GET /v1/models)",),
        source="uvicorn==0.54.0 uvicorn/config.py:94 (the access line); derived (dsv4ctl/diagnosis/serving_view.py)",
    ),
)
