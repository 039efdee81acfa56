"""Answers built from an error's own words (`reading`) when no family rule covers its class: what ran out and by how
much, the OS error and the object it was about, a check that failed inside a package other than vLLM, the component a
fault's source location names and the switch that turns it off, the message's own advice. Each answer states only
what the words and frames show; a cause they do not show is phrased as a check to make.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from typing import Any

from dsv4ctl import re_cache
from dsv4ctl.diagnosis import reading
from dsv4ctl.diagnosis.answers_common import serve_with
from dsv4ctl.diagnosis.model import Finding
from dsv4ctl.logs.records import ErrorRecord
from dsv4ctl.logs.timeline import StartupTimeline

# What to do about each resource once the message shows it ran out; {look} is the command that shows it.
_SHORTAGE_ACTIONS: dict[str, tuple[str, ...]] = {
    "gpu_shared_memory": (
        "The kernel's launch configuration (block sizes, num_stages) asks for more shared memory per thread block than "
        "this GPU has: use a configuration or a kernel made for this GPU, or run on a GPU with more shared memory per "
        "block",
    ),
    "host_memory": (
        "This is the node's RAM, not the GPU's memory: see what holds it on that node (free -g; ps aux --sort=-rss | head)",
        "Give the node more RAM, or load less on it at once (fewer workers or replicas per node)",
    ),
    "gpu_memory": (
        "See what holds the GPU's memory: nvidia-smi",
        "Leave more room: a lower --gpu-memory-utilization, or a shorter --max-model-len",
    ),
    "dev_shm": (
        "Give /dev/shm more room: docker run --shm-size=16g (or --ipc=host); on Kubernetes an emptyDir with medium: Memory "
        "mounted at /dev/shm",
    ),
    "disk": ("Free space on that file system, or point the cache or download directory to one with room",),
    "file_descriptors": (
        "Raise the open-file limit for the server: ulimit -n 65536 before it starts (docker run --ulimit nofile=65536:65536)",
    ),
    "threads": (
        "Raise the limit on processes and threads: ulimit -u, the container's pids limit (docker run --pids-limit, "
        "Kubernetes podPidsLimit)",
    ),
}

# A POSIX IPC object that a process reopens by name: CPython 3.11 multiprocessing/synchronize.py:115
# (SemLock.__setstate__ -> _multiprocessing.SemLock._rebuild, which sem_open()s the parent's named semaphore:
# Modules/_multiprocessing/semaphore.c) and multiprocessing/shared_memory.py:104 (SharedMemory: shm_open). A
# FileNotFoundError there means the object under /dev/shm was removed while the processes still used it.
_IPC_FRAMES = re_cache.compile(r"multiprocessing/(?:synchronize|shared_memory|resource_tracker)\.py")
_IPC_FUNCTIONS = frozenset({"_rebuild", "__setstate__", "SemLock", "SharedMemory"})

# Components a fault's source location names, with the switch vLLM has for each (vllm==0.33.0: vllm/config/parallel.py:241
# disable_custom_all_reduce, --disable-custom-all-reduce; vllm/envs.py:1600 VLLM_USE_DEEP_GEMM).
_COMPONENTS: tuple[tuple[re.Pattern[str], str, dict[str, Any] | None, str | None], ...] = (
    (re_cache.compile(r"custom_all_reduce|custom_ar\b|CustomAllreduce"), "vLLM's custom all-reduce kernel",
     {"disable_custom_all_reduce": True}, None),
    (re_cache.compile(r"deep_gemm|DeepGEMM|deepgemm"), "DeepGEMM", None, "VLLM_USE_DEEP_GEMM=0"),
)
_LOCATION_RE = re_cache.compile(r"(?P<file>[\w./-]+\.(?:cuh|cu|cpp|cc|h|hpp|py)):(?P<line>[0-9]+)")


def component(texts: list[str]) -> dict[str, Any] | None:
    """The component a fault's own text names (a kernel's source file in "Cuda error <file>:<line>"), with its switch."""
    for text in texts:
        for rx, name, change, env in _COMPONENTS:
            m = rx.search(text)
            if m is None:
                continue
            loc = _LOCATION_RE.search(text)
            return {"component": name, "component_change": change, "component_env": env,
                    "component_where": f"{loc.group('file').rsplit('/', 1)[-1]}:{loc.group('line')}" if loc else None}
    return None


def component_action(found: dict[str, Any], tl: StartupTimeline) -> str | None:
    where = f" ({found['component_where']}, as the error says)" if found.get("component_where") else ""
    if found.get("component_change"):
        change = found["component_change"]
        flag = " ".join("--" + k.replace("_", "-") for k in change)
        cmd = serve_with(tl, change)
        return f"The fault is in {found['component']}{where}: start without it, {flag}" + (f": {cmd}" if cmd else "")
    if found.get("component_env"):
        return f"The fault is in {found['component']}{where}: start without it, {found['component_env']} in the environment"
    return None


def frames_of(record: ErrorRecord | None) -> list[Any]:
    return list(record.frames) if record is not None else []


def _innermost_of(record: ErrorRecord | None, package: str | None = None) -> Any:
    for fr in reversed(frames_of(record)):
        if package is None or reading.package_of(fr.file) == package:
            return fr
    return None


# A C++ frame as torch/tvm print it ('File ".../x.cu", line 261, in void ns::Kernel(tvm::ffi::TensorView, …)'): the
# qualified name before its parameters, not the return type.
_CPP_FUNCTION_RE = re_cache.compile(r", in (?:[\w:<>*&,]+ )*?(?P<name>[A-Za-z_][\w:~]*)\(")


def where_of(fr: Any) -> str:
    """`function (file:line)` of a frame, the C++ function's qualified name where the frame is C++."""
    name = fr.function
    if name in ("void", "int", "auto", "static", "inline", "bool", "std") or name.endswith("::"):
        m = _CPP_FUNCTION_RE.search(fr.line.message)
        if m:
            name = m.group("name")
    return f"{name} ({fr.file.rsplit('/', 1)[-1]}:{fr.lineno})"


