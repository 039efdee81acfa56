"""The parallel scan of big files gives byte-for-byte the sequential result.

The threshold is lowered to a few bytes here, so small files (fixtures padded with serving noise and
concatenated) take the parallel path; nothing big is written. The one-process reference reads them
through the prefilter as well: a file below `FULL_READ_BYTES` is otherwise read in full, which no file
big enough to be scanned in parallel (64 MiB) ever is.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import multiprocessing.connection
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsv4ctl.errors import InputError
from dsv4ctl.logs import parallel, prefilter
from dsv4ctl.diagnosis import run as diagnose_module
from dsv4ctl.advice import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
EXAMPLES = Path(__file__).resolve().parents[2] / "dsv4ctl" / "examples"
LOGS = sorted(FIXTURES.glob("*.log")) + sorted(EXAMPLES.glob("*.log"))
ENGINES = ["re"] + (["hyperscan"] if prefilter.hyperscan_available() else [])



@pytest.fixture(autouse=True)
def _prefiltered_reference(monkeypatch):
    monkeypatch.setattr(diagnose_module, "FULL_READ_BYTES", 0)


# Serving noise no pattern selects (a uvicorn access line and a metrics line).
NOISE = (
    b'(APIServer pid=7701) INFO:     10.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    b"(APIServer pid=7701) INFO 10-21 11:00:00 [loggers.py:259] Engine 000: Avg prompt throughput: 1.4 tokens/s\n"
)


def _json(path: Path, **kw) -> str:
    return json.dumps(diagnose([path], **kw).to_json(), sort_keys=True)


def _padded(log: bytes, noise_lines: int) -> bytes:
    """The log's startup with serving noise before and after it, so range cuts land all over it."""
    return NOISE * noise_lines + log + NOISE * noise_lines


def test_fixtures_padded_give_the_same_diagnosis_with_2_3_and_4_processes(tmp_path):
    assert len(LOGS) >= 10
    for log in LOGS:
        path = tmp_path / log.name
        path.write_bytes(_padded(log.read_bytes(), 50))
        sequential = _json(path, workers=1)
        for workers in (2, 3, 4):
            assert _json(path, workers=workers, parallel_min_bytes=1) == sequential, (log.name, workers)


def test_all_fixtures_concatenated_into_one_file(tmp_path):
    path = tmp_path / "all.log"
    path.write_bytes(b"".join(_padded(p.read_bytes(), 3) for p in LOGS))
    sequential = diagnose([path], workers=1)
    for engine in ENGINES:
        for workers in (2, 4):
            d = diagnose([path], engine=engine, workers=workers, parallel_min_bytes=1)
            assert json.dumps(d.to_json(), sort_keys=True) == json.dumps(sequential.to_json(), sort_keys=True)
    assert sequential.lines_examined > 500
    # Every selected line, numbered: the last ones lie in the last range, so the numbers were rebuilt.
    with open(path, "rb") as f:
        expected = list(prefilter.scan_source(f))
    got = list(parallel.scan_file_parallel(path, workers=4))
    assert got == expected
    total = path.read_bytes().count(b"\n")
    assert expected[-1][0] > total * 3 // 4


def test_the_parallel_path_is_taken_above_the_threshold_only(tmp_path, monkeypatch):
    calls: list[int] = []
    real = parallel.scan_file_batches

    def spy(path, **kw):
        calls.append(kw["workers"])
        return real(path, **kw)

    monkeypatch.setattr(parallel, "scan_file_batches", spy)
    path = tmp_path / "x.log"
    path.write_bytes(_padded((EXAMPLES / "stale-max-model-len.log").read_bytes(), 100))
    size = path.stat().st_size
    diagnose([path], workers=2, parallel_min_bytes=size + 1)
    assert calls == []
    diagnose([path], workers=2, parallel_min_bytes=size)
    assert calls == [2]
    diagnose([path], workers=1, parallel_min_bytes=1)
    assert calls == [2]


def test_gzip_stdin_and_directories_are_not_parallel(tmp_path):
    gz = tmp_path / "x.log.gz"
    gz.write_bytes(gzip.compress(NOISE * 10))
    assert parallel.parallel_size(gz, 1) is None
    assert parallel.parallel_size("-", 1) is None
    assert parallel.parallel_size(tmp_path, 1) is None
    assert parallel.parallel_size(tmp_path / "missing.log", 1) is None
    plain = tmp_path / "x.log"
    plain.write_bytes(NOISE * 10)
    assert parallel.parallel_size(plain, 1) == len(NOISE) * 10
    assert parallel.parallel_size(plain, len(NOISE) * 10 + 1) is None


