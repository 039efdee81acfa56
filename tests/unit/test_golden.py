"""The JSON of every fixture, paste and example (diagnose) and of a set of fit-length requests equals the recorded
contract (tests/data/golden.json.gz, written by scripts/golden.py): a change of structure leaves every output
equal; a change of behaviour rewrites the contract with `scripts/golden.py --write` in the same commit."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "golden.py"


def _golden():
    spec = importlib.util.spec_from_file_location("golden", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_output_equals_the_recorded_contract(monkeypatch):
    golden = _golden()
    monkeypatch.chdir(golden.ROOT)
    want, got = golden.load(), golden.record()
    assert len(want) >= 230
    diff = golden.differences(want, got)
    assert not diff, "\n".join(diff[:20]) + "\n(scripts/golden.py --write records a deliberate change)"
