"""What one line of an error says, in every grammar a log shows it: a Python frame or exception line, a
traceback header or chain line, a `raise` statement, pydantic's detail line, the errors that are not Python's
(`GENERIC`: CUDA, C/C++ asserts, NCCL, core dumps, OS errors, killed processes), and the wrappers that only
repeat an error. `records.ErrorAssembler` assembles records from them.

Every wording here is copied from the source that prints it (cited next to each pattern).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from dsv4ctl import re_cache
from dsv4ctl.catalogue.signature_index import trie_pattern
from dsv4ctl.logs.reader import LogLine

MAX_FRAMES = 64
MAX_CHAIN = 8
MAX_RAISE_LINES = 6  # continuation lines of a `raise X("…" "…")` statement kept for its message

# A frame line of a Python traceback (CPython's traceback module), and the short form rich-style
# tracebacks and pasted call chains use ("vllm/models/deepseek_v4/sparse_mla.py:262 in _build_c128a_metadata").
FRAME_RE = re_cache.compile(r'^File "([^"]+)", line ([0-9]+), in (\S+)')
SHORT_FRAME_RE = re_cache.compile(r"^(?:[│|]\s*)?((?:[\w.<>-]+/)*[\w.<>-]+\.py):([0-9]+) in (\w+)")
# The exception line that ends a traceback: `module.Type: message` or a bare `Type`. Outside a traceback
# only names with the suffixes exception classes use count (`…Error`, `…Exception`, `KeyboardInterrupt`,
# `SystemExit`, ray's `RayTaskError(RuntimeError)`), builtins without one (`Exception`, `StopIteration`) and
# classes of an exceptions module (`torch._dynamo.exc.Unsupported`, `triton.runtime.errors.OutOfResources`);
# inside one, any class name: a frame's code line never has the `Name: ` shape.
_EXC_SUFFIX = r"(?:Error|Exception|Interrupt|Exit|Failed|Warning)"
EXC_RE = re_cache.compile(
    r"^((?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*" + _EXC_SUFFIX + r"|Exception|BaseException|StopIteration|GeneratorExit"
    r"|OutOfResources)(?:\([\w.]+\))?"
    r"|(?:[A-Za-z_]\w*\.)*(?:exc|errors?|exceptions)\.[A-Z]\w*"
    # any class of a dotted module path with a message (huggingface_hub.utils._errors.OfflineModeIsEnabled: …): a Python
    # exception as the interpreter prints one, whatever its name ends in
    r"|(?:[a-z_][a-z0-9_]*\.){2,}[A-Z][A-Za-z0-9]+(?=: \S)"
    # C modules' own lower-case classes: socket.gaierror, socket.herror
    r"|(?:[A-Za-z_]\w*\.)+[a-z]\w*error)(?::\s?(.*))?$"
)
TB_EXC_RE = re_cache.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:\([\w.]+\))?)(?::\s(.*)|:)?$")
# CPython traceback.py: the header, and the two headers between the exceptions of a chain. vLLM also logs
# a traceback as the text of one record ("EngineCore hit an exception: Traceback (most recent call last):").
HEADER_RE = re_cache.compile(r"Traceback \(most recent call last\):?\s*$")
CHAIN_RE = re_cache.compile(
    r"^(?:The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:)"
)
# pydantic's ValidationError names the failing check on a line of its own below the exception line
# ("1 validation error for ModelConfig" / "  Value error, <the validator's message> [type=value_error, …]"):
# that line holds the cause.
# A field's error names the field on the line above it ("gpu_memory_utilization" / "  Input should be less than or
# equal to 1 [type=less_than_equal, input_value=90.0, input_type=float]"): pydantic-core==2.50.5's display
# format (its binary's string table: " [type=", ", input_value=", ", input_type=").
# An OS error's number as Python prints it: "[Errno 98] Address already in use".
_ERRNO = r"\[Errno (?P<errno>-?[0-9]+)\]"
ERRNO_RE = re_cache.compile(_ERRNO)
DETAIL_RE = re_cache.compile(r"^(?:Value error|Assertion failed), |^\S.*? \[type=[a-z_]+(?:, input_value=.*)?\]$")
PYDANTIC_LOC_RE = re_cache.compile(r"^[A-Za-z_][\w.\[\]]*$")
# What is not log content: a gap an excerpt marks ("...", "…", "[... trimmed ...]"), Python 3.13's elided
# lines ("...<2 lines>..."), the carets under a frame's code, a Markdown code fence around a paste.
GAP_RE = re_cache.compile(r"^(?:\.\.\.|…)|^\[\.\.\..*\]$|^[\^~]+$|^```|^\+[-+]")

# Messages that only repeat an error printed elsewhere (vllm 0.32.0 sources):
#   v1/executor/multiproc_executor.py:442  TimeoutError(f"RPC call to {method} timed out.")
#   v1/executor/multiproc_executor.py:445  RuntimeError(f"Worker failed with error '{result}', please check the stack trace above for the root cause")
#   v1/executor/multiproc_executor.py:316  "Worker proc %s died unexpectedly (exit code: %s), shutting down executor."
#   v1/engine/core.py:1510 / 1512 / 2663   "EngineCore failed to start." / "EngineCore encountered a fatal error."
#   v1/engine/utils.py:1428 / 1433         "… failed during engine core initialization. See root cause above. …"
#   v1/engine/exceptions.py:16             "EngineCore encountered an issue. See stack trace (above) for the root cause."
WRAPPER_RE = re_cache.compile(
    r"Worker failed with error '|RPC call to \S+ timed out|EngineCore failed to start|EngineCore encountered"
    r"|Engine core initialization failed|Frontend process failed during engine core initialization"
    r"|See root cause above|See stack trace \(above\)|WorkerProc initialization failed|WorkerProc failed to start"
    r"|WorkerProc hit an exception|EngineDeadError|output_handler failed|died unexpectedly|EngineCore hit an exception"
    r"|Exception in worker \S+ while processing method"
    r"|ExceptionGroup: "  # an exception group only gathers the errors printed in it
    r"|The Inner error is reported as above"  # torch_npu: the device's error was printed before it
)
QUOTED_RE = re_cache.compile(r"Worker failed with error '(.*)', please check the stack trace above")
# Words that say the engine died (vllm==0.33.0 v1/engine/core.py:1586 "EngineCore encountered a fatal error.",
# v1/engine/exceptions.py EngineDeadError, v1/engine/async_llm.py:943 "AsyncLLM output_handler failed.",
# v1/executor/multiproc_executor.py "Worker proc %s died unexpectedly").
# The V0 API server's last words when its engine is gone (vllm==0.6.3 vllm/entrypoints/launcher.py:72, 88, 99:
# "AsyncLLMEngine has failed, terminating server process", "AsyncLLMEngine is already dead, terminating server process",
# "MQLLMEngine is already dead, terminating server process").
DEATH_RE = re_cache.compile(r"EngineCore encountered a fatal error|EngineDeadError|output_handler failed|died unexpectedly"
                            r"|(?:is already dead|has failed), terminating server process")
# The engine's step, the model running in it (vllm==0.32.0 v1/engine/core.py run_busy_loop/step,
# v1/worker/gpu_worker.py execute_model/sample_tokens; torch's Module call): an error there ends the engine.
STEP_FUNCTIONS = frozenset({
    "run_busy_loop", "_process_engine_step", "step", "step_with_batch_queue", "execute_model", "sample_tokens",
    "execute_dummy_batch", "_call_impl", "forward",
    # the V0 engine's loop (vllm==0.6.3 vllm/engine/multiprocessing/engine.py: run_engine_loop, engine_step)
    "run_engine_loop", "engine_step",
})


def is_entry_frame(frame: "Frame") -> bool:
    """The outermost frame of a process's own stack: a script's top level (`vllm` in bin/, not a module being
    imported from site-packages) or `python -m`'s runpy entry. A traceback that starts there was not caught."""
    if frame.function == "_run_module_as_main":
        return True
    return frame.function == "<module>" and "-packages/" not in frame.file and "<frozen" not in frame.file