def test_ranges_start_at_line_starts_and_cover_the_file(tmp_path):
    data = b"a\n" + b"x" * 300_000 + b"\nb\nc" + b"\n" * 5 + b"tail without newline"
    path = tmp_path / "r.log"
    path.write_bytes(data)
    with open(path, "rb") as f:
        for parts in (1, 2, 3, 4, 9):
            ranges = parallel.split_ranges(f, len(data), parts)
            assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
            assert all(a < b for a, b in ranges)
            assert all(ranges[i][1] == ranges[i + 1][0] for i in range(len(ranges) - 1))
            assert all(data[s - 1:s] == b"\n" for s, _ in ranges[1:])
            assert len(ranges) <= parts
    with open(path, "rb") as f:  # one line: one range whatever the parts
        path.write_bytes(b"x" * 1000)
        assert parallel.split_ranges(f, 1000, 4) == [(0, 1000)]


LINE_PIECES = st.sampled_from(
    [
        b"\n", b"\r\n", b"\r", b"\xff\xe2", b"ERROR 10-21 09:00:00 [a.py:1] boom", b"Traceback (most recent call last):",
        b"AssertionError", b"plain text ", b"(Worker_TP0 pid=1) ", b"Starting vLLM server on http://x",
        b"x" * 5000, b"KV cache size: 12 tokens",
    ]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(LINE_PIECES, max_size=80), workers=st.integers(2, 4), engine=st.sampled_from(ENGINES))
def test_scan_matches_sequential_on_random_logs(tmp_path, pieces, workers, engine):
    data = b"".join(pieces)
    path = tmp_path / "fuzz.log"
    path.write_bytes(data)
    with open(path, "rb") as f:
        expected = list(prefilter.scan_source(f, engine=engine, chunk_bytes=4096))
    got = list(parallel.scan_file_parallel(path, engine=engine, workers=workers, chunk_bytes=4096))
    assert got == expected


def test_line_count_counts_a_last_line_without_newline(tmp_path):
    path = tmp_path / "n.log"
    for data, lines in ((b"", 0), (b"a", 1), (b"a\n", 1), (b"a\nb", 2), (b"\n\n", 2)):
        path.write_bytes(data)
        count: list[int] = []
        with open(path, "rb") as f:
            list(prefilter.scan_source(f, line_count=count))
        assert count == [lines], data


def test_workers_env_overrides_the_default(monkeypatch):
    monkeypatch.setenv(parallel.WORKERS_ENV, "3")
    assert parallel.default_workers() == 3
    monkeypatch.setenv(parallel.WORKERS_ENV, "nonsense")
    assert 1 <= parallel.default_workers() <= parallel.MAX_WORKERS


@pytest.mark.parametrize("workers", [2, 3])
def test_a_cli_run_uses_the_same_numbers(cli, tmp_path, monkeypatch, workers):
    # Through the CLI, with the threshold lowered for this process: the JSON equals the one-process run.
    path = tmp_path / "stale.log"
    path.write_bytes(_padded((EXAMPLES / "stale-max-model-len.log").read_bytes(), 200))
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    sequential = cli("diagnose", str(path), "--json")
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setenv(parallel.WORKERS_ENV, str(workers))
    par = cli("diagnose", str(path), "--json")
    assert par.exit_code == sequential.exit_code == 3
    assert json.loads(par.stdout) == json.loads(sequential.stdout)


@pytest.mark.parametrize("use_numpy", [True, False])
def test_count_newlines_equals_bytes_count(monkeypatch, use_numpy):
    if use_numpy:
        pytest.importorskip("numpy")
        monkeypatch.setattr(prefilter, "_np", None)
        monkeypatch.setattr(prefilter, "_counted_plain", prefilter._NUMPY_AFTER_BYTES)  # a lot counted already
    else:
        monkeypatch.setattr(prefilter, "_np", False)  # as if numpy were not installed
    data = bytes(range(256)) * 20_000 + b"\n" * 3 + b"x" * 1_500_000 + b"\n"  # ~6.6 MB
    for start, end in ((0, len(data)), (1, len(data) - 1), (5_000_000, len(data)), (7, 1_048_583), (10, 20), (3, 3)):
        assert prefilter.count_newlines(data, start, end) == data.count(b"\n", start, end), (start, end)
    assert (prefilter._np is not False) == use_numpy


def test_spawned_scanners_give_the_same_lines(tmp_path, monkeypatch):
    # The fallback where forking is unsafe (other threads running, or not Linux).
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("spawn"))
    path = tmp_path / "s.log"
    path.write_bytes(_padded((EXAMPLES / "deepgemm-ima.log").read_bytes(), 40))
    with open(path, "rb") as f:
        expected = list(prefilter.scan_source(f))
    assert list(parallel.scan_file_parallel(path, workers=3)) == expected


def test_fork_only_while_single_threaded():
    import threading

    assert parallel._context().get_start_method() in ("fork", "spawn")
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert parallel._context().get_start_method() == "spawn"
    finally:
        stop.set()
        t.join()