def answer(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, texts: list[str]) -> Finding | None:
    """An answer from what the error's words and frames say, or None when they say nothing this reads."""
    message = str(f.details.get("message") or (f.evidence[0].text if f.evidence else ""))
    exception = str(f.details.get("exception") or "")
    inner = reading.inner_error(message)
    if inner is not None and exception and inner[0] != exception:
        # A wrapper (InductorError, BackendCompilerFailed, a worker's re-raise) carries the error that happened.
        exception, message = inner
    for build in (_ipc_removed, _safetensors, _tool_call_json, _json_in_config, _shortage, _os_error, _api_mismatch,
                  _loader_key, _foreign_check):
        out = build(f, record, tl, texts, exception, message)
        if out is not None:
            return _with_advice(out, message)
    return None


def _finish(f: Finding, title: str, meaning: str, actions: list[str], details: dict[str, Any],
            next_look: str | None = None) -> Finding:
    if next_look:
        details = {**details, "_next": next_look}
    if f.id == "indexed_error" and f.details.get("cite"):
        meaning += f" The message is {f.details.get('package', 'vllm')}'s ({f.details['cite']})."
    return replace(f, title=title, meaning=meaning, actions=[a for a in actions if a],
                   details={**f.details, **details, "answered_from": f.id, "answered_by": "reading"})


def _with_advice(f: Finding, message: str) -> Finding:
    advice = reading.advice_of(message)
    if advice and not any(advice in a for a in f.actions):
        return replace(f, actions=[*f.actions, f"The message's own advice: {advice}"])
    return f


