"""serve's memory of its good starts (serve/memory.py) and a failed start against the last good one (serve/recall.py):
keyed by the launch, bounded, a cache that cannot be written or read only a warning; the failure path picks the newest
good start of the same launch whose log is still its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from dsv4ctl.serve import memory
from dsv4ctl.serve.memory import Launch, launch_of, last_good, load, remember
from dsv4ctl.serve.recall import against_last_good

REPO = Path(__file__).resolve().parents[2]
GOOD = REPO / "tests/fixtures/diff/stale-good.log"
BAD = REPO / "dsv4ctl/examples/stale-max-model-len.log"


def _ns(**kw) -> SimpleNamespace:
    base = {"model": "deepseek-ai/DeepSeek-V4-Flash", "tensor_parallel_size": 8, "pipeline_parallel_size": 1,
            "data_parallel_size": 1, "max_model_len": None, "port": 8000}
    return SimpleNamespace(**{**base, **kw})


def _log(tmp_path: Path, name: str, text: str = "INFO vllm start\n") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_key_is_the_model_and_its_layout_not_the_knobs():
    base = launch_of(_ns())
    assert launch_of(_ns(max_model_len=1_048_576, port=9000, kv_cache_memory_bytes="64M")).key == base.key
    assert launch_of(_ns(tensor_parallel_size=4)).key != base.key
    assert launch_of(_ns(model="other")).key != base.key
    assert base.fields["model"] == "deepseek-ai/DeepSeek-V4-Flash" and set(base.fields) == set(memory.KEY_FIELDS)


def test_bounded_per_launch_and_overall(tmp_path, monkeypatch):
    store = tmp_path / "cache" / memory.FILE
    a, b = Launch("a" * 16, {"model": "a"}), Launch("b" * 16, {"model": "b"})
    logs = [_log(tmp_path, f"a{i}.log") for i in range(memory.PER_LAUNCH + 2)]
    for i, log in enumerate(logs):
        assert remember(a, log, store, now=1000 + i) == []
    entries, warnings = load(store)
    assert warnings == [] and [e.log_file for e in entries] == [str(p) for p in logs[-memory.PER_LAUNCH:]]
    doc = json.loads(store.read_text())
    assert doc["schema_version"] == 1 and doc["per_launch"] == memory.PER_LAUNCH

    monkeypatch.setattr(memory, "OVERALL", 3)
    remember(b, _log(tmp_path, "b0.log"), store, now=2000)
    entries, _ = load(store)
    assert len(entries) == 3 and entries[-1].key == b.key  # the oldest of all removed
    remember(b, tmp_path / "b0.log", store, now=2001)  # the same log again: one entry, the newest
    assert [e.log_file for e in load(store)[0]].count(str(tmp_path / "b0.log")) == 1


def test_an_unwritable_cache_is_a_warning(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would be")
    warnings = remember(launch_of(_ns()), _log(tmp_path, "g.log"), blocker / memory.FILE)
    assert len(warnings) == 1 and warnings[0].startswith("serve cannot remember this good start: cannot write")
    assert remember(launch_of(_ns()), tmp_path / "gone.log", tmp_path / "m.json")[0].endswith("cannot be read")
    assert "no cache directory" in remember(launch_of(_ns()), _log(tmp_path, "g.log"), None)[0]


def test_a_corrupt_memory_is_ignored_with_a_warning_and_written_anew(tmp_path):
    store = tmp_path / "good-starts.json"
    store.write_text("{not json")
    entries, warnings = load(store)
    assert entries == [] and "cannot be read" in warnings[0] and "ignored" in warnings[0]
    store.write_text(json.dumps({"schema_version": 99, "starts": []}))
    assert "not schema_version 1" in load(store)[1][0]
    store.write_text(json.dumps({"schema_version": 1, "starts": [{"key": "x"}]}))
    assert load(store) == ([], [f"serve's memory of good starts {store}: 1 malformed entry ignored"])
    warnings = remember(launch_of(_ns()), _log(tmp_path, "g.log"), store)
    assert warnings and len(load(store)[0]) == 1  # the good start kept, the bad entry gone


def test_last_good_is_the_newest_of_the_launch_whose_log_is_still_its_own(tmp_path):
    store = tmp_path / "m.json"
    mine, other = launch_of(_ns()), launch_of(_ns(model="other"))
    old, gone, rewritten = _log(tmp_path, "old.log"), _log(tmp_path, "gone.log"), _log(tmp_path, "rewritten.log")
    this = _log(tmp_path, "this.log")
    for n, (launch, log) in enumerate([(mine, old), (mine, gone), (mine, rewritten), (mine, this),
                                       (other, _log(tmp_path, "other.log"))]):
        remember(launch, log, store, now=1000 + n)
    gone.unlink()
    rewritten.write_text("INFO a later start wrote over it\n")
    this.write_text("INFO this start, with --log-file this.log again\n")
    good, notes = last_good(mine, this, store)
    assert good is not None and good.log_file == str(old)
    assert len(notes) == 3 and "wrote the log this start wrote over" in notes[0]
    assert "written over since" in notes[1] and "is gone" in notes[2]
    assert last_good(launch_of(_ns(model="new")), this, store) == (None, [])


def test_the_seeds_pair_through_serves_comparison(tmp_path):
    store = tmp_path / "m.json"
    good = tmp_path / "good.log"
    shutil.copy(GOOD, good)
    launch = launch_of(_ns())
    remember(launch, good, store, now=1000)
    remember(launch_of(_ns(tensor_parallel_size=4)), _log(tmp_path, "tp4.log"), store, now=2000)  # another launch
    last = against_last_good(launch, BAD, store)
    assert last.good is not None and last.good.log_file == str(good)
    assert last.differences and last.differences[0].name == "auto-fit"
    assert "stale-length assertion" in last.differences[0].bearing
    assert len(last.differences) <= 3 <= last.total
    doc = json.loads(json.dumps(last.to_json()))
    assert doc["schema_version"] == 1 and doc["good"]["log_file"] == str(good)
    first = doc["differences"][0]
    assert first["bad"]["line"] and first["good_shown"] and doc["diff_command"] == f"dsv4ctl diff {good} {BAD}"

    junk = tmp_path / "junk.log"  # a good start whose log is, since, not a vLLM log at all
    junk.write_bytes(b"\x00\x01binary")
    remember(launch_of(_ns(model="j")), junk, store)
    failed = against_last_good(launch_of(_ns(model="j")), BAD, store)
    assert failed.differences is None and "could not be compared" in failed.notes[-1]

    none = against_last_good(launch_of(_ns(model="never-started")), BAD, store)
    assert none.differences is None and none.notes == ["no good start of this launch is remembered"]


def test_the_report_names_each_difference_with_its_lines(tmp_path, capsys):
    from dsv4ctl.render.serve import render_last_good

    store, good = tmp_path / "m.json", tmp_path / "good.log"
    shutil.copy(GOOD, good)
    remember(launch_of(_ns()), good, store)
    render_last_good(against_last_good(launch_of(_ns()), BAD, store))
    err = capsys.readouterr().err
    assert "Against the last good start of this launch" in err and " 1. auto-fit " in err
    assert "(line " in err and f"the whole comparison: dsv4ctl diff {good} {BAD}" in err
    render_last_good(against_last_good(launch_of(_ns(model="x")), BAD, store))
    assert capsys.readouterr().err.strip() == "Against the last good start: no good start of this launch is remembered"


DRIVER = """
import json, os, sys
from pathlib import Path
from types import SimpleNamespace
from dsv4ctl.serve import command, vllm_entry
from dsv4ctl.render.serve import ServeConsole