def test_a_failing_scanner_is_one_clear_error(tmp_path, monkeypatch):
    path = tmp_path / "gone.log"
    path.write_bytes(NOISE * 200)
    real = parallel._scan_range_worker

    def worker_on_a_missing_file(p, *args):
        return real(str(tmp_path / "missing.log"), *args)

    monkeypatch.setattr(parallel, "_scan_range_worker", worker_on_a_missing_file)
    # fork: the child runs the patched function as it is (spawn would re-import the module's own).
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("fork"))
    with pytest.raises(InputError, match="cannot read .*No such file"):
        list(parallel.scan_file_parallel(path, workers=2))


def test_a_killed_scanner_is_one_clear_error(tmp_path, monkeypatch):
    path = tmp_path / "k.log"
    path.write_bytes(NOISE * 200)

    def killed(*_args):
        os._exit(9)

    monkeypatch.setattr(parallel, "_scan_range_worker", killed)
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("fork"))
    with pytest.raises(InputError, match=r"scanning process ended unexpectedly \(exit code 9\)") as info:
        list(parallel.scan_file_parallel(path, workers=2))
    assert parallel.WORKERS_ENV in (info.value.hint or "")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_without_hyperscan_and_numpy_the_command_gives_the_same_json(cli, tmp_path, monkeypatch, workers):
    # Platforms without their wheels (the default install has them on Linux x86_64/aarch64 only):
    # Python's `re` and bytes.count, in one process and in two.
    import sys

    path = tmp_path / "stale.log"
    path.write_bytes(_padded((EXAMPLES / "stale-max-model-len.log").read_bytes(), 6000))  # spans over 1 MiB
    monkeypatch.setenv(parallel.WORKERS_ENV, workers)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 1)
    fast = cli("diagnose", str(path), "--json")
    monkeypatch.setitem(sys.modules, "hyperscan", None)  # `import hyperscan` raises ImportError
    monkeypatch.setitem(sys.modules, "numpy", None)
    monkeypatch.setattr(prefilter, "_HS_DB", None)
    monkeypatch.setattr(prefilter, "_np", None)
    monkeypatch.setattr(prefilter, "_counted_plain", prefilter._NUMPY_AFTER_BYTES)  # numpy would pay: try it
    assert not prefilter.hyperscan_available()
    slow = cli("diagnose", str(path), "--json")
    if workers == "1":  # (with two, the scanning children counted the newlines)
        assert prefilter._np is False
    assert slow.exit_code == fast.exit_code == 3
    assert json.loads(slow.stdout) == json.loads(fast.stdout)


def test_the_default_install_is_the_fast_one_where_wheels_exist():
    import tomllib

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parents[2]
    deps = [Requirement(r) for r in tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]]
    by_name = {r.name: r for r in deps}

    def installed(name: str, platform: str, machine: str, python: str = "3.12") -> bool:
        env = {**default_environment(), "sys_platform": platform, "platform_machine": machine, "python_version": python}
        return by_name[name].marker is None or by_name[name].marker.evaluate(env)

    for name in ("hyperscan", "numpy"):
        for python in ("3.11", "3.12", "3.13", "3.14"):
            assert installed(name, "linux", "x86_64", python) and installed(name, "linux", "aarch64", python)
        assert not installed(name, "darwin", "arm64") and not installed(name, "win32", "AMD64")
        assert not installed(name, "linux", "ppc64le")


def _reports(path: Path, **kw) -> list[int]:
    seen: list[int] = []
    list(parallel.scan_file_parallel(path, progress=seen.append, **kw))
    return seen


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_progress_counts_up_to_the_file_size(tmp_path, workers):
    path = tmp_path / "p.log"
    path.write_bytes(NOISE * 60_000)  # ~11 MB: several reports per range
    size = path.stat().st_size
    seen = _reports(path, workers=workers, chunk_bytes=1 << 20)
    assert seen == sorted(seen) and seen[-1] == size
    assert len(seen) >= (3 if workers == 1 else workers)  # children: at the end of each range at least
    if workers == 1:  # a report at least every PROGRESS_BYTES plus one read (a child reports per batch)
        assert all(b - a <= prefilter.PROGRESS_BYTES + (1 << 20) for a, b in zip([0] + seen, seen))
    with open(path, "rb") as f:  # the sequential scan reports the same way
        one: list[int] = []
        assert list(prefilter.scan_source(f, progress=one.append, chunk_bytes=1 << 20)) == list(
            parallel.scan_file_parallel(path, workers=workers, chunk_bytes=1 << 20)
        )
    assert one[-1] == size and len(one) >= size // (prefilter.PROGRESS_BYTES + (1 << 20))


