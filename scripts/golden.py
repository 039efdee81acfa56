#!/usr/bin/env python3
"""The JSON dsv4ctl prints for every fixture and example, kept as a contract (tests/data/golden.json.gz).

    .venv/bin/python scripts/golden.py           # compare: exit 1 and list what differs
    .venv/bin/python scripts/golden.py --write   # record the current output as the contract

What is recorded, each through the CLI exactly as an operator runs it (`--json`, exit code too):
- `diagnose --json` of every log under tests/fixtures/logs (catalogue included), tests/fixtures/pastes and
  dsv4ctl/examples;
- `fit-length --json` for the requests of `FIT_CASES` (models, memories, versions, snapshots, refusals).

A change of structure must leave it equal (tests/unit/test_golden.py); a change of behaviour rewrites it with
`--write`, in the same commit, so the diff shows what changed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden.json.gz"
FLASH = "deepseek-ai/DeepSeek-V4-Flash"
PRO = "deepseek-ai/DeepSeek-V4-Pro"
SNAPSHOT = "tests/fixtures/gpus/h200-snapshot.json"

FIT_CASES: tuple[tuple[str, ...], ...] = (
    (FLASH, "--kv-cache-memory", "9.81GiB"),
    (FLASH, "--kv-cache-memory", "9.81GiB", "--vllm-version", "0.30.0"),
    (FLASH, "--kv-cache-memory", "7.01GiB", "-tp", "2", "--kv-cache-dtype", "fp8", "--vllm-version", "0.27.1"),
    (FLASH, "--kv-cache-memory", "90GiB", "--max-model-len", "2M"),
    (FLASH, "--kv-cache-memory", "4MiB"),
    (FLASH, "--kv-cache-memory", "24GiB", "--margin", "10%", "--max-num-batched-tokens", "2048"),
    (FLASH, "--kv-cache-memory", "24GiB", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'),
    (PRO, "--kv-cache-memory", "20GiB"),
    (PRO, "--kv-cache-memory", "60GiB", "--vllm-version", "0.33.0", "-tp", "8"),
    (FLASH, "--gpus", SNAPSHOT, "--weights-memory", "20GiB"),
    (FLASH, "--gpus", SNAPSHOT),
    (PRO, "--gpus", SNAPSHOT, "--weights-memory", "110GiB", "--gpu-memory-utilization", "0.85"),
    (PRO, "-tp", "8", "--gpus", SNAPSHOT, "--weights-memory", "110GiB"),
    (FLASH, "--from-log", "dsv4ctl/examples/stale-max-model-len.log"),
    (FLASH, "--from-log", "dsv4ctl/examples/healthy.log"),
)


_STATE = "/nonexistent/dsv4ctl-golden-state"  # no calibration record of this machine's runs
# No hub and no cache of this machine: a model id plans from its built-in preset, never from the network.
_HERMETIC = {"HF_HUB_OFFLINE": "1", "DSV4CTL_CACHE_DIR": "/nonexistent/dsv4ctl-golden-cache",
             "HF_HUB_CACHE": "/nonexistent/dsv4ctl-golden-hf-hub"}


def _logs() -> list[Path]:
    out = sorted((ROOT / "tests/fixtures/logs").glob("*.log"))
    out += sorted((ROOT / "tests/fixtures/logs/catalogue").glob("*.log"))
    out += sorted((ROOT / "tests/fixtures/pastes").glob("*.log"))
    out += sorted((ROOT / "dsv4ctl/examples").glob("*.log"))
    return out


def _run(argv: list[str]) -> dict:
    """One CLI run in this process (as tests/conftest.py's `cli` does): exit code and parsed stdout."""
    from typer.testing import CliRunner

    from dsv4ctl.cli import app
    from dsv4ctl.planning.plan.calibration import STATE_DIR_ENV

    result = CliRunner().invoke(app, argv, env={"COLUMNS": "120", "NO_COLOR": "1", STATE_DIR_ENV: _STATE, **_HERMETIC})
    try:
        out = json.loads(result.stdout)
    except ValueError:
        out = {"stdout": result.stdout}
    return {"exit_code": result.exit_code, "json": out}


def record() -> dict[str, dict]:
    os.chdir(ROOT)  # paths in the output are the relative ones given
    data: dict[str, dict] = {}
    for path in _logs():
        rel = str(path.relative_to(ROOT))
        data["diagnose " + rel] = _run(["diagnose", rel, "--json"])
    for case in FIT_CASES:
        data["fit-length " + " ".join(case)] = _run(["fit-length", *case, "--json"])
    return data


def load() -> dict[str, dict]:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        return json.load(f)


def differences(want: dict[str, dict], got: dict[str, dict]) -> list[str]:
    out = [f"missing: {k}" for k in want if k not in got] + [f"new: {k}" for k in got if k not in want]
    out += [f"differs: {k}" for k in want if k in got and want[k] != got[k]]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the current output as the contract")
    args = parser.parse_args(argv)
    got = record()
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(GOLDEN, "wt", encoding="utf-8", compresslevel=9) as f:
            json.dump(got, f, sort_keys=True, separators=(",", ":"))
        print(f"{GOLDEN.relative_to(ROOT)}: {len(got)} outputs", file=sys.stderr)
        return 0
    diff = differences(load(), got)
    for line in diff:
        print(line)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
