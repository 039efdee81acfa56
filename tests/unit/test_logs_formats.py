"""Shipped log formats (dsv4ctl/logs/formats.py), told from a file's first bytes: each fixture of
tests/fixtures/logs/formats (real vLLM logs as python-json-logger, Docker's json-file, CRI, Loki, Grafana and
Datadog write them; generate.py) is diagnosed as the plain log it wraps, and the joins, orders and fall-backs
of each format hold."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from dsv4ctl.advice import diagnose
from dsv4ctl.logs import formats
from dsv4ctl.logs.reader import iter_log_lines

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "logs"
FORMATS = LOGS / "formats"
SOURCES = {"cuda_oom_load": LOGS / "cuda_oom_load.log", "deepgemm_arch": LOGS / "deepgemm_unsupported_arch.log",
           "tp_heads": LOGS / "catalogue" / "vllm_tp_heads_not_divisible.log"}
SHAPES = ("json_records", "json_records_pretty", "docker_json", "cri", "loki", "grafana", "datadog")


def _summary(path) -> tuple:
    d = diagnose([path])
    rc = d.root_cause
    return d.verdict, d.phase, rc.id if rc else None, rc.evidence[0].text if rc and rc.evidence else None


def _fixtures() -> list[Path]:
    return sorted(p for p in FORMATS.iterdir() if p.suffix in (".log", ".json", ".txt", ".csv"))


def test_every_shape_has_fixtures():
    names = {p.name.split("__")[0] for p in _fixtures()}
    assert names == set(SHAPES)
    assert len(_fixtures()) == len(SOURCES) * (len(SHAPES) + 2)  # grafana and datadog: two files each


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_a_wrapped_log_is_diagnosed_as_the_log_it_wraps(path):
    source = SOURCES[path.name.split("__")[1].split(".")[0]]
    assert formats.sniff(path.read_bytes()[: formats.SNIFF_BYTES]) is not None or path.name.startswith("cri__")
    assert _summary(path) == _summary(source)


def test_the_traceback_in_exc_info_is_read_as_records():
    lines = list(iter_log_lines(FORMATS / "json_records__deepgemm_arch.log"))
    header = [ln for ln in lines if ln.message.startswith("Traceback (most recent call last)")]
    assert header and all(ln.level == "ERROR" and ln.fileinfo == "multiproc_executor.py:1063" for ln in header[:1])
    assert header[0].process == "Worker_TP0" and header[0].pid == 5111 and header[0].timestamp == "10-21 09:03:20"
    frames = [ln for ln in lines if ln.message.startswith('File "') and ln.indent == 2]
    assert frames, "frame lines keep their indentation under the record's prefix"
    d = diagnose([FORMATS / "json_records__deepgemm_arch.log"])
    assert d.verdict == "failed" and d.root_cause.id == "deepgemm_unsupported_arch"


def _lines(data: bytes) -> list[str]:
    return [ln.message for ln in iter_log_lines(io.BytesIO(data))]


def test_exc_info_as_a_list_and_stack_info():
    # python-json-logger 4.2.0 pythonjsonlogger/core.py:413-416: exc_info_as_array gives str.splitlines()
    rec = {"asctime": "2026-01-21 08:28:33,853", "levelname": "ERROR", "name": "vllm.v1.engine.core",
           "filename": "core.py", "lineno": 1082, "message": "EngineCore failed to start.",
           "exc_info": ["Traceback (most recent call last):", '  File "/x/vllm/v1/engine/core.py", line 1073, in run',
                        "    raise ValueError(\"x\")", "ValueError: No available memory for the cache blocks."]}
    got = list(iter_log_lines(io.BytesIO((json.dumps(rec) + "\n").encode())))
    assert [ln.message for ln in got] == ["EngineCore failed to start.", "Traceback (most recent call last):",
                                          'File "/x/vllm/v1/engine/core.py", line 1073, in run', 'raise ValueError("x")',
                                          "ValueError: No available memory for the cache blocks."]
    assert {ln.level for ln in got} == {"ERROR"} and got[2].indent == 2 and got[3].indent == 4
    assert got[0].timestamp == "01-21 08:28:33" and got[0].fileinfo == "core.py:1082"
    stack = {"levelname": "WARNING", "name": "vllm", "message": "slow", "stack_info": "Stack (most recent call last):\n  x"}
    assert _lines((json.dumps(stack) + "\n").encode()) == ["slow", "Stack (most recent call last):", "x"]


def test_docker_json_file_joins_a_split_line():
    # Docker's json-file driver splits a line over 16 KiB into entries without a newline at the end of `log`.
    entries = [{"log": "a" * 16384, "stream": "stderr", "time": "2026-01-21T08:28:33.853123456Z"},
               {"log": "b" * 10 + "\n", "stream": "stderr", "time": "2026-01-21T08:28:33.853123457Z"},
               {"log": "next\n", "stream": "stdout", "time": "2026-01-21T08:28:34.000000000Z"}]
    data = "".join(json.dumps(e) + "\n" for e in entries).encode()
    assert formats.sniff(data) == "json-lines"
    got = list(iter_log_lines(io.BytesIO(data)))
    assert [ln.message for ln in got] == ["a" * 16384 + "b" * 10, "next"]


def test_cri_partial_lines_are_joined():
    data = (b"2026-01-21T08:28:33.853Z stderr P ValueError: To serve at least one request with the models's max seq\n"
            b"2026-01-21T08:28:33.853Z stderr F  len (1048576), (68.00 GiB KV cache is needed\n"
            b"2026-01-21T08:28:34.000Z stdout F INFO 01-21 08:28:34 [core.py:1] next\n")
    assert formats.sniff(data) == "cri"
    assert _lines(data) == ["ValueError: To serve at least one request with the models's max seq len (1048576), "
                            "(68.00 GiB KV cache is needed", "next"]


def test_loki_streams_are_merged_by_time():
    doc = {"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"pod": "vllm-0"}, "values": [["1768984113000000003", "c"], ["1768984113000000001", "a"]]},
        {"stream": {"pod": "vllm-1"}, "values": [["1768984113000000002", "b\n  indented"]]}]}}
    for text in (json.dumps(doc), json.dumps(doc, indent=2)):  # curl's one line, or pretty-printed
        assert _lines(text.encode()) == ["a", "b", "indented", "c"]
        got = list(iter_log_lines(io.BytesIO(text.encode())))
        assert got[2].indent == 2  # a continuation line keeps its indentation


def test_a_one_line_export_longer_than_the_head():
    doc = {"data": {"result": [{"stream": {}, "values": [[str(1768984113 * 10**9 + i), f"line {i} " + "x" * 200]
                                                         for i in range(2000)]}]}}
    data = json.dumps(doc).encode()
    assert len(data) > 4 * formats.SNIFF_BYTES and formats.sniff(data[: formats.SNIFF_BYTES]) == "json-document"
    got = _lines(data)
    assert len(got) == 2000 and got[0].startswith("line 0 ") and got[-1].startswith("line 1999 ")


def test_datadog_csv_keeps_a_multi_line_message():
    data = ('Date,Host,Service,Status,Message\n'
            '2026-01-21T08:28:34.000Z,node-1,vllm,error,"Traceback (most recent call last):\n'
            '  File ""/x/core.py"", line 1, in run\nValueError: boom"\n'
            '2026-01-21T08:28:33.000Z,node-1,vllm,info,INFO 01-21 08:28:33 [core.py:1] starting\n').encode()
    assert formats.sniff(data) == "csv"
    assert _lines(data) == ["starting", "Traceback (most recent call last):", 'File "/x/core.py", line 1, in run',
                            "ValueError: boom"]


@pytest.mark.parametrize("text", [
    '{"error": {"message": "The model `x` does not exist.", "type": "NotFoundError", "code": 404}}\n',
    "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"x.py\", line 1, in f\n",
    "[2025-08-05 09:34:54 TP0] Scheduler hit an exception\n",
    "INFO 01-21 08:28:33 [core.py:1] plain\n",
    "a,b,c\n1,2,3\n",
])
def test_plain_text_stays_plain(text):
    assert formats.sniff(text.encode()) is None


def test_gzip_and_streams_and_bad_input():
    plain = (FORMATS / "docker_json__tp_heads.log").read_bytes()
    assert _lines(gzip.compress(plain)) == _lines(plain)
    assert "Traceback (most recent call last):" in _lines(plain)
    # an unknown object inside JSON lines, a line that is not JSON, a truncated document: kept as text
    mixed = b'{"log": "x\\n", "stream": "stdout"}\n{"other": 1}\nnot json\n'
    assert _lines(mixed) == ["x", '{"other": 1}', "not json"]
    cut = b'{\n  "message": "EngineCore failed to start.",\n  "levelname": "ERROR",\n  "exc_in'
    assert formats.sniff(cut) == "json-document"
    assert _lines(cut)[0] == "{"