def test_progress_of_several_sources_adds_up_and_a_gz_counts_its_compressed_bytes(tmp_path):
    plain = tmp_path / "a.log"
    plain.write_bytes(_padded((EXAMPLES / "healthy.log").read_bytes(), 20_000))
    gz = tmp_path / "b.log.gz"
    gz.write_bytes(gzip.compress((EXAMPLES / "stale-max-model-len.log").read_bytes() + NOISE * 20_000))
    seen: list[int] = []
    with_progress = diagnose([plain, gz], workers=2, parallel_min_bytes=1, progress=seen.append)
    assert seen == sorted(seen)
    assert seen[-1] == plain.stat().st_size + gz.stat().st_size
    assert plain.stat().st_size in seen  # the first file's end, then the second's bytes on top
    without = diagnose([plain, gz], workers=2, parallel_min_bytes=1)
    assert json.dumps(with_progress.to_json(), sort_keys=True) == json.dumps(without.to_json(), sort_keys=True)


def test_progress_bar_only_for_big_inputs_on_a_terminal_not_to_a_pipe(tmp_path, monkeypatch):
    from dsv4ctl.render import progress as bar

    monkeypatch.delenv("TERM", raising=False)
    big = bar.SHOW_ABOVE_BYTES + 1
    master, tty = os.openpty()
    r, w = os.pipe()
    try:
        with open(tty, "w", closefd=False) as term, open(w, "w", closefd=False) as pipe, open(
            tmp_path / "out.txt", "w"
        ) as file:
            assert bar.show_progress(big, stdout=term, stderr=term)
            assert bar.show_progress(big, stdout=file, stderr=term)  # > report.txt: the terminal still sees it
            assert not bar.show_progress(bar.SHOW_ABOVE_BYTES, stdout=term, stderr=term)
            assert not bar.show_progress(None, stdout=term, stderr=term)
            assert not bar.show_progress(big, stdout=pipe, stderr=term)  # | jq, | less
            assert not bar.show_progress(big, stdout=term, stderr=pipe)
            assert not bar.show_progress(big, stdout=term, stderr=file)
            monkeypatch.setenv("TERM", "dumb")
            assert not bar.show_progress(big, stdout=term, stderr=term)
    finally:
        for fd in (master, tty, r, w):
            os.close(fd)
    log = tmp_path / "x.log"
    log.write_bytes(b"abc\n")
    assert bar.input_bytes([str(log), str(log)]) == 8
    assert bar.input_bytes([str(log), str(tmp_path / "missing")]) is None
    assert bar.input_bytes([str(tmp_path)]) is None


def test_a_diagnose_on_a_terminal_shows_the_bar_on_stderr_and_the_same_report(tmp_path):
    # A real terminal (a pty) on stderr, stdout to a file: the bar is drawn and erased, the report unchanged.
    import subprocess
    import sys

    from dsv4ctl.render import progress as bar

    path = tmp_path / "big.log"
    with open(path, "wb") as f:
        f.write((EXAMPLES / "healthy.log").read_bytes())
        block = NOISE * 5000
        while f.tell() <= bar.SHOW_ABOVE_BYTES:
            f.write(block)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "100", parallel.WORKERS_ENV: "2"}

    def run(stdout_name: str, stderr_tty: bool) -> tuple[int, bytes]:
        master, tty = os.openpty()
        with open(tmp_path / stdout_name, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dsv4ctl", "diagnose", str(path)], cwd=root, env=env, stdout=out,
                stderr=tty if stderr_tty else subprocess.DEVNULL,
            )
        os.close(tty)
        got = b""
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not data:
                break
            got += data
        os.close(master)
        return proc.wait(timeout=120), got

    code, drawn = run("with-bar.txt", True)
    assert code == 0
    assert b"reading the log" in drawn and b"MB" in drawn
    code2, _ = run("without-bar.txt", False)
    assert code2 == 0
    assert (tmp_path / "with-bar.txt").read_bytes() == (tmp_path / "without-bar.txt").read_bytes()


def test_the_bar_starts_no_thread_so_the_scan_still_forks(monkeypatch):
    import threading

    from dsv4ctl.render import progress as bar

    monkeypatch.setattr(bar, "show_progress", lambda total: True)
    with bar.read_progress(100_000_000, "reading the log") as update:
        assert update is not None
        update(50_000_000)
        assert threading.active_count() == 1
        assert parallel._context().get_start_method() == "fork"


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_the_parallel_scan_counts_the_lines_as_the_sequential_one(tmp_path, workers):
    path = tmp_path / "c.log"
    for data in (NOISE * 1000, NOISE * 1000 + b"last line without newline", b"", b"\n\n\n"):
        path.write_bytes(data)
        count: list[int] = []
        list(parallel.scan_file_parallel(path, workers=workers, line_count=count))
        with open(path, "rb") as f:
            expected: list[int] = []
            list(prefilter.scan_source(f, line_count=expected))
        assert count == expected


