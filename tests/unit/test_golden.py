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


def test_no_output_shows_a_placeholder_it_could_not_fill():
    """A title, meaning, action or summary a person reads never carries `{placeholder}` text: what the log cannot
    fill is left out or said without it (the recorded outputs, every fixture, paste and example)."""
    import re

    placeholder = re.compile(r"\{[a-z_][a-z0-9_]*\}")
    bad: list[str] = []

    def walk(where: str, value: object, key: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(where, v, k)
        elif isinstance(value, list):
            for v in value:
                walk(where, v, key)
        elif isinstance(value, str) and key in ("title", "meaning", "actions", "summary", "why", "line") and \
                placeholder.search(value):
            bad.append(f"{where}: {key}: {value[:120]}")

    for name, output in _golden().load().items():
        walk(name, output.get("json") if isinstance(output, dict) else output)
    assert not bad, "\n".join(bad[:20])