def _ipc_removed(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, texts: list[str], exception: str,
                 message: str) -> Finding | None:
    if not exception.endswith("FileNotFoundError"):
        return None
    frames = [fr for fr in frames_of(record) if _IPC_FRAMES.search(fr.file) or fr.function in _IPC_FUNCTIONS]
    said = " ".join(texts)
    if not frames and "SemLock" not in said and "sem_open" not in said:
        return None
    where = f"{frames[-1].function} ({frames[-1].file.rsplit('/', 2)[-2]}/{frames[-1].file.rsplit('/', 1)[-1]}:{frames[-1].lineno})" \
        if frames else "SemLock._rebuild"
    meaning = (f"A process reopened a POSIX semaphore or shared-memory object of its parent by name, in {where}, and it was "
               "no longer there: the object under /dev/shm was removed while vLLM's processes still used it. On systemd "
               "hosts, systemd-logind removes a user's POSIX IPC objects when that user's last login session ends "
               "(RemoveIPC=yes, the default for non-system users); a cleaner of /dev/shm does the same.")
    actions = [
        "Check the setting on the host: grep -i RemoveIPC /etc/systemd/logind.conf /etc/systemd/logind.conf.d/*.conf",
        "Run the server as a system user, or keep a login session of that user open (loginctl enable-linger USER), or set "
        "RemoveIPC=no in /etc/systemd/logind.conf and restart systemd-logind",
        "Check nothing else deletes files under /dev/shm while the server runs (a cron job, tmpfiles.d rules)",
    ]
    return _finish(f, "A shared semaphore or shared-memory object was removed under the server (/dev/shm)", meaning,
                   actions, {"reading": "ipc_object_removed"}, actions[0].split(": ", 1)[1])


def _shortage(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, texts: list[str], exception: str,
              message: str) -> Finding | None:
    found = reading.shortage([message, *texts])
    if found is None:
        return None
    if found.resource == "disk" and (any(_IPC_FRAMES.search(fr.file) for fr in frames_of(record)) or "/dev/shm" in message):
        # No room left where a semaphore or shared-memory object is created: that file system is /dev/shm (CPython's
        # multiprocessing creates them there: Modules/_multiprocessing/semaphore.c sem_open, shared_memory.py shm_open).
        found = reading.Shortage("dev_shm", "the shared-memory file system /dev/shm", None, None, "", found.words,
                                 "df -h /dev/shm")
    numbers = f": {found.numbers_text}" if found.numbers_text else ""
    title = f"{found.what[0].upper()}{found.what[1:]} ran out{numbers}"
    if found.resource == "gpu_shared_memory":
        title = f"A kernel asks for more than this GPU's shared memory limit per thread block{numbers}"
    arithmetic = f" ({found.arithmetic})" if found.arithmetic else ""
    kernel = _innermost_of(record)
    where = f" The innermost frame: {kernel.function} in {kernel.file.rsplit('/', 1)[-1]}:{kernel.lineno}." if kernel else ""
    meaning = (f"The message says what ran out: \"{found.words}\"{arithmetic}. The resource is {found.what}, whatever "
               f"the exception's type ({exception or 'error'}) suggests.{where}")
    actions = [f"See it on the node: {found.look}", *_SHORTAGE_ACTIONS.get(found.resource, ())]
    if found.resource == "disk":
        err = reading.os_error(exception, message)
        if err is not None and err.path:
            actions[0] = f"See the room on that file system: df -h {shlex.quote(reading_dir(err.path))}"
    details = {"reading": "shortage", "resource": found.resource, "needed": found.needed, "available": found.available,
               "unit": found.unit}
    if found.arithmetic:
        details["arithmetic"] = found.arithmetic
    return _finish(f, title, meaning, actions, details, actions[0].split(": ", 1)[1])


def reading_dir(path: str) -> str:
    """The directory of a path (the path itself when it ends in /)."""
    return path if path.endswith("/") else (path.rsplit("/", 1)[0] or "/")


# safetensors' own account of a file it cannot read (safetensors==0.8.0 safetensors/src/tensor.rs:16-50, the kinds and
# their doc comments; :69-90 their texts; bindings/python/src/lib.rs:687 "Error while deserializing header: {e}"). The
# file starts with an 8-byte little-endian header length, then that much JSON, then the tensors' bytes.
_SAFETENSORS_KINDS = (
    ("header too large", "the file's first 8 bytes, read as the header's length, say more than 100 MB (tensor.rs:285): "
     "the file is not a safetensors file at all. A Git LFS pointer left by a git clone without git-lfs (a small text file "
     "that starts \"version https://git-lfs…\") or an HTML error page saved in its place reads exactly so"),
    ("incomplete metadata, file not fully covered", "the tensors the header lists do not reach the file's end (tensor.rs:"
     "420): the file is shorter or longer than its header says, a truncated or interrupted download"),
    ("header too small", "the file is shorter than the 8-byte header length itself: an empty or truncated file"),
    ("invalid header length", "the header's declared length runs past the end of the file: a truncated file"),
    ("invalid JSON in header", "the header is not valid JSON: the file is damaged, or not a safetensors file"),
    ("invalid UTF-8 in header", "the header is not text: the file is damaged, or not a safetensors file"),
)
_SAFETENSORS_VARIANTS = {"HeaderTooLarge": "header too large", "MetadataIncompleteBuffer": "incomplete metadata, file not "
                         "fully covered", "HeaderTooSmall": "header too small", "InvalidHeaderLength": "invalid header length",
                         "InvalidHeaderDeserialization": "invalid JSON in header", "InvalidHeader": "invalid UTF-8 in header"}