def test_numpy_counts_only_once_it_pays(monkeypatch):
    # Importing numpy costs about as much as counting 0.65 GiB with bytes.count.
    pytest.importorskip("numpy")
    monkeypatch.setattr(prefilter, "_np", None)
    monkeypatch.setattr(prefilter, "_counted_plain", 0)
    big = NOISE * 10_000  # ~2 MB
    for start, end in ((0, 9000), (100, 100 + prefilter._NUMPY_MIN_BYTES), (5, 70_000), (0, len(big))):
        assert prefilter.count_newlines(big, start, end) == big.count(b"\n", start, end)
    assert prefilter._np is None  # not imported for a couple of MB
    monkeypatch.setattr(prefilter, "_counted_plain", prefilter._NUMPY_AFTER_BYTES)
    small = NOISE * 400  # ~80 KB: a small log read whole
    assert prefilter.count_newlines(small, 0, len(small)) == small.count(b"\n")
    assert prefilter._np is None  # never for a small buffer
    for start, end in ((0, 9000), (100, 100 + prefilter._NUMPY_MIN_BYTES), (5, 70_000)):
        assert prefilter.count_newlines(big, start, end) == big.count(b"\n", start, end)
    assert prefilter._np not in (None, False)  # from 768 MiB counted on


def test_auto_scans_a_small_log_with_re_and_a_big_one_with_hyperscan(monkeypatch):
    # Compiling the hyperscan database costs more than `re` spends on a log under 1 MiB.
    import io

    pytest.importorskip("hyperscan")
    monkeypatch.setattr(prefilter, "_HS_DB", None)
    small = (EXAMPLES / "stale-max-model-len.log").read_bytes()
    expected = list(prefilter.scan_source(io.BytesIO(small), engine="re"))
    assert list(prefilter.scan_source(io.BytesIO(small), engine="auto")) == expected
    assert prefilter._HS_DB is None  # never compiled
    big = NOISE * 6000 + small  # over 1 MiB
    expected = list(prefilter.scan_source(io.BytesIO(big), engine="re"))
    assert list(prefilter.scan_source(io.BytesIO(big), engine="auto")) == expected
    assert prefilter._HS_DB  # compiled for it
    # A small read buffer: re until the stream has given 1 MiB, then hyperscan; the same lines.
    monkeypatch.setattr(prefilter, "_HS_DB", None)
    assert list(prefilter.scan_source(io.BytesIO(big), engine="auto", chunk_bytes=64 << 10)) == expected
    assert prefilter._HS_DB


LONG_PIECES = st.sampled_from(
    [
        b"\n", b"\r\n", b"\xff\xe2\x96", b"\xe2\x96\x88", b"ERROR x", b"Traceback (most recent call last):", b"plain ",
        b"Capturing CUDA graphs (FULL)", b"Capturing  CUDA graphs", b"y" * 70_000, b"z" * 65_530, b"NCCL", b"xt_n",
    ]
)


@pytest.mark.skipif("hyperscan" not in ENGINES, reason="hyperscan not installed")
@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(LONG_PIECES, max_size=40), dense=st.booleans(), chunk=st.sampled_from([4096, 1 << 20]))
def test_hyperscan_lines_one_by_one_or_with_numpy_equal_re(pieces, dense, chunk):
    # Matches before and beyond the 64 KiB line cap, split UTF-8, CR LF, a last line without newline.
    import io

    pytest.importorskip("numpy")
    data = b"".join(pieces)
    expected_count: list[int] = []
    expected = list(prefilter.scan_source(io.BytesIO(data), engine="re", chunk_bytes=chunk, line_count=expected_count))
    old = prefilter._DENSE_BYTES, prefilter._dense_seen
    prefilter._DENSE_BYTES = 1 << 40 if dense else 0  # every span found with numpy / none
    prefilter._dense_seen = prefilter._DENSE_AFTER_LINES  # numpy pays
    try:
        count: list[int] = []
        got = list(prefilter.scan_source(io.BytesIO(data), engine="hyperscan", chunk_bytes=chunk, line_count=count))
    finally:
        prefilter._DENSE_BYTES, prefilter._dense_seen = old
    assert got == expected
    assert count == expected_count


