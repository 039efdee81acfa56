"""A line's own time, in each format dsv4ctl reads (dsv4ctl.stamps), on real lines: the fixtures' and pastes', and
the lines the reader, a group's member scan and a bundle's manifest take their times from."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsv4ctl import stamps
from dsv4ctl.group.scan import from_parts
from dsv4ctl.logs.reader import parse_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NODE0 = FIXTURES / "logs" / "group" / "ray_tp8_pp2_node0.log"


def _line(path: Path, number: int) -> str:
    return path.read_text(encoding="utf-8").split("\n")[number - 1]


# (file, line number, the line's own time): one real line of each format
REAL = [
    # vLLM's record behind its process tag
    ("logs/cuda_oom_load.log", 5, "10-21 09:00:10"),
    # c10's record behind torch's rank prefix (torch==2.14.1 ProcessGroupNCCL.cpp)
    ("logs/catalogue/eco_nccl_watchdog_timeout.log", 9, "11-30 09:10:51"),
    # glog's format, as torch.distributed's Python logger writes it (a path for the file)
    ("pastes/p73-torchrun-rank3-permission-denied-hf-cache.log", 2, "11-03 14:20:11"),
    # Ray's C++ record, alone and behind Ray's process tag
    ("pastes/h4-11-ray-gcs-connect-glog-error-oneline.log", 1, "11-25 18:02:44"),
    ("pastes/h4-07-serving-ray-tmp-full-then-500s.log", 3, "11-30 10:12:01"),
    # RFC 3339 first (kubectl logs --timestamps): the outer stamp is the line's
    ("pastes/h4-01-stuck-placement-group-two-nodes-kubectl-timestamps.log", 1, "11-29 14:01:40"),
    # the CRI format
    ("logs/formats/cri__cuda_oom_load.log", 1, "10-21 09:00:02"),
]


@pytest.mark.parametrize(("name", "number", "want"), REAL, ids=[r[0].rsplit("/", 1)[-1] for r in REAL])
def test_a_real_line_of_each_format_gives_its_own_time(name, number, want):
    raw = _line(FIXTURES / name, number)
    assert stamps.line_time(raw) == want, raw


def test_c10s_month_is_not_padded():
    # a real line (vLLM issue thread, DeepSeek-V3 on two nodes): c10 writes August as "8", the day as "22"
    raw = ("[rank0]:[E822 16:31:16.131931664 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=5730, OpType=BROADCAST, NumelIn=4, NumelOut=4, Timeout(ms)=600000)")
    assert stamps.line_time(raw) == "08-22 16:31:16"


def test_the_watchdog_line_carries_its_own_time_not_the_last_vllm_lines():
    lines = NODE0.read_text().split("\n")
    watchdog = next(i for i, l in enumerate(lines, 1) if "Watchdog caught collective operation timeout" in l)
    assert stamps.line_time(lines[watchdog - 2]).endswith("10:00:40")  # the last vLLM record before it
    assert stamps.line_time(lines[watchdog - 1]) == "11-03 10:20:41"
    ident = from_parts(NODE0.read_bytes(), b"", NODE0.stat().st_size, len(lines) - 1)
    assert ident.time_at(watchdog) == "11-03 10:20:41"
    assert ident.last_time == "11-03 10:30:41"  # the c10 line that ends the process


def test_a_line_without_a_time_takes_the_last_timed_lines():
    text = (b"(APIServer pid=1) INFO 11-03 10:00:02 [api_utils.py:286] non-default args: {'model': 'm'}\n"
            b"Traceback (most recent call last):\n"
            b"[rank3]:[E1103 10:20:41.123456789 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout\n"
            b"terminate called after throwing an instance of 'c10::DistBackendError'\n")
    ident = from_parts(text, b"", len(text), 4)
    assert [ident.time_at(n) for n in (1, 2, 3, 4)] == ["11-03 10:00:02", "11-03 10:00:02", "11-03 10:20:41",
                                                        "11-03 10:20:41"]


def test_the_reader_gives_rays_cpp_records_their_time():
    raw = _line(FIXTURES / "pastes" / "h4-11-ray-gcs-connect-glog-error-oneline.log", 1)
    line = parse_line(raw)
    assert (line.level, line.timestamp) == ("ERROR", "11-25 18:02:44")
    assert parse_line(_line(FIXTURES / "logs" / "catalogue" / "eco_nccl_watchdog_timeout.log", 9)).timestamp == "11-30 09:10:51"


@pytest.mark.parametrize("text", [
    "Traceback (most recent call last):",
    "INFO:     Started server process [5001]",
    "ValueError: E1103 10:20:41 is not a record",  # glog's shape needs its fraction, thread and file:line
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB.",
    "  File \"/usr/lib/python3.12/multiprocessing/process.py\", line 314, in _bootstrap",
])
def test_lines_without_a_time_have_none(text):
    assert stamps.line_time(text) is None


_CLOCKS = st.tuples(st.integers(1, 12), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
_FORMATS = [
    "(Worker_TP0 pid=7) ERROR {md} {t} [ray_utils.py:89] x",
    "[rank3]:[E{mdc} {t}.123456789 ProcessGroupNCCL.cpp:632] [Rank 3] x",
    "E{md4} {t}.123456  1234 file.cc:12] x",
    "[2026-{md} {t},123 E 858 901] (raylet) node_manager.cc:123: x",
    "2026-{md}T{t}.118020Z (APIServer pid=1) INFO 01-01 00:00:00 [a.py:1] x",
]


@given(_CLOCKS, st.sampled_from(_FORMATS))
def test_every_format_gives_the_same_clock(clock, fmt):
    month, day, h, m, s = clock
    t = f"{h:02d}:{m:02d}:{s:02d}"
    text = fmt.format(md=f"{month:02d}-{day:02d}", mdc=f"{month}{day:02d}", md4=f"{month:02d}{day:02d}", t=t)
    assert stamps.line_time(text) == f"{month:02d}-{day:02d} {t}"


@given(_CLOCKS, _CLOCKS)
def test_seconds_order_as_the_calendar(a, b):
    def stamp(c):
        return f"{c[0]:02d}-{c[1]:02d} {c[2]:02d}:{c[3]:02d}:{c[4]:02d}"

    assert (stamps.seconds(stamp(a)) < stamps.seconds(stamp(b))) == (a < b)


def test_seconds_across_a_month_end_are_a_day():
    assert stamps.seconds("05-01 00:00:00") - stamps.seconds("04-30 00:00:00") == 86400
    assert stamps.from_iso("2026-12-02T02:28:20Z") == "12-02 02:28:20"
    assert stamps.from_iso("12-02 02:28:20") == "12-02 02:28:20" and stamps.from_iso("soon") is None
