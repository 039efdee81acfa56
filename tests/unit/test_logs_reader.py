"""The log reader: vLLM's prefixes across 0.27-0.33, streams, gzip, huge lines."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import pytest

from dsv4ctl.errors import InputError
from dsv4ctl.logs import prefilter
from dsv4ctl.logs.reader import MAX_LINE_BYTES, iter_chunks, iter_log_lines, parse_line

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"


def test_format_with_process_tag_0_31_plus():
    line = parse_line(
        "(EngineCore_DP0 pid=1234) INFO 11-01 09:25:06 [kv_cache_planning.py:1405] Auto-fit max_model_len: reduced",
        "x.log",
        7,
    )
    assert (line.process, line.pid, line.level) == ("EngineCore_DP0", 1234, "INFO")
    assert line.fileinfo == "kv_cache_planning.py:1405"
    assert line.timestamp == "11-01 09:25:06"
    assert line.message == "Auto-fit max_model_len: reduced"
    assert (line.source, line.lineno) == ("x.log", 7)


def test_stream_prefix_on_raw_traceback_lines_0_30():
    line = parse_line('(Worker_TP1 pid=88) File "/v/sparse_mla.py", line 259, in _build_c128a_metadata')
    assert line.process == "Worker_TP1" and line.level is None
    assert line.message.startswith('File "/v/sparse_mla.py"')


def test_unprefixed_record_and_uvicorn_line():
    rec = parse_line("WARNING 10-21 09:00:02 [utils.py:12] something")
    assert (rec.process, rec.level, rec.message) == (None, "WARNING", "something")
    uv = parse_line("INFO:     Application startup complete.")
    assert (uv.level, uv.message) == ("INFO", "Application startup complete.")


def test_docker_compose_ansi_and_cr():
    raw = "vllm-1  | \x1b[0;36m(Worker_TP0 pid=80)\x1b[0;0m \x1b[31mERROR\x1b[0m \x1b[90m09-12 07:43:09 [m.py:1]\x1b[0m AssertionError\r"
    line = parse_line(raw)
    assert (line.process, line.pid, line.level, line.message) == ("Worker_TP0", 80, "ERROR", "AssertionError")
    assert line.raw == raw


def test_ray_prefix_and_repeat_marker():
    line = parse_line(
        "(RayWorkerWrapper pid=7123, ip=10.0.0.12) ERROR 09-24 10:04:10 [worker_base.py:620] boom [repeated 2x across cluster]"
    )
    assert (line.process, line.pid, line.level, line.message) == ("RayWorkerWrapper", 7123, "ERROR", "boom")


def test_logging_prefix_and_iso_timestamp():
    line = parse_line("2026-10-21T09:00:02.123456789Z [prod] (APIServer pid=1) INFO 10-21 09:00:02 [a.py:3] hi")
    assert (line.process, line.level, line.message) == ("APIServer", "INFO", "hi")


def test_tqdm_redraws_keep_the_last_state():
    raw = "(Worker_TP0 pid=5) \rCapturing CUDA graphs (FULL):   0%|  | 0/83 [00:00<?, ?it/s]\rCapturing CUDA graphs (FULL):  14%|█ | 12/83 [00:01<00:08]"
    assert parse_line(raw).message.startswith("Capturing CUDA graphs (FULL):  14%")


@pytest.mark.parametrize(
    "raw",
    ["", "\r", "\x1b[", "(", "(pid=", "ERROR", "INFO 99-99", "|||", "\x00\x01\x02", "(X pid=12345678901234567890) INFO"],
)
def test_parse_line_never_raises(raw):
    assert isinstance(parse_line(raw).message, str)


def test_gzip_and_plain_give_the_same_lines(tmp_path):
    src = FIXTURES / "stale_max_model_len_compose_v029.log"
    gz = tmp_path / "log.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    plain = [(ln.lineno, ln.message) for ln in iter_log_lines([src])]
    packed = [(ln.lineno, ln.message) for ln in iter_log_lines([gz])]
    assert plain == packed
    assert len(plain) == src.read_bytes().count(b"\n")


def test_truncated_gzip_yields_what_was_readable(tmp_path):
    data = gzip.compress(b"INFO 10-21 09:00:02 [a.py:1] one\n" * 2000)
    gz = tmp_path / "cut.gz"
    gz.write_bytes(data[: len(data) // 2])
    lines = list(iter_log_lines([gz]))
    assert lines and all(ln.message == "one" for ln in lines[:-1])


def test_binary_stream_and_line_numbers_do_not_depend_on_chunk_size():
    data = b"a\nbb\n\nccc ERROR x\n" * 50 + b"last line without newline ERROR"
    whole = [(ln.lineno, ln.raw) for ln in iter_log_lines([io.BytesIO(data)])]
    small = [(ln.lineno, ln.raw) for ln in iter_log_lines([io.BytesIO(data)], chunk_bytes=7)]
    assert whole == small
    assert whole[-1] == (201, "last line without newline ERROR")


def test_huge_line_is_capped_and_counted_once():
    huge = b"x" * (3 * MAX_LINE_BYTES) + b" ERROR tail"
    data = b"first\n" + huge + b"\nINFO 10-21 09:00:02 [a.py:1] after\n"
    lines = list(iter_log_lines([io.BytesIO(data)], chunk_bytes=MAX_LINE_BYTES // 4))
    assert [ln.lineno for ln in lines] == [1, 2, 3]
    assert len(lines[1].raw.encode()) == MAX_LINE_BYTES
    assert lines[2].message == "after"
    # The chunker keeps memory bounded: no chunk is bigger than a read plus one capped line.
    sizes = [len(c) for c in iter_chunks(io.BytesIO(data), chunk_bytes=1024, max_line=MAX_LINE_BYTES)]
    assert max(sizes) <= 1024 + MAX_LINE_BYTES + 1


def test_invalid_utf8_is_replaced():
    lines = list(iter_log_lines([io.BytesIO(b"\xff\xfe ERROR \xe2\x82 bad\n")]))
    assert "ERROR" in lines[0].raw and "\ufffd" in lines[0].raw


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such log file"):
        list(iter_log_lines([tmp_path / "nope.log"]))
    with pytest.raises(InputError, match="directory"):
        list(iter_log_lines([tmp_path]))


@pytest.mark.parametrize("engine", ["re", "hyperscan"])
def test_scan_source_selects_exactly_the_matching_lines(engine):
    if engine == "hyperscan" and not prefilter.hyperscan_available():
        pytest.skip("hyperscan not installed")
    for path in sorted(FIXTURES.glob("*.log")):
        expected = [(ln.lineno, ln.raw) for ln in iter_log_lines([path]) if prefilter.line_matches(ln.raw)]
        with open(path, "rb") as fh:
            got = list(prefilter.scan_source(fh, engine=engine, chunk_bytes=4096))
        assert got == expected, path.name


def test_the_record_format_of_older_releases_without_the_opening_bracket():
    from dsv4ctl.logs.reader import parse_line
    from dsv4ctl.logs.timeline import StartupTracker

    line = parse_line("INFO 05-01 12:00:01 api_server.py:712] vLLM API server version 0.6.3")
    assert (line.level, line.timestamp, line.fileinfo, line.message) == (
        "INFO", "05-01 12:00:01", "api_server.py:712", "vLLM API server version 0.6.3")
    tracker = StartupTracker()
    tracker.feed(line)
    assert tracker.timeline.vllm_version == "0.6.3"
    new = parse_line("(APIServer pid=1) ERROR 10-21 09:00:02 [core.py:1510] EngineCore failed to start.")
    assert (new.level, new.fileinfo, new.message) == ("ERROR", "core.py:1510", "EngineCore failed to start.")


def test_the_worker_tag_of_older_releases_keeps_its_rank():
    from dsv4ctl.logs.reader import parse_line

    line = parse_line("(VllmWorker rank=1 pid=123) ERROR 05-06 10:00:00 [multiproc_executor.py:470] WorkerProc hit an exception.")
    assert (line.process, line.pid, line.level, line.message) == ("VllmWorker rank=1", 123, "ERROR", "WorkerProc hit an exception.")


def test_a_directory_is_refused_with_commands_that_read_its_logs(tmp_path, cli):
    import shlex

    logs = tmp_path / "node logs"
    logs.mkdir()
    for name in ("node-a.log", "node-b.log", "notes.md"):
        (logs / name).write_text("INFO 12-04 10:00:00 [api_server.py:1] vLLM API server version 0.32.0\n")
    result = cli("diagnose", logs)
    assert result.exit_code == 1 and "is a directory, not a log file" in result.stderr
    commands = re.findall(r"`([^`]+)`", result.stderr)
    assert [shlex.split(c)[:2] for c in commands] == [["dsv4ctl", "diagnose"], ["dsv4ctl", "collect"]]
    assert shlex.split(commands[0])[2] == f"{logs}/*.log" and "2 files like node-a.log" in result.stderr
    assert shlex.split(commands[1])[2] == str(logs)

    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("diagnose", empty)
    assert result.exit_code == 1 and "dsv4ctl diagnose" not in result.stderr.split("Hint:")[1]
    assert f"dsv4ctl collect {empty}" in result.stderr