_SAFETENSORS_RE = re_cache.compile(r"Error while deserializing header: (?P<kind>[^:\n]+)"
                                   r"|SafetensorError: (?!Error while)(?P<kind2>[^:\n]+)")


def _safetensors(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, texts: list[str], exception: str,
                 message: str) -> Finding | None:
    m = next((x for x in (_SAFETENSORS_RE.search(t) for t in [message, *texts]) if x), None)
    if m is None:
        return None
    kind = (m.group("kind") or m.group("kind2")).strip()
    # Older safetensors print the kind's variant name (its Debug form: "MetadataIncompleteBuffer"), newer its text.
    kind = _SAFETENSORS_VARIANTS.get(kind.split("(")[0], kind).lower()
    meaning_of = next((text for k, text in _SAFETENSORS_KINDS if kind.startswith(k.lower())), None)
    if meaning_of is None:
        return None
    model = tl.model if tl.model and tl.model.startswith("/") else None
    where = shlex.quote(model) if model else "THE_MODEL_DIRECTORY"
    title = f"A checkpoint file is not a whole safetensors file ({kind})"
    meaning = (f"safetensors could not read a shard of the checkpoint: {meaning_of}. This is the file on disk, not the "
               "model, the GPU or vLLM's settings.")
    actions = [
        f"Find the shard that is not one: ls -l {where}/*.safetensors, and compare the sizes with the checkpoint's own "
        "(model.safetensors.index.json, the Hub's file list); head -c 120 on a small one shows a Git LFS pointer",
        "Download that shard again whole: git lfs pull in a git clone, or hf download REPO FILE --local-dir DIR",
    ]
    if model is None:
        actions[0] = ("Find the shard that is not one: list the model directory's *.safetensors with their sizes and compare "
                      "them with the checkpoint's model.safetensors.index.json and the Hub's file list; the first bytes of a "
                      "small one (head -c 120) show a Git LFS pointer")
    return _finish(f, title, meaning, actions, {"reading": "safetensors", "safetensors_kind": kind},
                   f"ls -l {where}/*.safetensors" if model else None)


# vLLM's tool parsers parse the model's tool calls as JSON, and on an error log it and answer with the model's text as
# the message's content, no tool call (vllm==0.33.0 vllm/tool_parsers/hermes_tool_parser.py:116-120, "Error in
# extracting tool call from response." then ExtractedToolCallInformation(tools_called=False, content=model_output)).
_TOOL_PARSER_RE = re_cache.compile(r"tool_parsers/(?P<parser>\w+?)(?:_tool_parser)?\.py")


def _tool_call_json(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, texts: list[str], exception: str,
                    message: str) -> Finding | None:
    if not exception.endswith("JSONDecodeError") or record is None:
        return None
    # The parser from its frames, else from the file vLLM's log record names ("[hermes_tool_parser.py:111]").
    files = [fr.file for fr in record.frames] + ["tool_parsers/" + (ln.fileinfo or "").split(":")[0]
                                                 for ln in (record.line, record.headline) if ln is not None]
    parser = next((m.group("parser") for f in files if (m := _TOOL_PARSER_RE.search(f)) and m.group("parser") != "abstract"),
                  None)
    if parser is None:
        return None
    logged = record.headline is not None and "Error in extracting tool call" in record.headline.message
    title = f"The model's tool call is not valid JSON ({parser} tool parser)"
    meaning = (f"vLLM's {parser} tool parser read a tool call in the model's output and its JSON is invalid ({message}): "
               "malformed, or cut short.")
    if logged:
        meaning += (" The parser logs this and answers with the model's text as the message content, without a tool "
                    "call: the request is answered, not failed.")
    actions = [
        "Look at the model's raw output for that request: the text between its tool-call tags is the invalid JSON "
        "(a max_tokens too small cuts it short)",
        "Check --tool-call-parser and the chat template are the ones this model's card names: a parser of another "
        "format reads its output as malformed",
    ]
    return _finish(f, title, meaning, actions, {"reading": "tool_call_json", "parser": parser})


