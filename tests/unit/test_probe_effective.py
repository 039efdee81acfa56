"""Which DeepGEMM vLLM would import: an external `deep_gemm` package wins over vLLM's vendored copy
(as in vllm/utils/deep_gemm.py:_import_deep_gemm). Uses the real 0.27.1 header in a package layout."""

from __future__ import annotations

import json
import shutil
import venv
from pathlib import Path

from dsv4ctl.probe.headers import find_effective_deepgemm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "deepgemm"


def _external_deep_gemm(root: Path, version: str) -> Path:
    package = root / "deep_gemm"
    shutil.copytree(FIXTURES / version, package / "include")
    (package / "__init__.py").write_text("raise ImportError('not importable here: located, never imported')\n")
    return package


def test_external_package_is_the_effective_one(tmp_path, monkeypatch):
    package = _external_deep_gemm(tmp_path, "vllm-0.27.1")
    monkeypatch.syspath_prepend(str(tmp_path))
    location = find_effective_deepgemm()
    assert location is not None and location.source == "external"
    assert location.package_dir == package and location.include_dir == package / "include"


def test_probe_without_include_reads_the_effective_external_header(cli, tmp_path, monkeypatch):
    _external_deep_gemm(tmp_path, "vllm-0.27.1")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = cli("probe", "deepgemm", "--mode", "static", "--json")
    assert result.exit_code == 7, result.output
    doc = json.loads(result.stdout)
    assert doc["deepgemm"]["source"] == "external" and doc["affected"] is True


def test_doctor_names_the_external_deepgemm_and_its_guard(cli, tmp_path):
    _external_deep_gemm(tmp_path, "vllm-0.33.0")
    bare = tmp_path / "venv"  # no vLLM, no torch: the unit tier never imports them
    venv.create(bare, with_pip=False, symlinks=True)
    result = cli("doctor", "--json", "--python", bare / "bin" / "python", env={"PYTHONPATH": str(tmp_path)})
    assert result.exit_code == 0, result.output
    deepgemm = json.loads(result.stdout)["deepgemm"]
    assert deepgemm["found"] and deepgemm["source"] == "external"
    assert deepgemm["package_dir"] == str(tmp_path / "deep_gemm")
    assert deepgemm["header"]["guarded"] is True
