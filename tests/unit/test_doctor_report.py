"""`dsv4ctl doctor`: secrets are redacted; it works without vLLM and without a GPU, saying what is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from dsv4ctl.doctor.redact import REDACTED, is_relevant, redact, relevant_environment

REPO = Path(__file__).resolve().parents[2]
HF_TOKEN = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"


@pytest.mark.parametrize("name", ["HF_TOKEN", "VLLM_API_KEY", "hf_api_key", "DSV4CTL_SECRET", "NCCL_PASSWORD",
                                  "TORCH_PASSWD", "DG_CREDENTIALS", "VLLM_AUTH_HEADER", "HUGGING_FACE_HUB_TOKEN"])
def test_secret_names_are_redacted(name):
    var = redact(name, "visible-value")
    assert var.value == REDACTED and var.redacted


@pytest.mark.parametrize("value", [HF_TOKEN, f"Bearer {HF_TOKEN}", "https://user:pa55@mirror.example/simple"])
def test_secret_looking_values_are_redacted(value):
    assert redact("VLLM_SOME_SETTING", value).value == REDACTED


@pytest.mark.parametrize("value", ["0,1", "hf_transfer", "INFO", "/root/.cache/huggingface", "https://mirror.example"])
def test_ordinary_values_stay(value):
    assert redact("VLLM_SOME_SETTING", value).value == value


@pytest.mark.parametrize("value", ["https://:hunter2@mirror.example/simple", "redis://:hunter2@cache:6379/0",
                                   "https://hunter2@mirror.example/simple",
                                   "https://mirror.example/simple?token=hunter2",
                                   "https://mirror.example/simple?page=1&api_key=hunter2",
                                   "https://bucket.example/m?X-Amz-Signature=hunter2"])
def test_url_credentials_without_a_user_or_in_the_query_are_redacted(value):
    assert redact("HF_ENDPOINT", value).value == REDACTED


def test_url_with_an_ordinary_query_stays():
    assert redact("HF_ENDPOINT", "https://mirror.example/simple?page=2").value == "https://mirror.example/simple?page=2"


def test_fixes_env_is_redacted_like_the_environment(cli, tmp_path):
    """DSV4CTL_FIXES is also shown on its own line and in `fixes_env`: redacted there too."""
    result = cli("doctor", "--json", "--python", str(tmp_path / "missing-python"), env={"DSV4CTL_FIXES": HF_TOKEN})
    assert result.exit_code == 1, result.output  # the report is still printed
    doc = json.loads(result.stdout)
    assert doc["fixes_env"] == REDACTED and HF_TOKEN not in result.stdout
    text = cli("doctor", "--python", str(tmp_path / "missing-python"), env={"DSV4CTL_FIXES": HF_TOKEN}).stdout
    assert f"DSV4CTL_FIXES={REDACTED!r}" in text and HF_TOKEN not in text


def test_only_relevant_prefixes_are_shown_sorted():
    env = {"PATH": "/bin", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0", "VLLM_USE_V2_MODEL_RUNNER": "1",
           "OMP_NUM_THREADS": "4", "AWS_SECRET_ACCESS_KEY": "x", "NCCL_DEBUG": "INFO", "HF_TOKEN": HF_TOKEN}
    shown = relevant_environment(env)
    assert [v.name for v in shown] == ["CUDA_VISIBLE_DEVICES", "HF_TOKEN", "NCCL_DEBUG", "OMP_NUM_THREADS",
                                       "VLLM_USE_V2_MODEL_RUNNER"]
    assert not is_relevant("AWS_SECRET_ACCESS_KEY")
    assert dict((v.name, v.value) for v in shown)["HF_TOKEN"] == REDACTED


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A Python with neither vLLM nor torch (a fresh venv without site packages)."""
    where = tmp_path_factory.mktemp("bare-venv")
    venv.create(where, with_pip=False, system_site_packages=False, symlinks=True)
    return str(where / "bin" / "python")


def test_doctor_json_without_vllm_without_gpu_redacts(cli, bare_python):
    env = {"HF_TOKEN": HF_TOKEN, "VLLM_API_KEY": "s3cret", "NCCL_DEBUG": "INFO",
           "VLLM_HTTP_PROXY_URL": "https://bob:hunter2@proxy.example"}
    result = cli("doctor", "--json", "--python", bare_python, env=env)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1
    assert doc["target_error"] is None
    assert doc["vllm"] == {"installed": False}
    assert doc["torch"] == {"installed": False}
    assert doc["python"]["executable"].startswith(str(Path(bare_python).parent.parent))
    assert [f["checked"] for f in doc["fixes"]] == [False, False, False]
    assert all("vLLM is not importable" in f["reason"] for f in doc["fixes"])
    assert doc["gpus"] or doc["gpu_error"]  # here: no NVML, said in one line
    shown = {v["name"]: v["value"] for v in doc["environment"]}
    assert shown["HF_TOKEN"] == REDACTED and shown["VLLM_API_KEY"] == REDACTED
    assert shown["VLLM_HTTP_PROXY_URL"] == REDACTED and shown["NCCL_DEBUG"] == "INFO"
    assert "s3cret" not in result.stdout and HF_TOKEN not in result.stdout and "hunter2" not in result.stdout


