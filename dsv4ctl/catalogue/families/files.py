"""Files and directories: a path that does not exist, a directory the process cannot write, a user with no name.

`dsv4ctl.diagnosis.answers` tells from the path what it is (an adapter, a chat template, a model directory, a
cache) and, for a cache, which environment variable moves it.
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

FAMILIES: tuple[Signature, ...] = (
    Signature(
        id="cache_dir_not_writable",
        severity="critical",
        tier=1,
        title="{cache_name} cannot be written: {path}",
        meaning=(
            "The process could not create or write {path}, which is {cache_name}. {uid_sentence}"
        ),
        patterns=(
            # Python's OSError text: "[Errno 13] Permission denied: '<path>'"; "[Errno 30] Read-only file system: '<path>'"
            r"\[Errno (?:13|30)\] (?:Permission denied|Read-only file system): '(?P<path>[^']+)'",
            # transformers==5.19.0 utils/hub.py (the cache folder warning, older releases' wording)
            r"There was a problem when trying to write in your cache folder \((?P<path>[^)]+)\)",
            r"(?:Permission denied|Read-only file system)[: ]+(?P<path>/[^\s'\",]+)",
        ),
        actions=(
            "Point {cache_var} at a directory this user can write (a mounted volume or /tmp): {cache_var}={cache_example}",
            "{uid_action}",
            "Check who the process runs as and what it can write there: id; ls -ld {parent!q}",
        ),
        source=(
            "Python OSError (errno 13/30); transformers==5.19.0 utils/hub.py; huggingface_hub==2.4.0 constants.py (HF_HOME), "
            "vllm==0.32.0 vllm/envs.py (VLLM_CACHE_ROOT), triton==3.9.0 triton/knobs.py (TRITON_CACHE_DIR), "
            "torch==2.13.0 torch/_inductor/runtime/cache_dir_utils.py (TORCHINDUCTOR_CACHE_DIR); advice: "
            "vllm-project/vllm#10185, #20127, #38552, triton-lang/triton#518"
        ),
    ),
    Signature(
        id="user_has_no_name",
        severity="critical",
        tier=1,
        title="The container's user id {uid} has no name, and torch's cache asks for one",
        meaning=(
            "getpass.getuser() found neither USER/LOGNAME nor a passwd entry for uid {uid}: the arbitrary user id an "
            "OpenShift or Kubernetes securityContext assigns. torch names its compile cache after the user and fails."
        ),
        patterns=(r"getpwuid\(\): uid not found: (?P<uid>[0-9]+)",),
        actions=(
            "Give the process a user name: set USER=vllm (any name) in the container's environment",
            "And a writable compile cache: TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor",
        ),
        source=(
            "Python pwd.getpwuid via getpass.getuser, torch==2.13.0 torch/_inductor/runtime/cache_dir_utils.py default_cache_dir; "
            "advice: llm-d/llm-d-benchmark#1573, vllm-project/vllm#46734"
        ),
    ),
    Signature(
        id="path_not_found",
        severity="critical",
        tier=1,
        title="{path_kind} not found: {path}",
        meaning="The process looked for {path} and it is not there. {path_sentence}",
        patterns=(
            # Python's OSError text: "[Errno 2] No such file or directory: '<path>'"
            r"\[Errno 2\] No such file or directory: '(?P<path>[^']+)'",
            # vllm==0.32.0 vllm/exceptions.py:83
            r"Loading (?P<kind_hint>lora) (?P<lora_name>\S+) failed: No adapter found for (?P<path>\S+)",
            r"(?:The )?(?:path|file|directory|folder|chat template|template)[^'\n]{0,40}?'(?P<path>/[^']+)' (?:does not exist|not found|is not a (?:file|directory))",
            r"(?P<path>/[\w./@+-]+) (?:does not exist|is not a directory|not found)",
            # vllm==0.33.0 vllm/renderers/chat_utils/chat_template.py:44: "The supplied chat template string (<path>) appears
            # path-like, but doesn't exist! Tried: <path> and <the package's chat_templates/<path>>"
            r"The supplied (?P<kind_hint_t>chat template) string \((?P<path>[^)]+)\) appears path-like, but doesn't exist!"
            r"(?: Tried: (?P<tried>[^\n]+))?",
        ),
        actions=(
            "{path_action}",
            "Check the path on the node and in the container that runs this process: ls -la {parent_q}",
            "{mount_action}",
        ),
        source="Python OSError (errno 2) and the messages that name a missing path",
    ),
)