log_file, replay, status = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
ns = SimpleNamespace(model="tiny", tensor_parallel_size=1, max_model_len=int(sys.argv[4]), enforce_eager=False)
decision = SimpleNamespace(action="pass", plan=None, flags=[], notes=[], refusal=None, model="tiny",
                           requested_text=sys.argv[4], reason="not planned (test)", basis=None)
vllm_entry.parse_serve_flags = lambda flags: ns
command.decide = lambda *a, **k: decision

def launch():
    os.write(2, replay.read_bytes())
    return status

vllm_entry.run_vllm_serve = lambda flags: launch()
result = command.run(["tiny"], command.ServeOptions(log_file=log_file), ServeConsole(live=False), log_file)
print(json.dumps(result.last_good.to_json() if result.last_good else None))
"""


def test_serve_remembers_at_ready_and_a_failure_is_compared_with_it(tmp_path):
    """The session's ready hook and the failure path of `serve.command.run`, with a launch that replays a log (no
    vLLM): the good start is remembered when its ready line is read, the failed one compared with it."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER))
    env = {**os.environ, "PYTHONPATH": str(REPO), "DSV4CTL_CACHE_DIR": str(tmp_path / "cache")}

    def serve(name: str, replay: Path, status: int, length: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script), str(tmp_path / name), str(replay), str(status), str(length)],
                              capture_output=True, text=True, cwd=REPO, env=env, timeout=120)

    good = serve("good.log", GOOD, 0, 4096)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout.splitlines()[-1]) is None  # not failed: nothing compared
    entries, warnings = load(tmp_path / "cache" / memory.FILE)
    assert warnings == [] and [e.log_file for e in entries] == [str(tmp_path / "good.log")]

    bad = serve("bad.log", BAD, 1, 1_048_576)  # another length: the same launch
    assert bad.returncode == 0, bad.stderr
    doc = json.loads(bad.stdout.splitlines()[-1])
    assert doc["good"]["log_file"] == str(tmp_path / "good.log") and doc["differences"][0]["name"] == "auto-fit"
    assert len(load(tmp_path / "cache" / memory.FILE)[0]) == 1  # the failed start is not remembered


def test_a_memory_that_cannot_be_written_does_not_fail_serve(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER))
    blocker = tmp_path / "cache"
    blocker.write_text("a file")
    env = {**os.environ, "PYTHONPATH": str(REPO), "DSV4CTL_CACHE_DIR": str(blocker)}
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "g.log"), str(GOOD), "0", "4096"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "dsv4ctl serve: warning: serve cannot remember this good start: cannot write" in run.stderr


@pytest.fixture(autouse=True)
def _no_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("DSV4CTL_CACHE_DIR", str(tmp_path / "user-cache"))