def test_the_compiled_hyperscan_database_is_kept_between_runs(tmp_path, monkeypatch):
    hyperscan = pytest.importorskip("hyperscan")
    import io

    monkeypatch.setenv(prefilter.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(prefilter, "_HS_DB", None)
    log = (EXAMPLES / "stale-max-model-len.log").read_bytes()
    expected = list(prefilter.scan_source(io.BytesIO(log), engine="re"))
    assert list(prefilter.scan_source(io.BytesIO(log), engine="hyperscan")) == expected  # compiles, saves
    (cached,) = (tmp_path / "cache").iterdir()
    monkeypatch.setattr(prefilter, "_HS_DB", None)

    def no_compile(*_a, **_k):
        raise AssertionError("compiled although a cached database was there")

    with monkeypatch.context() as m:
        m.setattr(hyperscan, "Database", no_compile)
        assert list(prefilter.scan_source(io.BytesIO(log), engine="hyperscan")) == expected  # loaded
    # A damaged file (or one from another build or CPU) is replaced; an unwritable place is only slower.
    cached.write_bytes(b"not a database")
    monkeypatch.setattr(prefilter, "_HS_DB", None)
    assert list(prefilter.scan_source(io.BytesIO(log), engine="hyperscan")) == expected
    assert cached.read_bytes() != b"not a database"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(prefilter.CACHE_ENV, str(blocker / "cache"))
    monkeypatch.setattr(prefilter, "_HS_DB", None)
    assert list(prefilter.scan_source(io.BytesIO(log), engine="hyperscan")) == expected


def test_the_bar_moves_with_each_chunk(tmp_path, monkeypatch):
    # Nothing selected: the bar still moves as this process scans its chunks, and at each of a child's.
    monkeypatch.setattr(parallel, "CLAIM_BYTES", 1 << 20)
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("fork"))
    path = tmp_path / "p.log"
    path.write_bytes(NOISE * 60_000)  # ~11 MB: 11 chunks
    seen = _reports(path, workers=2, chunk_bytes=1 << 20)
    assert seen == sorted(set(seen)) and seen[-1] == path.stat().st_size
    assert len(seen) >= 11


def _mixed_log() -> bytes:
    return b"".join(_padded(p.read_bytes(), 40) for p in LOGS)


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_many_chunks_claimed_from_both_ends_give_the_sequential_lines(tmp_path, monkeypatch, workers):
    monkeypatch.setattr(parallel, "CLAIM_BYTES", 4096)  # hundreds of chunks: every process claims many
    path = tmp_path / "m.log"
    path.write_bytes(_mixed_log())
    with open(path, "rb") as f:
        want = list(prefilter.scan_source(f))
    count: list[int] = []
    assert list(parallel.scan_file_parallel(path, workers=workers, line_count=count)) == want
    assert count == [path.read_bytes().count(b"\n") + (not path.read_bytes().endswith(b"\n"))]


def test_a_child_that_holds_enough_claims_no_more_and_this_process_scans_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "CLAIM_BYTES", 4096)
    monkeypatch.setattr(parallel, "HELD_BYTES", 1)  # a child stops after its first chunk with a line in it
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("fork"))
    path = tmp_path / "h.log"
    path.write_bytes(_mixed_log())
    with open(path, "rb") as f:
        want = list(prefilter.scan_source(f))
    claims: list[tuple[bool, int | None]] = []
    real = parallel._claim

    def claim(shared, back):
        i = real(shared, back)
        claims.append((back, i))  # this process's claims only: a child's list is its own copy
        return i

    monkeypatch.setattr(parallel, "_claim", claim)
    assert list(parallel.scan_file_parallel(path, workers=2)) == want
    chunks = -(-path.stat().st_size // 4096)
    assert len([i for back, i in claims if not back and i is not None]) >= chunks // 2  # this process did most


@pytest.mark.parametrize("late", ["parent", "child"])
def test_whoever_starts_late_the_lines_are_the_sequential_ones(tmp_path, monkeypatch, late):
    import time

    monkeypatch.setattr(parallel, "CLAIM_BYTES", 4096)
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("fork"))
    path = tmp_path / "l.log"
    path.write_bytes(_mixed_log())
    with open(path, "rb") as f:
        want = list(prefilter.scan_source(f))
    real = parallel._claim
    slept = [False]

    def claim(shared, back):
        if back == (late == "child") and not slept[0]:
            slept[0] = True
            time.sleep(0.5)
        return real(shared, back)

    monkeypatch.setattr(parallel, "_claim", claim)
    assert list(parallel.scan_file_parallel(path, workers=2)) == want


def test_numpy_finds_dense_lines_only_after_many_of_them(monkeypatch):
    import io

    pytest.importorskip("hyperscan")
    pytest.importorskip("numpy")
    monkeypatch.setattr(prefilter, "_np", None)
    monkeypatch.setattr(prefilter, "_dense_seen", 0)
    startup = (EXAMPLES / "healthy.log").read_bytes()  # dense, but a few dozen lines
    list(prefilter.scan_source(io.BytesIO(startup), engine="hyperscan"))
    assert prefilter._np is None and 0 < prefilter._dense_seen < prefilter._DENSE_AFTER_LINES
    errors = b"ERROR boom\n" * (prefilter._DENSE_AFTER_LINES * 2)
    expected = list(prefilter.scan_source(io.BytesIO(errors), engine="re"))
    assert list(prefilter.scan_source(io.BytesIO(errors), engine="hyperscan", chunk_bytes=64 << 10)) == expected
    assert prefilter._np not in (None, False)  # imported once they were many


