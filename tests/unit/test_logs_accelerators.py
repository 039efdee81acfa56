"""Errors of the other accelerators and of crashes, as errors on their own (dsv4ctl/logs/grammars.py GENERIC "npu",
"hip", "cpp", "crash"): the Ascend and ROCm messages of ../shared/field-guide/guide.jsonl as logged, with and
without vLLM's prefix, libstdc++'s terminate line with its what(), the kernel's segfault report and register dump;
the fixtures of tests/fixtures/logs/accelerators fail with the cause quoted; the prefilter selects these lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv4ctl.advice import diagnose
from dsv4ctl.logs import prefilter
from dsv4ctl.logs.reader import parse_line
from dsv4ctl.logs.records import ErrorAssembler, generic_error

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "logs" / "accelerators"
GUIDE = ROOT.parent / "shared" / "field-guide" / "guide.jsonl"

# Lines of the field guide's Ascend/ROCm classes that state an error (the others are hints around them).
NOT_ERRORS = {"For debugging consider passing AMD_SERIALIZE_KERNEL=3", "Unable to open /dev/kfd read-write: Permission denied"}
HINTS = ("SetDevice:Set visible device failed", "op[QuantBatchMatmulV3]", "root is not member")


def _guide_lines() -> list[str]:
    if not GUIDE.is_file():
        pytest.skip("../shared/field-guide is not here")
    rows = [json.loads(line) for line in GUIDE.read_text().splitlines() if line.strip()]
    return [m for r in rows if r["family"] in ("platform_ascend", "platform_rocm") for m in r["messages"]]


def _records(lines: list[str]):
    a = ErrorAssembler()
    out = []
    for i, text in enumerate(lines, 1):
        out += a.feed(parse_line(text, "x.log", i), i)
    return out + a.close()


@pytest.mark.parametrize("prefix", ["", "(Worker_TP0 pid=3011) ", "[rank0]: "])
def test_every_error_line_of_the_guide_is_an_error(prefix):
    lines = [m for m in _guide_lines() if m not in NOT_ERRORS and not m.startswith(HINTS)]
    assert len(lines) >= 15
    for m in lines:
        recs = _records([prefix + m])
        assert recs, m
        assert prefilter.line_matches(prefix + m), m


@pytest.mark.parametrize("line, kind, details", [
    ("EZ9999: Inner Error!", "npu", {"cann_code": "EZ9999"}),
    ("EE1001: The argument is invalid.Reason: rtGetDevMsg execute failed, reason=[context pointer null]", "npu",
     {"cann_code": "EE1001"}),
    ("rtMemcpy execute failed, reason=[driver error:internal error], ErrCode=507011", "npu",
     {"rt_call": "rtMemcpy", "acl_code": "507011"}),
    ("[ERROR] 2026-01-21-08:28:33 (PID:3011, Device:0, RankID:-1) ERR00100 PTA call acl api failed", "npu",
     {"pta_code": "ERR00100", "pta_module": "PTA"}),
    (" NPU function error: aclrtSynchronizeDevice, error code is 507035", "npu", {"acl_code": "507035"}),
    ("hipErrorNoBinaryForGpu: Unable to find code object for all current devices!", "hip", {"hip_code": "hipErrorNoBinaryForGpu"}),
    ("torch.AcceleratorError: HIP error: an illegal memory access was encountered", None, {}),  # a Python exception line
    ("python3[2314]: segfault at 0 ip 00007f3a2b1c4d5e sp 00007ffd1e2f3a40 error 4 in libtorch_cpu.so[7f3a28000000+4e00000]",
     "crash", {"comm": "python3", "pid": "2314"}),
    ("traps: python3[2314] general protection fault ip:7f3a2b1c4d5e sp:7ffd1e2f3a40 error:0 in libc.so.6", "crash",
     {"trap": "general protection fault"}),
    ("RIP: 0033:0x7f3a2b1c4d5e", "crash", {"register": "RIP"}),
    ("pc : __memcpy_aarch64_simd+0x60/0x280", "crash", {"pc": "pc"}),
])
def test_wordings(line, kind, details):
    rec = generic_error(parse_line(line))
    if kind is None:
        assert _records([line])[0].kind == "python"
        return
    assert rec is not None and rec.kind == kind and details.items() <= rec.details.items()
    assert rec.fatal


@pytest.mark.parametrize("line", [
    "INFO 01-21 08:28:33 [platform.py:1] ASCEND_RT_VISIBLE_DEVICES=0,1 (E1234 is a part number)",
    "INFO 01-21 08:28:33 [worker.py:1] HIP_VISIBLE_DEVICES=0",
    "The device id is E12345678",
    "what is the answer: none",
])
def test_not_errors(line):
    assert generic_error(parse_line(line)) is None


def test_terminate_and_its_what_are_one_error():
    recs = _records(["terminate called after throwing an instance of 'c10::Error'",
                     "  what():  call aclnnQuantMatmulWeightNz failed, detail:E69999: Inner Error!",
                     "Fatal Python error: Aborted"])
    first = recs[0]
    assert first.kind == "cpp" and first.details["cpp_type"] == "c10::Error"
    assert first.text == "call aclnnQuantMatmulWeightNz failed, detail:E69999: Inner Error!"
    assert [ln.message for ln in first.evidence_lines()] == [
        "what():  call aclnnQuantMatmulWeightNz failed, detail:E69999: Inner Error!",
        "terminate called after throwing an instance of 'c10::Error'"]
    assert [r.kind for r in recs] == ["cpp", "crash"]  # the what() line is no error of its own


def test_a_what_line_alone_is_an_error():
    recs = _records(["  what():  std::bad_alloc"])
    assert len(recs) == 1 and recs[0].kind == "cpp" and recs[0].details["what"] == "std::bad_alloc"


@pytest.mark.parametrize("name, quoted", [
    ("ascend_hccl_socket_timeout.log", "EI0006: [PID: 1292363]"),
    ("ascend_acl_device_setup.log", "RuntimeError: NPU function error: c10_npu::SetDevice(device_id_), error code is 507033"),
    ("ascend_terminate_what.log", "what():  call aclnnQuantMatmulWeightNz failed"),
    ("rocm_hip_no_binary.log", "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"),
    ("kernel_segfault_registers.log", "python3[2314]: segfault at 0 ip"),
])
def test_fixtures_fail_with_the_cause_quoted(name, quoted):
    d = diagnose([FIXTURES / name])
    assert d.verdict == "failed" and d.root_cause is not None
    assert any(e.text.startswith(quoted) for e in d.root_cause.evidence), [e.text for e in d.root_cause.evidence]