# `raise X(…)` as a frame's code line shows it: the type, and the string literals of its message.
_RAISE_RE = re_cache.compile(r"^raise ((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\b\s*(?:\((.*))?$")
CALL_RE = re_cache.compile(r"([A-Za-z_]\w*)\s*\(")
_STRING_RE = re_cache.compile(r"""(?:[rRbBuU]|[fF][rR]?|[rR][fF])?("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")


@dataclass(frozen=True)
class Frame:
    file: str
    lineno: int
    function: str
    line: LogLine
    code: LogLine | None = None  # the source line Python printed under the frame


@dataclass
class ExceptionInfo:
    """One exception of a chain: `type: message` as Python printed it, and its innermost frame.

    shown_by: how the log shows it when not by its own exception line: "raise" (the `raise` statement of
    the innermost frame), "headline" (the line logged before the traceback), "frame" (only the frames),
    "assert" (a bare AssertionError whose `assert` statement is the message)."""

    type: str
    message: str
    line: LogLine
    last_frame: Frame | None = None
    detail: LogLine | None = None  # pydantic's "Value error, …" line under a ValidationError
    shown_by: str | None = None
    support: LogLine | None = None  # a second line that states it (the `assert` statement of a bare AssertionError)

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


# ---------------------------------------------------------------------------------------------
# Errors that are not Python tracebacks. (kind, regex); named groups become the record's details.
GENERIC: tuple[tuple[str, re.Pattern[str]], ...] = (
    # CUDA driver core dump (CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1, CUDA_COREDUMP_SHOW_PROGRESS=1), as driver
    # 580.159.04 prints it (benchmarks/results/h200-2026-11-30/coredump-deepgemm-0.27.1-stderr.txt):
    #   "coredump: Detected an exception of type CUDBG_EXCEPTION_WARP_OUT_OF_RANGE_ADDRESS (5)"
    ("coredump", re_cache.compile(r"Detected an exception of type (?P<exception>CUDBG_EXCEPTION_\w+)")),
    # cuda-gdb on that core: "CUDA Exception: Warp Out-of-range Address"
    ("coredump", re_cache.compile(r"^CUDA Exception: (?P<exception>.+)")),
    # torch's CUDA check, as torch 2.11 printed it on the H200 (benchmarks/results/h200-2026-11-30/
    # torch-2.11-fault-texts.txt): "torch.AcceleratorError: CUDA error: an illegal memory access was encountered";
    # a condensed chain quotes the code too ("CUDA error 700: an illegal memory access was encountered").
    ("cuda", re_cache.compile(r"CUDA error(?: (?P<code>[0-9]+))?: (?P<cuda_error>[^.\n]+)")),
    # C++ extensions (FlashInfer, DeepGEMM, vLLM's CUDA_CHECK): "Cuda error <file>:<line> '<message>'"
    ("cuda", re_cache.compile(r"Cuda error:? (?P<where>\S+?:[0-9]+) '(?P<cuda_error>[^']+)'")),
    # c10's CHECK (torch==2.13.0 torch/include/c10/util/logging_is_not_google_glog.h:109): "Check failed: <condition>"
    ("cpp", re_cache.compile(r"Check failed: (?P<condition>.+)")),
    # C and CUDA assertions: glibc's assert (glibc 2.36 assert/assert.c: "%s%s%s:%u: %s%sAssertion `%s' failed."),
    # the CUDA device-side assert (torch-2.11-fault-texts.txt: "… Assertion `…` failed."), and kernels' own
    # host asserts in that form (FlashMLA: "Assertion `res == CUresult::CUDA_SUCCESS` failed (file:line):").
    ("cpp", re_cache.compile(r"Assertion `(?P<condition>[^`']+)['`] failed")),
    # GCC libstdc++'s verbose terminate handler (not a Python package: its text as the runtime prints it):
    # "terminate called after throwing an instance of 'c10::Error'"
    ("cpp", re_cache.compile(r"terminate called after throwing an instance of '(?P<cpp_type>[^']+)'")),
    # NCCL's debug output (nvidia-nccl-cu13==2.30.7 libnccl.so.2, format "[%d] %s:%d NCCL WARN %s" after the
    # host:pid:tid prefix): "node1:123:456 [0] NCCL WARN <message>"
    ("nccl", re_cache.compile(r"NCCL WARN (?P<nccl_warn>.+)")),
    # torch c10d ProcessGroupNCCL.cpp: "[PG ID 0 PG GUID 0 Rank 1] Watchdog caught collective operation timeout: …"
    ("nccl", re_cache.compile(r"Watchdog caught collective operation timeout: (?P<collective>.+)")),
    # OS errors as Python prints them: "OSError: [Errno 98] Address already in use", and asyncio's bind error
    # (CPython 3.11.7 asyncio/base_events.py:1525): "[Errno 98] error while attempting to bind on address …"
    ("os", re_cache.compile(_ERRNO + r" (?P<os_error>.+)")),
    # argparse's error exit (CPython 3.11.7 argparse.py:2630 "%(prog)s: error: %(message)s"): "vllm serve: error: …"
    ("usage", re_cache.compile(r"^(?P<prog>[\w.-]+(?: [\w.-]+)?): error: (?P<usage_error>.+)")),
    # An HTTP error body as a client prints it (vLLM's ErrorResponse: vllm==0.33.0
    # vllm/entrypoints/serve/engine/protocol.py:79-87), pretty-printed by jq ('"message": "…",') or compact
    # ('{"error":{"message":"…","type":…}}').
    ("http_error", re_cache.compile(r'^"message": "(?P<http_error>.+?)",?$')),
    ("http_error", re_cache.compile(r'^\{"error":\s*\{"message":\s*"(?P<http_error>(?:[^"\\]|\\.)+)"')),
    # Processes killed: vLLM's monitor reports the exit code (-9 = SIGKILL, the kernel's OOM killer);
    # the shell prints "Killed" for a foreground process killed by SIGKILL.
    ("killed", re_cache.compile(r"died unexpectedly \(exit code: (?P<exit_code>-9)\)")),
    ("killed", re_cache.compile(r"^(?:\S+: line [0-9]+: +[0-9]+ )?Killed(?:\s+.*)?$")),
    # CPython's fatal-error handler and the shell (not Python packages: their texts as they print them):
    # "Fatal Python error: Segmentation fault", "Segmentation fault (core dumped)"
    ("crash", re_cache.compile(r"^Fatal Python error: (?P<fatal>.+)")),
    ("crash", re_cache.compile(r"^(?:\S+: line [0-9]+: +[0-9]+ )?(?P<fatal>Segmentation fault|Aborted|Bus error)(?: +\(core dumped\))?")),
    # libstdc++'s verbose terminate handler prints the exception's what() on the next line, "  what():  <message>"
    # (`records.ErrorAssembler` joins it to the terminate line above it); first, as its message may be any error's.
    ("cpp", re_cache.compile(r"^what\(\):\s+(?P<what>\S.*)")),
    # Ascend NPUs. torch_npu's checks of an ACL/HCCL call (torch_npu==2.14.0 torch_npu/include/torch_npu/csrc/core/npu/
    # NPUException.h:128,166,192 " NPU function error: <call>, error code is <code>", :222,239 " OPS function error: …",
    # distributed/HCCLUtils.hpp:27,37 " HCCL function error: …"), printed after its location or alone (compact output).
    ("npu", re_cache.compile(r"(?P<npu_check>NPU|OPS|HCCL) function error: (?P<npu_call>.+?), error code is (?P<acl_code>-?[0-9]+)")),
    # CANN's error manager: a code and its text, on a line of its own or inside a check's message (as logged,
    # ../shared/field-guide/guide.jsonl ascend_hccl_ei0006_socket_timeout, ascend_e69999_quant_matmul_310p:
    # "EI0006: [PID: 1292363] … Getting socket times out. …", "Communication_Error_Get_Socket(EI0006): …",
    # "… failed, detail:E69999: Inner Error!"; the checks append it: NPUException.h c10_npu_get_error_message()).
    ("npu", re_cache.compile(r"(?<![A-Za-z0-9])(?P<cann_code>E[0-9A-Z][0-9]{4})\)?:\s*(?P<cann_error>\S.*)")),
    # The CANN runtime's own report of a failed call with its ACL code (torch_npu==2.14.0
    # torch_npu/include/acl/error_codes/rt_error_codes.h: 1xxxxx parameter, 2xxxxx resource, 5xxxxx internal errors),
    # as logged (guide.jsonl ascend_invalid_device_id_visible_devices, ascend_acl_inner_error_async):
    # "rtSetDevice:ErrCode=107001, desc=[device id error], …", "rtKernelLaunchWithHandleV2 failed: 507035",
    # and "call aclnnQuantMatmulWeightNz failed, detail: …".
    ("npu", re_cache.compile(r"\b(?P<rt_call>(?:rt|aclrt|acl|aclnn|Hccl|hccl)[A-Z]\w*)\b[^\n]{0,160}?"
                             r"(?:ErrCode=|error code(?: is)? |failed: |ret(?:Code)?(?:=| is )|, )(?P<acl_code>[125]0[0-9]{4})\b")),
    ("npu", re_cache.compile(r"\bcall (?P<rt_call>aclnn\w+|acl\w+) failed\b")),
    # torch_npu's own error code after its messages (NPUException.h:79 formatErrorCode: "ERR<module><code> <MODULE>
    # <text>", libtorch_npu.so: "call acl api failed", "call hccl api failed"), e.g. "ERR00100 PTA call acl api failed".
    ("npu", re_cache.compile(r"\b(?P<pta_code>ERR[0-9]{5}) (?P<pta_module>PTA|OPS|DIST|GRAPH|PROF) (?P<pta_error>\S.*)")),
    # CANN's error messages carry their source in tags ("… reason=the model stream execute failed[FUNC:FuncErrorReason]
    # [FILE:error_message_manage.cc][LINE:65]", as vllm-ascend 0.23.0.post1 docs/source/faqs.md:160 shows one).
    ("npu", re_cache.compile(r"^(?P<cann_message>\S.*?)\[FUNC:(?P<cann_func>\w+)\]\[FILE:(?P<cann_file>[\w.]+)\]")),
    # torch_npu's last words when a task failed on the device (torch_npu==2.14.0 libtorch_npu.so string table).
    ("npu", re_cache.compile(r"^The Inner error is reported as above\.")),
    # ROCm: torch's HIP check ("HIP error: " + hipGetErrorString: torch==2.13.0 torch/include/ATen/miopen/Exceptions.h:37;
    # c10's CUDA check becomes it in the ROCm build, torch/utils/hipify/cuda_to_hip_mappings.py) and the HIP runtime's
    # own "hipError…: …" (as logged, guide.jsonl rocm_hip_invalid_device_function_no_binary:
    # "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!").
    ("hip", re_cache.compile(r"HIP error(?: (?P<code>[0-9]+))?: (?P<hip_error>[^.\n]+)")),
    ("hip", re_cache.compile(r"\b(?P<hip_code>hipError[A-Z]\w+)\b:? (?P<hip_error>\S.*)")),
    # The kernel's report of a process that died of a signal (linux-source-6.1==6.1.176 arch/x86/mm/fault.c:771
    # "%s[%d]: segfault at %lx ip %px sp %px error %lx", arch/x86/kernel/traps.c:151 "%s[%d] %s%s ip:%lx sp:%lx
    # error:%lx", e.g. "traps: python3[2314] general protection fault ip:… sp:… error:0 in libtorch_cuda.so").
    ("crash", re_cache.compile(r"(?P<comm>\S+)\[(?P<pid>[0-9]+)\]: segfault at (?P<address>[0-9a-f]+) ip [0-9a-f]+ sp [0-9a-f]+ error")),
    ("crash", re_cache.compile(r"(?P<comm>\S+)\[(?P<pid>[0-9]+)\] (?:trap )?(?P<trap>[a-z][a-z ]+?) ip:[0-9a-f]+ sp:[0-9a-f]+ error:")),
    # Its register dump (arch/x86/kernel/dumpstack.c:142 "RIP: %04x:%pS", :150 "RSP: %04x:%016lx EFLAGS: %08lx",
    # arch/x86/kernel/process_64.c:81 "RAX: %016lx RBX: %016lx RCX: %016lx"; arm64 arch/arm64/kernel/process.c:219
    # "pc : %pS"): a crash whose report line the excerpt lost.
    ("crash", re_cache.compile(r"^(?P<register>RIP): [0-9a-f]{4}:(?P<at>\S+)|^(?P<registers>RAX): [0-9a-f]{16} RBX: [0-9a-f]{16}"
                               r"|^(?P<pc>pc) : (?P<pc_at>\S+)$")),
    # A program's own "Error: <message>" line (FlashMLA's TMA set-up: "Error: Failed to initialize the TMA descriptor").
    ("text", re_cache.compile(r"^(?:Error|FATAL|Fatal error): (?P<error>\S.*)")),
)

# cuda-gdb / the core dump's stack: a mangled C++ kernel name (Itanium ABI).
_MANGLED_RE = re_cache.compile(r"\b(_Z[A-Za-z0-9_]+)")
_COREDUMP_FRAME_RE = re_cache.compile(r"(?:coredump:\s+|^)#\s?[0-9]+\s+0x[0-9a-fA-F]+\s+(_Z\w+)")
_GDB_PC_RE = re_cache.compile(r"The exception was triggered at PC 0x[0-9a-fA-F]+\s+(?:void )?(?P<kernel>[\w:]+)")


def demangle(name: str) -> str:
    """The qualified name of an Itanium-mangled function, without template arguments or parameters.

    `_ZN9deep_gemm5sched30sm90_paged_mqa_logits_metadataILj256E…` -> `deep_gemm::sched::sm90_paged_mqa_logits_metadata`.
    A name cut short in the log keeps what it has (`_ZN9deep_gemm5sched30sm90_paged_mqa_lo` ->
    `deep_gemm::sched::sm90_paged_mqa_lo…`). Returns the input when it is not a mangled name this reads.
    """
    if not name.startswith("_Z"):
        return name
    i = 2
    nested = name.startswith("_ZN")
    if nested:
        i = 3
        while i < len(name) and name[i] in "rVKRO":  # cv- and ref-qualifiers of a member function
            i += 1
    parts: list[str] = []
    while i < len(name) and name[i].isdecimal():
        j = i
        while j < len(name) and name[j].isdecimal():
            j += 1
        n = int(name[i:j])
        if n <= 0:
            break
        if j + n > len(name):
            if j < len(name):
                parts.append(name[j:] + "…")  # the log cut the name
            break
        parts.append(name[j : j + n])
        i = j + n
        if not nested or (i < len(name) and name[i] in "EI"):
            break
    return "::".join(parts) if parts else name


def kernel_of(message: str, coredump: bool = False) -> str | None:
    """The faulting kernel a core-dump or cuda-gdb line names, demangled; None when it names none.
    `coredump`: the line came from the core dump (its "coredump:" tag already taken off by the reader)."""
    if not coredump and "coredump" not in message and "<<<" not in message and "exception was triggered" not in message:
        return None
    m = _COREDUMP_FRAME_RE.search(message)
    if m:
        return demangle(m.group(1))
    m = _GDB_PC_RE.search(message)
    if m:
        return m.group("kernel")
    if "<<<" in message and (m := _MANGLED_RE.search(message)):
        return demangle(m.group(1))
    return None


# A word each GENERIC wording contains: most lines hold none, and `in` is cheaper than any regex.
GENERIC_WORDS = ("CUDBG_EXCEPTION", "CUDA Exception", "CUDA error", "Cuda error", "Check failed", "Assertion `",
                  "terminate called", "NCCL WARN", "Watchdog caught", "[Errno", "died unexpectedly", "Killed",
                  "Fatal Python error", "Segmentation fault", "Aborted", "Bus error", "Error: ", "FATAL: ",
                  "Fatal error: ", ": error: ", '"message": "', '"message":"',
                  "function error: ", "ErrCode=", " failed: ", "call acl", "Inner error", "HIP error", "hipError",
                  "what():", "segfault at", " ip:", "RIP: ", "RAX: ", "pc : ", "ERR0", "retCode", "[FUNC:")
# CANN's codes ("EZ9999: ", "(EI0006): ") hold no fixed word.
_CANN_CODE = r"(?<![A-Za-z0-9])E[0-9A-Z][0-9]{4}\)?:"
# The words as one trie-shaped pattern, and the codes: one search of a line instead of a test per word.
_GENERIC_WORDS_RE = re_cache.compile(trie_pattern(GENERIC_WORDS) + "|" + _CANN_CODE)


def generic_words(msg: str) -> bool:
    """Whether `msg` holds a word of a `GENERIC` wording or a CANN code (a cheap test before the patterns)."""
    return _GENERIC_WORDS_RE.search(msg) is not None


def exception_line(msg: str) -> tuple[str, str] | None:
    """(type, message) when `msg` is an exception line on its own (see `EXC_RE`), else None."""
    if not msg or not (msg[0].isalpha() or msg[0] == "_"):
        return None
    m = EXC_RE.match(msg)
    if m is None or m.group(1).endswith("Warning"):
        return None  # a warning is not an error
    return m.group(1), (m.group(2) or "").strip()


def raised(code: str) -> tuple[str, str] | None:
    """(type, message) of a `raise X("…")` statement as a frame's code line shows it; the message is the
    string literals it holds (an f-string's placeholders kept as written), "" when it shows none."""
    m = _RAISE_RE.match(code)
    if m is None:
        return None
    parts = []
    for lit in _STRING_RE.findall(m.group(2) or ""):
        try:
            value = ast.literal_eval(lit)
        except (ValueError, SyntaxError):
            value = lit[1:-1]
        parts.append(value if isinstance(value, str) else "")
    return m.group(1), "".join(parts).strip()


# The line jq prints before an error body's message: vLLM's ErrorResponse (vllm==0.33.0
# vllm/entrypoints/serve/engine/protocol.py:79-87: {"error": {"message", "type", "param", "code"}}) and the older flat
# one (vllm==0.6.3 vllm/entrypoints/openai/protocol.py ErrorResponse: "object": "error" first).
_ERROR_BODY_OPEN_RE = re_cache.compile(r'^"error":\s*\{\s*$|^"object":\s*"error",?\s*$|^\{\s*"error":')


def opens_error_body(prev: LogLine | None) -> bool:
    """Whether `prev` is the line before an error body's `"message": …` (so that line is a server's answer)."""
    return prev is not None and _ERROR_BODY_OPEN_RE.search(prev.message) is not None


def is_gap(msg: str) -> bool:
    return bool(msg) and GAP_RE.match(msg) is not None


def same_record(a: LogLine | None, b: LogLine) -> bool:
    """Whether `b` continues the log record `a` started: the same level, location and time (vLLM's
    NewLineFormatter repeats the whole prefix on every line of a multi-line message)."""
    return (
        a is not None and b.level is not None and b.level == a.level and b.fileinfo is not None
        and b.fileinfo == a.fileinfo and b.timestamp == a.timestamp and b.process == a.process
    )
