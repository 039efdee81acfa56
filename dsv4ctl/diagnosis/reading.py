"""An error's own words, read before its type: what ran out and the numbers that say so, the OS error behind it, the
error a wrapper carries inside it, the package whose code raised it, and the advice the message gives itself.

A type name says little (`OutOfMemoryError` is torch's for the GPU and Ray's for the host; `InternalError` is any
library's); the message and the frames say what happened. Each reader here is a pure function over the texts of one
error (its message, its chain, its evidence lines) or its frames, and returns None when the words do not say.
`answers` builds an answer from what they return; nothing here knows a finding.
"""

from __future__ import annotations

import errno as _errno
import os
import re
from dataclasses import dataclass
from typing import Iterable

from dsv4ctl import re_cache
from dsv4ctl.logs.grammars import ERRNO_RE
from dsv4ctl.units import read_number

_NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"


@dataclass(frozen=True)
class Shortage:
    """A resource the message says ran out, with the numbers it states (as printed) and where to look."""

    resource: str  # gpu_memory | host_memory | gpu_shared_memory | dev_shm | disk | file_descriptors | threads | ipc_object
    what: str  # plain words for the resource
    needed: str | None  # the amount asked for, as the message prints it
    available: str | None  # the amount there was (or the limit)
    unit: str  # the unit the message uses ("bytes", "GiB", …) or ""
    words: str  # the words of the message that say it
    look: str  # the command that shows the resource on the node
    arithmetic: str | None = None  # the comparison, derived from the two numbers

    @property
    def numbers_text(self) -> str:
        if self.needed and self.available:
            return f"{self.needed} needed, {self.available} available{(' ' + self.unit) if self.unit else ''}"
        return ""


def _ratio(needed: str, available: str) -> str | None:
    n, a = read_number(needed), read_number(available)
    if n is None or a is None or a <= 0 or n <= a:
        return None
    return f"{needed} / {available} = {n / a:.2f}×"


# What ran out, in the words of the package that says it. Most specific first: the GPU's shared memory before any
# memory, the host's memory before a bare "out of memory".
#   triton==3.5.0 triton/runtime/errors.py:22 OutOfResources.__str__: "out of resource: {name}, Required: {required},
#     Hardware limit: {limit}. Reducing block sizes or `num_stages` may help."
#   ray==2.60.0 ray/_private/memory_monitor / raylet: "… the node running low on memory. Memory on the node (IP: …)
#     where the task … was running was 237.56GB / 250.00GB (0.950225), which exceeds the memory usage threshold …"
#   torch c10/cuda/CUDACachingAllocator.cpp: "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total
#     capacity of 79.19 GiB of which 3.06 MiB is free."
#   CPython: MemoryError; errno ENOMEM "Cannot allocate memory", ENOSPC "No space left on device", EMFILE "Too many open
#     files", ENFILE "Too many open files in system", EDQUOT "Disk quota exceeded"; threading: "can't start new thread".
_SHORTAGES: tuple[tuple[str, str, re.Pattern[str], str], ...] = (
    ("gpu_shared_memory", "the GPU's shared memory per thread block (what one kernel launch may use)",
     re_cache.compile(r"out of resources?: shared memory, Required: (?P<needed>" + _NUM + r"), Hardware limit: (?P<available>"
                      + _NUM + r")"),
     "nvidia-smi --query-gpu=name,compute_cap --format=csv"),
    ("host_memory", "the node's host memory (RAM)",
     re_cache.compile(r"node running low on memory|Memory on the node \(IP: [^)]*\)[^\n]*? was (?P<needed>" + _NUM
                      + r") ?[GMK]?B / (?P<available>" + _NUM + r") ?[GMK]?B"),
     "free -g; dmesg -T | grep -i -e oom -e 'killed process'"),
    ("gpu_memory", "the GPU's memory",
     re_cache.compile(r"CUDA out of memory\. Tried to allocate (?P<needed>" + _NUM + r" [GMK]iB)\..*?of which (?P<available>"
                      + _NUM + r" [GMK]iB) is free|CUDA out of memory|CUDA error: out of memory|NPU out of memory"
                      r"|HIP out of memory"),
     "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv"),
    ("dev_shm", "the shared-memory file system /dev/shm",
     re_cache.compile(r"/dev/shm[^\n]{0,80}(?:No space left on device|Bus error)|(?:No space left on device|Bus error)"
                      r"[^\n]{0,80}/dev/shm|shared memory segment"),
     "df -h /dev/shm"),
    ("disk", "the disk",
     re_cache.compile(r"No space left on device|Disk quota exceeded|ENOSPC|EDQUOT"),
     "df -h"),
    ("file_descriptors", "the process's open-file limit",
     re_cache.compile(r"Too many open files|EMFILE|ENFILE"),
     "ulimit -n"),
    ("threads", "the processes and threads this user or container may start",
     re_cache.compile(r"can't start new thread|pthread_create failed|Resource temporarily unavailable[^\n]{0,40}"
                      r"(?:fork|thread|clone)|fork[^\n]{0,40}Resource temporarily unavailable"),
     "ulimit -u; cat /sys/fs/cgroup/pids.max"),
    ("host_memory", "the host's memory (RAM)",
     re_cache.compile(r"Cannot allocate memory|ENOMEM|std::bad_alloc|^MemoryError\b|\bMemoryError:|OOMKilled|oom-kill"),
     "free -g; dmesg -T | grep -i -e oom -e 'killed process'"),
)