def _reference_selection(data: bytes) -> list[tuple[int, str]]:
    """Every line, decoded and capped, kept when `line_matches` says so: what any engine must select."""
    from dsv4ctl.logs.reader import MAX_LINE_BYTES, decode

    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for i, line in enumerate(lines, start=1):
        raw = decode(line[:MAX_LINE_BYTES])
        if prefilter.line_matches(raw):
            out.append((i, raw))
    return out


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(LONG_PIECES, max_size=40), engine=st.sampled_from(ENGINES))
def test_every_engine_selects_what_line_matches_selects(pieces, engine):
    # Lines not searched again (their match lies within the cap) must be exactly the lines line_matches keeps.
    import io

    data = b"".join(pieces)
    assert list(prefilter.scan_source(io.BytesIO(data), engine=engine, chunk_bytes=1 << 20)) == _reference_selection(data)


def test_a_span_is_tagged_as_its_lines_are_one_by_one():
    """The scanners tag a read's selected lines at once (`LineSorter.sort_span`: one hyperscan pass, `re` on the
    lines it may match); each must get the kind `re` gives it alone."""
    from dsv4ctl.diagnosis import analyzer as core
    from dsv4ctl.logs.reader import MAX_LINE_BYTES, decode

    if not prefilter.hyperscan_available():
        pytest.skip("hyperscan not installed")
    paths = sorted(FIXTURES.glob("*.log")) + sorted((FIXTURES / "catalogue").glob("*.log")) + sorted(EXAMPLES.glob("*.log"))
    data = b"".join(p.read_bytes() for p in paths)
    starts, ends, raws, pos = [], [], [], 0
    for line in data.split(b"\n")[:-1]:
        starts.append(pos)
        ends.append(pos + min(len(line), MAX_LINE_BYTES))
        raws.append(decode(line[:MAX_LINE_BYTES]))
        pos += len(line) + 1
    sorter = core.SERVING_SORTER
    import numpy as np

    kinds = sorter.sort_span(data, 0, len(data), np.array(starts), np.array(ends)).tolist()
    assert kinds == [sorter.exact(raw) for raw in raws]
    assert core.LineSorter.ALERT in kinds and any(core.LineSorter.is_request(k) for k in kinds)


def test_lines_a_child_left_out_are_read_again_where_the_start_is_not_quiet(tmp_path, monkeypatch):
    """A child sends a long run of lines that cannot wake a quietly serving start as a gap (their last 256 kept).
    Where the start was not serving quietly there after all (still starting, its ready line inside the run),
    diagnose reads the gap's lines again from the file: the diagnosis is the sequential one."""
    from dsv4ctl.logs import prefilter as pf

    monkeypatch.setattr(pf, "_DENSE_AFTER_LINES", 0)  # tag spans at once from the first one
    example = (EXAMPLES / "healthy.log").read_bytes()
    cut = example.index(b"(EngineCore pid=7790) INFO 10-21 09:03:39 [core.py:396] init engine")
    head, ready = example[:cut], example[cut:]  # ready: the engine's "init engine … took", then the server's lines
    progress = b"(EngineCore pid=7790) INFO 10-21 09:03:30 [gpu_worker.py:456] Available KV cache memory: 9.81 GiB\n"
    path = tmp_path / "gaps.log"
    path.write_bytes(head + progress * 60000 + ready + progress * 60000)
    calls: list[int] = []
    real = parallel.rereader

    def counting(*args):
        inner = real(*args)

        def reread(base, gap):
            calls.append(gap.count)
            return inner(base, gap)

        return reread

    monkeypatch.setattr(parallel, "rereader", counting)
    sequential = _json(path, workers=1)
    assert _json(path, workers=2, parallel_min_bytes=1) == sequential
    assert json.loads(sequential)["lines_selected"] > 120000
    assert calls and sum(calls) > 1000  # the gaps before the ready line were read again


def test_idle_work_runs_once_while_the_children_scan_and_changes_no_line(tmp_path, monkeypatch):
    """`idle` is the caller's work done while the children scan: called once, after they started and before this
    process claims its first chunk; the lines are the sequential scan's; a scan in one process never calls it."""
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("fork"))
    path = tmp_path / "p.log"
    path.write_bytes((NOISE * 20_000) + (EXAMPLES / "stale-max-model-len.log").read_bytes() + NOISE * 20_000)
    want = list(prefilter.scan_source(open(path, "rb")))
    events: list[str] = []
    real = parallel._claim

    def claim(shared, back):
        events.append("claim")
        return real(shared, back)

    monkeypatch.setattr(parallel, "_claim", claim)
    got = [(base + n, raw) for base, batch in parallel.scan_file_batches(path, workers=2, idle=lambda: events.append("idle"))
           for n, raw in batch.lines]
    assert got == want and events.count("idle") == 1 and events[0] == "idle"
    events.clear()
    list(parallel.scan_file_batches(path, workers=1, idle=lambda: events.append("idle")))
    assert events == []