# CPython's JSON decoder's messages (Lib/json/decoder.py, scanner): what the text was not.
_JSON_MESSAGE_RE = re_cache.compile(
    r"(?P<what>Expecting value|Expecting property name enclosed in double quotes|Expecting '[,:]' delimiter|Extra data"
    r"|Unterminated string starting at|Invalid control character at|Invalid \\escape): line (?P<line>[0-9]+) column "
    r"(?P<col>[0-9]+) \(char (?P<char>[0-9]+)\)")
_CONFIG_VALIDATION_RE = re_cache.compile(r"validation errors? for (?P<cls>\w*Config)\b")


def _json_in_config(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, texts: list[str], exception: str,
                    message: str) -> Finding | None:
    """A JSON decoder's message as a config class's validation error: a JSON file read while building the
    configuration (the model directory's config.json and the other *.json files) is not valid JSON."""
    m = _JSON_MESSAGE_RE.search(message)
    cls = next((c.group("cls") for t in [message, *texts] if (c := _CONFIG_VALIDATION_RE.search(t))), None)
    if m is None or cls is None:
        return None
    empty = m.group("char") == "0"
    model = tl.model if tl.model and tl.model.startswith("/") else None
    title = f"A JSON file read for {cls} is not valid JSON ({m.group(0)})"
    meaning = (f"Building vLLM's {cls} read a file as JSON and Python's JSON decoder refused it: {m.group(0)}."
               + (" At line 1 column 1 (char 0) the text is empty or does not start as JSON at all: an empty file, a Git "
                  "LFS pointer, or an HTML page saved in its place." if empty else "") +
               " The files read there are the model directory's JSON files (config.json, generation_config.json, "
               "preprocessor_config.json, tokenizer_config.json) and a JSON value given on the command line.")
    where = shlex.quote(model) if model else "MODEL_DIR"
    actions = [f"Find the file that is not JSON: for f in {where}/*.json; do python3 -m json.tool \"$f\" >/dev/null || "
               "echo \"$f\"; done" if model else
               "Find the file that is not JSON: run python3 -m json.tool on each *.json of the model directory",
               "Download that file again whole (git lfs pull in a git clone, or hf download REPO FILE)"]
    return _finish(f, title, meaning, actions, {"reading": "json_in_config", "config_class": cls})


def _os_error(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, texts: list[str], exception: str,
              message: str) -> Finding | None:
    err = reading.os_error(exception, message)
    if err is None:
        return None
    fr = _innermost_of(record)
    where = f" in {fr.function} ({fr.file.rsplit('/', 1)[-1]}:{fr.lineno})" if fr else ""
    path = f" on {err.path}" if err.path else ""
    title = f"{err.text} ({err.name}){path}"
    meaning = (f"The operating system refused a call{where}{path}: errno {err.number}, {err.name}, \"{err.text}\". "
               f"This is the machine's state (files, permissions, limits), not a setting of vLLM's.")
    look = {"ENOENT": "ls -ld", "EACCES": "ls -ld", "EPERM": "ls -ld", "EROFS": "findmnt -T", "ENOTDIR": "ls -ld",
            "EISDIR": "ls -ld"}.get(err.name)
    actions: list[str] = []
    if look and err.path:
        target = err.path if look == "findmnt -T" else reading_dir(err.path) if err.name != "EISDIR" else err.path
        actions.append(f"See what is there and who may write it: {look} {shlex.quote(target)}; id")
    if err.name in ("ECONNREFUSED", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "ECONNRESET"):
        actions.append("Check the address and port it connected to are right and listening from this node (the "
                       "other side's process, a firewall, the interface it binds)")
    if err.name == "EADDRINUSE":
        actions.append("See which process holds the address: ss -ltnp")
    if not actions:
        return None
    return _finish(f, title, meaning, actions, {"reading": "os_error", "errno": err.name, "path": err.path},
                   actions[0].split(": ", 1)[1].split("; ")[0] if ": " in actions[0] else None)