def shortage(texts: Iterable[str]) -> Shortage | None:
    """What the error's words say ran out, or None. The first class whose words appear in any text wins."""
    joined = [t for t in texts if t]
    for resource, what, rx, look in _SHORTAGES:
        for text in joined:
            m = rx.search(text)
            if m is None:
                continue
            groups = m.groupdict()
            needed, available = groups.get("needed"), groups.get("available")
            unit = ""
            if resource == "gpu_shared_memory":
                unit = "bytes"
            elif resource == "host_memory" and needed:
                unit = "GB"
            arithmetic = _ratio(needed, available) if needed and available and resource != "host_memory" else None
            if resource == "host_memory" and needed and available:
                n, a = read_number(needed), read_number(available)
                if n is not None and a:
                    arithmetic = f"{needed} GB of {available} GB in use = {n / a:.1%}"
            return Shortage(resource, what, needed, available, unit, m.group(0)[:160], look, arithmetic)
    return None


# ------------------------------------------------------------------------------------------------------------ errno
# CPython's OSError subclasses and the errno each stands for (CPython 3.11 Objects/exceptions.c, _PyExc_InitState's
# errnomap), for a traceback that names the class but cut the "[Errno N]".
_OSERROR_ERRNO = {
    "FileNotFoundError": _errno.ENOENT, "PermissionError": _errno.EACCES, "FileExistsError": _errno.EEXIST,
    "IsADirectoryError": _errno.EISDIR, "NotADirectoryError": _errno.ENOTDIR, "ConnectionRefusedError": _errno.ECONNREFUSED,
    "ConnectionResetError": _errno.ECONNRESET, "ConnectionAbortedError": _errno.ECONNABORTED, "BrokenPipeError": _errno.EPIPE,
    "TimeoutError": _errno.ETIMEDOUT, "InterruptedError": _errno.EINTR, "ProcessLookupError": _errno.ESRCH,
    "ChildProcessError": _errno.ECHILD, "BlockingIOError": _errno.EAGAIN,
}


@dataclass(frozen=True)
class OsError:
    number: int
    name: str  # ENOENT
    text: str  # the C library's text (os.strerror)
    path: str | None  # the file the call was about, where the message names one


_PATH_RE = re_cache.compile(r"""(?::\s*|\bat\s+|\bopen\s+)['"]?(?P<path>/[^'"\s,)]*|[A-Za-z]:\\[^'"\s,)]*)['"]?""")


def os_error(exception: str | None, message: str) -> OsError | None:
    """The OS error a message reports: its errno from "[Errno N]" (or the OSError subclass's), named by the C library
    of this machine (errno.errorcode, os.strerror), and the path it names."""
    m = ERRNO_RE.search(message)
    number = int(m.group("errno")) if m else _OSERROR_ERRNO.get((exception or "").rsplit(".", 1)[-1])
    if number is None:
        return None
    number = abs(number)
    name = _errno.errorcode.get(number)
    if name is None:
        return None
    pm = _PATH_RE.search(message[m.end():] if m else message)
    return OsError(number, name, os.strerror(number), pm.group("path") if pm else None)


# ------------------------------------------------------------------------------------------------ inner errors
# A wrapper whose message is another exception's line: torch's InductorError ("InductorError: PermissionError: …"),
# BackendCompilerFailed ("backend='inductor' raised:\nPermissionError: …"), ray's RayTaskError(...), a re-raise in words.
_INNER_RE = re_cache.compile(
    r"(?:^|raised:\s*|: )(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault))"
    r"(?:\((?P<paren>[^)]*)\))?: (?P<message>\S.*)", re.DOTALL)