def test_a_cached_database_that_finds_the_wrong_lines_is_compiled_again_and_replaced(tmp_path, monkeypatch):
    hyperscan = pytest.importorskip("hyperscan")
    import io

    monkeypatch.setenv(prefilter.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(prefilter, "_HS_DB", None)
    log = (EXAMPLES / "stale-max-model-len.log").read_bytes()
    expected = list(prefilter.scan_source(io.BytesIO(log), engine="re"))
    assert list(prefilter.scan_source(io.BytesIO(log), engine="hyperscan")) == expected
    (cached,) = tmp_path.glob("prefilter-*.hsdb")
    other = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    other.compile(expressions=[b"nothing of ours"], ids=[0], elements=1, flags=[0])
    cached.write_bytes(hyperscan.dumpb(other))  # loads fine, finds nothing it should
    monkeypatch.setattr(prefilter, "_HS_DB", None)
    assert list(prefilter.scan_source(io.BytesIO(log), engine="hyperscan")) == expected
    assert cached.read_bytes() != hyperscan.dumpb(other)


def _fork(monkeypatch):
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("fork"))


def test_a_prestarted_scan_is_adopted_and_gives_the_sequential_lines(tmp_path, monkeypatch):
    _fork(monkeypatch)
    monkeypatch.setattr(parallel, "CLAIM_BYTES", 4096)
    path = tmp_path / "early.log"
    path.write_bytes(_mixed_log())
    with open(path, "rb") as f:
        want = list(prefilter.scan_source(f))
    assert parallel.prestart(str(path), workers=2, min_bytes=1)
    (early,) = parallel._EARLY.values()
    children = [proc for proc, _ in early[2]]
    started: list[int] = []
    real = parallel._start_scanners
    monkeypatch.setattr(parallel, "_start_scanners", lambda *a: started.append(1) or real(*a))
    assert list(parallel.scan_file_parallel(str(path), workers=2)) == want
    assert started == [] and parallel._EARLY == {}  # the prestarted children did the work, nobody else
    assert all(not proc.is_alive() for proc in children)


def test_a_prestarted_scan_with_other_settings_is_not_adopted_and_ends_with_end_scanners(tmp_path, monkeypatch):
    _fork(monkeypatch)
    path = tmp_path / "early.log"
    path.write_bytes(_mixed_log())
    with open(path, "rb") as f:
        want = list(prefilter.scan_source(f))
    assert parallel.prestart(str(path), workers=2, min_bytes=1, hold=8)
    (early,) = parallel._EARLY.values()
    assert list(parallel.scan_file_parallel(str(path), workers=2)) == want  # its own scan: no hold
    assert len(parallel._EARLY) == 1
    parallel.end_scanners()
    assert parallel._EARLY == {} and all(not proc.is_alive() for proc, _ in early[2])


def test_a_log_cut_short_since_its_prestart_is_scanned_afresh(tmp_path, monkeypatch):
    _fork(monkeypatch)
    path = tmp_path / "early.log"
    data = _mixed_log()
    path.write_bytes(data)
    assert parallel.prestart(str(path), workers=2, min_bytes=1)
    (early,) = parallel._EARLY.values()
    with open(path, "r+b") as f:  # the same file (inode), shorter: log rotation by truncation
        f.truncate(len(data) // 3)
    with open(path, "rb") as f:
        want = list(prefilter.scan_source(f))
    assert list(parallel.scan_file_parallel(str(path), workers=2)) == want
    assert parallel._EARLY == {} and all(not proc.is_alive() for proc, _ in early[2])


def test_no_prestart_where_the_scan_would_not_be_parallel(tmp_path, monkeypatch):
    _fork(monkeypatch)
    path = tmp_path / "small.log"
    path.write_bytes(_mixed_log())
    assert not parallel.prestart(str(path), workers=2)  # below PARALLEL_MIN_BYTES
    assert not parallel.prestart(str(path), workers=1, min_bytes=1)
    assert not parallel.prestart("-", workers=2, min_bytes=1)
    gz = tmp_path / "l.log.gz"
    gz.write_bytes(gzip.compress(_mixed_log()))
    assert not parallel.prestart(str(gz), workers=2, min_bytes=1)
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("spawn"))
    assert not parallel.prestart(str(path), workers=2, min_bytes=1)
    assert parallel._EARLY == {}