# A check's condition compares the shape of an input with a weight's: a checkpoint and the code that loads or runs it
# disagree on a dimension.
_SHAPE_RE = re_cache.compile(r"\.shape\b|\.size\(|\bshape\[")


def _foreign_check(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, texts: list[str], exception: str,
                   message: str) -> Finding | None:
    """A check that failed in a package other than vLLM (SGLang, FlashInfer, a kernel library): name the package and
    what its check compared; the versions to look at come from the package the frames show."""
    frames = frames_of(record)
    files = [fr.file for fr in frames] + [m.group("file") for t in texts for m in [_LOCATION_RE.search(t)] if m]
    packages = [p for p in (reading.package_of(x) for x in files) if p]
    if not packages:
        return None
    engine = reading.engine_of(files)
    package = packages[-1]
    if package in ("vllm", "torch") or package.startswith("_"):
        return None
    fr = _innermost_of(record, package)
    where = where_of(fr) if fr else package
    condition = _condition(record, texts)
    if condition is None and not exception.endswith(("AssertionError", "InternalError", "CheckError")):
        return None  # a package's own error that is not a failed check: its message says more than its package
    dist = reading.DISTRIBUTION.get(package, package)
    cond_text = f": `{condition}`" if condition else ""
    title = f"A check in {package} failed{cond_text}" if condition else f"{exception or 'An error'} raised in {package}"
    meaning = f"{package}'s own code raised it, in {where}."
    if engine == "sglang":
        meaning += " This log is SGLang's (its frames are under sglang/), not vLLM's."
    actions: list[str] = []
    if condition and _SHAPE_RE.search(condition):
        meaning += (" The check compares the shape of the data with the shape of the weights: the checkpoint (or its "
                    f"quantization) and {package}'s code disagree on a dimension, as happens when the two come from "
                    "incompatible versions.")
        actions.append(f"Check the {package} version against the one the model's card or recipe names: pip show {dist}")
    else:
        actions.append(f"See which {package} is installed, and whether its release notes cover this case: pip show {dist}")
    if engine and engine != package:
        actions.append(f"Install the {package} version this {engine} release was built and tested with (its requirements "
                       f"pin it): pip show {reading.DISTRIBUTION.get(engine, engine)} {dist}")
    return _finish(f, title, meaning, actions, {"reading": "foreign_check", "raised_in": package, "engine": engine},
                   f"pip show {dist}")


def _condition(record: ErrorRecord | None, texts: list[str]) -> str | None:
    """The condition a failed check printed: the `assert …` statement, C's "Check failed: …", or a frame's source line
    that is a bare comparison (a multi-line assert's first line)."""
    for t in texts:
        m = re.search(r"Check failed: (?P<c>[^:(]+?)(?: \(| :|$)", t)
        if m:
            return m.group("c").strip()
        m = re.search(r"Assertion `(?P<c>[^`']+)['`] failed", t)
        if m:
            return m.group("c").strip()
    if record is not None and record.frames:
        code = record.frames[-1].code
        if code is not None:
            text = code.message.strip()
            if text.startswith("assert "):
                return text[7:].split(",")[0].strip()
            if re.search(r"[=!<>]=|[<>]", text) and not text.startswith(("if ", "return", "raise")):
                return text
    return None


# Two packages out of step: one calls an interface the other's installed version does not have (CPython's own
# wordings: Objects/typeobject.c / ceval.c "got an unexpected keyword argument", "missing N required positional
# argument(s)"; Objects/moduleobject.c "module 'X' has no attribute 'Y'"; Python/import.c "cannot import name 'X' from
# 'Y'"; "'X' object has no attribute 'Y'").
_API_RE = re_cache.compile(
    r"cannot import name '(?P<name>[\w.]+)' from '(?P<module>[\w.]+)'"
    r"|module '(?P<module2>[\w.]+)' has no attribute '(?P<name2>\w+)'")


