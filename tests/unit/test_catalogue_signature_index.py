"""The signature index narrows the catalogue without losing a match: on every line of every fixture, paste and
real excerpt, each signature that matches the message is among the candidates, with and without the literal
gate built; the required text it gates on is what Python's own regex parser says a pattern needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsv4ctl.catalogue.signature_index import SignatureIndex, required_literals
from dsv4ctl.catalogue.signatures import CATALOGUE
from dsv4ctl.logs.reader import iter_log_lines

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "real-logs" / "logs"


def _logs() -> list[Path]:
    found = sorted((ROOT / "tests" / "fixtures").rglob("*.log")) + sorted((ROOT / "tests" / "fixtures").rglob("*.txt"))
    return found + (sorted(REAL.glob("*.log")) if REAL.is_dir() else [])


def test_every_match_is_a_candidate():
    index = SignatureIndex(CATALOGUE)
    checked = matched = 0
    for path in _logs():
        for line in iter_log_lines(path):
            msg = line.message
            want = {s.id for s in CATALOGUE if s.match(msg)}
            got = {s.id for s in index.candidates(msg)}
            assert want <= got, (path.name, line.lineno, msg, want - got)
            checked += 1
            matched += bool(want)
    assert checked > 5000 and matched > 300


def test_the_gate_passes_few_lines_of_a_healthy_log():
    index = SignatureIndex(CATALOGUE)
    lines = [ln.message for ln in iter_log_lines(ROOT / "dsv4ctl" / "examples" / "healthy.log")]
    tried = sum(len(index.candidates(m)) for m in lines)
    assert tried < 0.1 * len(lines) * len(CATALOGUE)


@pytest.mark.parametrize("pattern, runs", [
    (r"CUDA error: (?P<what>[^.]+)", (("CUDA error: ",),)),
    (r"No available memory for the cache blocks|Cannot auto-fit max_model_len", (
        ("No available memory for the cache blocks",), ("Cannot auto-fit max_model_len",))),
    (r"reduced from \d+ to \d+", (("reduced from ", " to "),)),
    (r"colou?r map", (("r map", "colo"),)),  # the optional "u" splits the run
    (r"(?i)killed process", ((),)),  # case ignored: nothing is required literally
])
def test_required_literals(pattern, runs):
    assert required_literals(pattern) == runs


def test_an_ignore_case_pattern_is_tried_on_every_line():
    from dsv4ctl.catalogue.signature import Signature

    sig = Signature(id="x", severity="critical", title="t", meaning="m", patterns=(r"(?i)out of memory",), actions=())
    index = SignatureIndex((sig,))
    assert index.candidates("OUT OF MEMORY") == [sig] and sig.match("OUT OF MEMORY")
    assert index.candidates("nothing here") == [sig]


def test_the_sorters_and_the_index_databases_are_kept_between_runs(tmp_path, monkeypatch):
    """Each scanning process used to compile the serving sorter's and the index's hyperscan databases (~0.1 s
    each); the second asks hyperscan to compile nothing, and finds what the first found."""
    hyperscan = pytest.importorskip("hyperscan")
    from dsv4ctl.catalogue.signatures import CATALOGUE
    from dsv4ctl.diagnosis.run import SERVING_SORTER

    monkeypatch.setenv("DSV4CTL_CACHE_DIR", str(tmp_path))
    line = "(APIServer pid=1) ERROR 10-21 09:00:00 [serving.py:1] Error in chat completion stream generator."
    first = (SERVING_SORTER._compile(), SERVING_SORTER._compile(single=False), SignatureIndex(CATALOGUE)._compile())
    assert all(first) and len(list(tmp_path.glob("*.hsdb"))) == 3

    def no_compile(*_a, **_k):
        raise AssertionError("compiled although a cached database was there")

    monkeypatch.setattr(hyperscan, "Database", no_compile)
    again = (SERVING_SORTER._compile(), SERVING_SORTER._compile(single=False), SignatureIndex(CATALOGUE)._compile())
    for a, b in zip(first, again):
        hits_a, hits_b = [], []
        a.scan(line.encode(), match_event_handler=lambda i, *_: hits_a.append(i))
        b.scan(line.encode(), match_event_handler=lambda i, *_: hits_b.append(i))
        assert hits_a == hits_b