def test_doctor_text_says_what_is_missing(cli, bare_python):
    result = cli("doctor", "--python", bare_python, env={"HF_TOKEN": HF_TOKEN})
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "vLLM       not installed" in text and "torch      not installed" in text
    assert "cannot check: vLLM is not importable" in text
    assert "HF_TOKEN=***redacted***" in text and HF_TOKEN not in text
    assert "GPUs" in text


def test_doctor_reports_a_python_that_does_not_run(cli, tmp_path):
    result = cli("doctor", "--json", "--python", str(tmp_path / "missing-python"))
    assert result.exit_code == 1  # a Python that cannot run fails the command, after the report
    doc = json.loads(result.stdout)
    assert "not found" in doc["target_error"]
    assert "Error: --python" in result.stderr
    assert [f["checked"] for f in doc["fixes"]] == [False, False, False]


@pytest.mark.parametrize("args", [["--help"], ["doctor", "--help"], ["probe", "deepgemm", "--help"],
                                  ["probe", "deepgemm", "--mode", "static", "--include",
                                   str(REPO / "tests/fixtures/deepgemm/vllm-0.33.0")]])
def test_commands_do_not_import_vllm_torch_or_pynvml(args):
    code = ("import sys\nfrom dsv4ctl.cli import main\nrc = main(sys.argv[1:])\n"
            "heavy = [m for m in ('vllm', 'torch', 'pynvml') if m in sys.modules]\n"
            "sys.stderr.write(f'HEAVY={heavy}\\n')\n")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "HEAVY=[]" in proc.stderr, proc.stderr[-2000:]


def test_doctor_shows_gpus_from_the_gpu_reader(cli, bare_python, monkeypatch):
    # A real H200 snapshot (`dsv4ctl gpus --json` on the device): doctor shows the same devices and
    # figures as `dsv4ctl gpus`, CUDA total (NVML total - reserved) included.
    import dsv4ctl.gpu as gpu

    snapshot = gpu.load_snapshot(REPO / "tests" / "fixtures" / "gpus" / "h200-snapshot.json")
    monkeypatch.setattr(gpu, "read_snapshot", lambda *a, **k: snapshot)
    doc = json.loads(cli("doctor", "--json", "--python", bare_python).stdout)
    assert doc["gpu_error"] is None
    assert doc["driver_version"] == "580.159.04" and doc["cuda_driver_version"] == "13.0"
    (device,) = doc["gpus"]
    assert device["name"] == "NVIDIA H200" and device["sm"] == "sm_90"
    assert device["cuda_total_bytes"] == 150_109_880_320
    text = cli("doctor", "--python", bare_python).stdout
    assert "driver     580.159.04, supports CUDA 13.0" in text
    assert "  cuda:0 NVIDIA H200 sm_90, 139.80 GiB free of 139.80 GiB" in text


def test_doctor_lists_vllms_startup_plans(cli, bare_python, tmp_path):
    folder = tmp_path / "vllm-cache" / "startup_plan"
    folder.mkdir(parents=True)
    fp = "5609437683ff7d77"
    (folder / f"startup_plan_{fp}.json").write_text(json.dumps(
        {"schema": 1, "fingerprint": fp, "kv_cache_memory_bytes": 7 << 30, "free_memory_baseline": 130 << 30}))
    env = {"VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache")}
    doc = json.loads(cli("doctor", "--json", "--python", bare_python, env=env).stdout)
    assert doc["startup_plans"]["dir"] == str(folder)
    assert [p["fingerprint"] for p in doc["startup_plans"]["plans"]] == [fp]
    text = cli("doctor", "--python", bare_python, env=env).stdout
    assert "plans      1 vLLM startup plan in" in text and f"  {fp}: KV 7.00 GiB, free at start 130.00 GiB" in text


def test_doctor_shows_the_hosts_memory_from_the_host_reader(cli, bare_python, monkeypatch):
    from dsv4ctl import host

    memory = host.HostMemory(2048 << 30, 1900 << 30, "node-a", "psutil", 1024 << 30, 1000 << 30)
    monkeypatch.setattr(host, "read_host_memory", lambda: memory)
    doc = json.loads(cli("doctor", "--json", "--python", bare_python).stdout)
    assert doc["host_memory"]["total_bytes"] == 2048 << 30 and doc["host_memory"]["available_bytes"] == 1900 << 30
    text = " ".join(cli("doctor", "--python", bare_python).stdout.split())
    assert "host RAM 1900.00 GiB available of 2048.00 GiB (node-a, psutil); /dev/shm 1000.00 GiB free of 1024.00 GiB" in text