def inner_error(message: str) -> tuple[str, str] | None:
    """(type, message) of the exception a wrapper's message carries at its start, or None."""
    m = _INNER_RE.match(message) or _INNER_RE.search(message[:200])
    if m is None:
        return None
    return m.group("type"), m.group("message").strip()


# ------------------------------------------------------------------------------------------------ who raised it
_SITE_RE = re_cache.compile(r"(?:site|dist)-packages/(?P<pkg>[A-Za-z_][\w]*)(?:/|\.py)")
# The engines and packages whose source checkouts appear in pasted frames ("/sgl-workspace/sglang/python/sglang/…",
# "/workspace/vllm/vllm/…"): the last path part named like one, with more path after it.
_KNOWN = ("vllm_ascend", "vllm", "sglang", "flashinfer", "deep_gemm", "deep_ep", "flash_mla", "torch_npu", "torch",
          "triton", "ray", "transformers", "huggingface_hub", "safetensors", "xformers", "lmcache", "nixl", "tensorrt_llm")
_CHECKOUT_RE = re_cache.compile(r"/(?P<pkg>" + "|".join(_KNOWN) + r")/(?!.*/(?:" + "|".join(_KNOWN) + r")/)")
# The name `pip show` takes for an import name, where the two differ by more than pip's name normalisation ('_' and
# '-' are one to pip: `pip show vllm_ascend` finds vllm-ascend): flashinfer-python 0.7.4's wheel ships `flashinfer`,
# mooncake-transfer-engine 0.3.13.post1's `mooncake`.
DISTRIBUTION = {"flashinfer": "flashinfer-python", "mooncake": "mooncake-transfer-engine"}


def package_of(path: str) -> str | None:
    """The top-level package a source path belongs to (an installed one, or a known project's checkout), or None."""
    m = _SITE_RE.search(path)
    if m:
        return m.group("pkg")
    m = _CHECKOUT_RE.search(path)
    return m.group("pkg") if m else None


ENGINES = ("sglang", "vllm_ascend", "vllm")


def engine_of(paths: Iterable[str]) -> str | None:
    """The serving engine the frames belong to: SGLang's or vLLM's (vllm_ascend is vLLM's plugin), else None."""
    seen = {package_of(p) for p in paths}
    for engine in ENGINES:
        if engine in seen:
            return engine
    return None


# ------------------------------------------------------------------------------------------------ the message's advice
# A sentence of the message that tells the reader what to do ("Reducing block sizes or `num_stages` may help.",
# "Decrease GPU memory utilization or reduce GPU memory used by other processes.", "Please set …").
_ADVICE_RE = re_cache.compile(
    r"(?:^|(?<=[.!?:;]) |\n)(?P<s>(?:Please |You (?:can|may|should|need to|must) |Try |Consider |Make sure |Ensure |Set |Use "
    r"|Pass |Add |Install |Upgrade |Update |Increase |Decrease |Reduce |Lower |Raise |Remove |Enable |Disable |Specify "
    r"|Provide |Run |Restart |Delete |Clear )[^.!?\n]{6,240}[.!?]?"
    r"|[A-Z][^.!?\n]{6,160}(?: may help| might help| should help| to fix this| to resolve this)[^.!?\n]{0,80}[.!?]?)")


def advice_of(message: str) -> str | None:
    """The message's own advice sentence, or None."""
    m = _ADVICE_RE.search(message)
    if m is None:
        return None
    sentence = " ".join(m.group("s").split()).rstrip()
    return sentence if sentence.endswith((".", "!", "?")) else sentence + "."


# ------------------------------------------------------------------------------------------------ C++'s own words
# libstdc++'s messages, as its library prints them (Debian's libstdc++6 12.2.0 libstdc++.so.6, string table): a C++
# exception's what() that names what the C++ code did, not what the program meant.
_CPP_WHAT = (
    (re_cache.compile(r"basic_string::_S_construct null not valid|basic_string: construction from null is not valid"),
     "a C++ std::string was built from a null pointer (a char* that was nullptr): C++ code read a value that was not set "
     "(an environment variable, a setting, a field it expected) as a C string"),
    (re_cache.compile(r"\bvector::_M_range_check\b|\bvector::at\b"), "a C++ vector was read past its end"),
    (re_cache.compile(r"\bstd::bad_alloc\b"), "a C++ allocation failed: the host's memory"),
)


def cpp_meaning(text: str) -> str | None:
    """What a C++ library message says happened, in plain words, or None."""
    for rx, meaning in _CPP_WHAT:
        if rx.search(text):
            return meaning
    return None