def _api_mismatch(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, texts: list[str], exception: str,
                  message: str) -> Finding | None:
    m = _API_RE.search(message)
    if m is None:
        return None
    callee = (m.group("module") or m.group("module2") or "").split(".")[0]
    name = m.group("name") or m.group("name2") or ""
    caller_fr = _innermost_of(record)
    caller = reading.package_of(caller_fr.file) if caller_fr else None
    if not callee or not caller or callee == caller:
        return None
    what = f"'{name}'" if name else "an interface"
    title = f"{caller} and {callee} are out of step: {callee} has no {what} as {caller} calls it"
    meaning = (f"{caller}'s code uses {what} of {callee}, and the {callee} installed here does not have it that way "
               f"(\"{message[:160]}\"). The two come from releases that do not go together.")
    dist_a, dist_b = reading.DISTRIBUTION.get(caller, caller), reading.DISTRIBUTION.get(callee, callee)
    actions = [f"See the installed versions and what {caller} requires: pip show {dist_a} {dist_b}; pip check",
               f"Install the {callee} version this {caller} requires (its requirements name it; pip check lists a "
               "mismatch), or the release of the other one that matches"]
    return _finish(f, title, meaning, actions, {"reading": "api_mismatch", "caller": caller, "callee": callee}, "pip check")


# Weight loaders, by the function names vLLM's loaders and models use (vllm==0.33.0 model_executor/model_loader/
# default_loader.py load_weights, models/*: load_weights, weight_loader).
_LOADER_FUNCTIONS = frozenset({"load_weights", "weight_loader", "_load_weights", "load_model", "_get_weights_iterator"})


def _loader_key(f: Finding, record: ErrorRecord | None, tl: StartupTimeline, texts: list[str], exception: str,
                message: str) -> Finding | None:
    """A KeyError in a model's weight loader: the checkpoint names a tensor the model code does not have (or the
    reverse): checkpoint and model implementation are out of step."""
    if not exception.endswith("KeyError") or record is None:
        return None
    key = message.split(":", 1)[-1].strip() if ":" in message else message
    # A key named like a checkpoint's tensor (a dotted path ending in .weight, .bias, a scale) is a weight, frames or not.
    weight_named = re.fullmatch(r"['\"]?[\w.]+\.(?:weight|bias|\w*scale\w*|qweight|qzeros|scales|zeros|g_idx)['\"]?", key)
    if not (record.functions & _LOADER_FUNCTIONS) and not weight_named:
        return None
    fr = next((x for x in reversed(record.frames) if x.function in _LOADER_FUNCTIONS), None)
    where = f" in {where_of(fr)}" if fr else ""
    package = reading.package_of(fr.file) if fr else None
    title = f"The checkpoint has a weight the model code does not know: {key[:80]}"
    meaning = (f"While loading the weights{where}, the model's code looked up the checkpoint's tensor {key[:80]} and has "
               "no parameter by that name. The checkpoint and the model implementation are not of the same version: a "
               "checkpoint newer (or older) than this " + (package or "engine") + "'s code for it, another quantization "
               "format, or a model whose config.json names an architecture this code maps differently.")
    actions = [f"Check which {package or 'engine'} release the model's card names and compare: pip show "
               f"{reading.DISTRIBUTION.get(package or 'vllm', package or 'vllm')}",
               "Check the checkpoint's files are the release the card describes (config.json's architectures and "
               "quantization_config; the shard index model.safetensors.index.json lists every tensor name)"]
    if re.search(r"\bmtp\b|mtp_|\.mtp\.|nextn|draft", key, re.I):
        # A weight of a speculative (draft) head: the launch asked for a draft method whose weights the checkpoint does
        # not have under that name.
        meaning += (" The name is a speculative-decoding head's (MTP / draft): the method --speculative-config asked for "
                    "expects weights this checkpoint does not ship under that name.")
        actions.insert(0, "Check --speculative-config's method against the draft weights the checkpoint ships (its "
                          "config.json and model card name them: an MTP head, or a separate drafter)")
    return _finish(f, title, meaning, actions, {"reading": "loader_key", "key": key[:200]},
                   f"pip show {reading.DISTRIBUTION.get(package or 'vllm', package or 'vllm')}")
