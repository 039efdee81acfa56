"""serve knows when its engine dies: a multiprocessing child named as vLLM names its engines
(`EngineCore_DP1`, vllm==0.32.0 vllm/v1/engine/utils.py:284) ends on a real signal under a real
`ServeSession`; the log says which process, pid, signal and rank, the outcome is `failed`, and
`diagnose` reads the line as the root cause. A stop that was asked for is not a death."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DRIVER = """
    import json, multiprocessing, os, signal, sys, time
    from pathlib import Path
    from dsv4ctl.render.serve import ServeConsole
    from dsv4ctl.serve.session import ServeSession

    log, mode = Path(sys.argv[1]), sys.argv[2]

    def now():
        return time.strftime("%m-%d %H:%M:%S")

    def engine(code):
        print("(EngineCore_DP1 pid=%d) INFO %s [core.py:1] engine up" % (os.getpid(), now()), flush=True)
        time.sleep(0.2)
        if code is not None:
            sys.exit(code)
        time.sleep(300)

    # vLLM's engine manager, as far as serve touches it: the class whose shutdown follows an engine's end
    # (vllm/v1/engine/utils.py:335); a stand-in module, so the test does not import vLLM
    import types
    for name in ("vllm", "vllm.v1", "vllm.v1.engine", "vllm.v1.engine.utils"):
        sys.modules[name] = types.ModuleType(name)
    class CoreEngineProcManager:
        def shutdown(self, timeout=None):
            return None
    sys.modules["vllm.v1.engine"].utils = sys.modules["vllm.v1.engine.utils"]
    sys.modules["vllm.v1.engine.utils"].CoreEngineProcManager = CoreEngineProcManager
    from dsv4ctl.serve.engines import report_before_vllm_teardown

    def launch():
        # like vLLM's headless node: one engine process, its death is not reported by the launcher,
        # which shuts the manager down, logs "Shutting down." and returns 0 (vllm/entrypoints/cli/serve.py:258-266)
        report_before_vllm_teardown()
        proc = multiprocessing.get_context("fork").Process(
            target=engine, args=(3 if mode == "exit3" else 0 if mode == "exit0" else None,), name="EngineCore_DP1")
        proc.start()
        stopped = []
        if mode == "asked":
            signal.signal(signal.SIGTERM, lambda s, f: stopped.append(s))  # as vLLM installs its own
        time.sleep(1.0)
        if mode == "kill":
            os.kill(proc.pid, signal.SIGKILL)
        elif mode == "asked":
            os.kill(os.getpid(), signal.SIGTERM)  # the operator stops the server...
            time.sleep(0.2)
            proc.terminate()  # ...and vLLM ends its engine
        proc.join()
        CoreEngineProcManager().shutdown()
        print("(APIServer pid=%d) INFO %s [serve.py:266] Shutting down." % (os.getpid(), now()), flush=True)
        return 0

    with ServeSession(log, ServeConsole(live=False), grace_s=1.0) as session:
        outcome = session.run(launch)
    print(json.dumps(outcome.to_json()))
"""


def _run(tmp_path: Path, mode: str) -> tuple[dict, str, Path]:
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER))
    log = tmp_path / "serve.log"
    proc = subprocess.run(
        [sys.executable, str(script), str(log), mode], capture_output=True, timeout=60, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout.decode().strip().splitlines()[-1]), log.read_text(), log


def test_a_killed_engine_is_written_to_the_log_before_vllms_shutdown_and_fails_the_run(tmp_path):
    outcome, text, log = _run(tmp_path, "kill")
    assert outcome["status"] == "failed"
    [death] = outcome["engine_deaths"]
    assert death["process"] == "EngineCore_DP1" and death["rank"] == 1
    assert death["exit_code"] == -9 and death["signal"] == "SIGKILL"
    assert outcome["error"] == f"engine process EngineCore_DP1 (pid {death['pid']}, DP rank 1) was killed by signal 9 (SIGKILL)"
    lines = text.splitlines()
    [at] = [i for i, line in enumerate(lines) if "dsv4ctl serve: engine process" in line]
    shutdown = next(i for i, line in enumerate(lines) if "Shutting down." in line)
    assert at < shutdown
    assert re.fullmatch(
        r"ERROR \d{2}-\d{2} \d{2}:\d{2}:\d{2} \[engines\.py:\d+\] dsv4ctl serve: engine process EngineCore_DP1 "
        rf"\(pid {death['pid']}, DP rank 1\) was killed by signal 9 \(SIGKILL\)", lines[at])

    from dsv4ctl.advice import diagnose

    d = diagnose([str(log)])
    assert d.verdict == "failed" and int(d.exit_code) == 3
    assert d.root_cause is not None and d.root_cause.id == "serve_engine_died"
    assert d.root_cause.details["rank"] == "1" and d.root_cause.details["signal"] == "SIGKILL"
    assert d.root_cause.evidence[0].line == at + 1


def test_an_engine_exit_code_is_reported_with_the_code(tmp_path):
    outcome, text, _ = _run(tmp_path, "exit3")
    assert outcome["status"] == "failed"
    assert [d["exit_code"] for d in outcome["engine_deaths"]] == [3]
    assert "dsv4ctl serve: engine process EngineCore_DP1 (pid " in text and ", DP rank 1) exited with code 3" in text


@pytest.mark.parametrize("mode", ["exit0", "asked"])
def test_a_clean_exit_or_a_stop_that_was_asked_for_is_not_a_death(tmp_path, mode):
    outcome, text, _ = _run(tmp_path, mode)
    assert outcome["engine_deaths"] == []
    assert outcome["status"] == "stopped"
    assert "dsv4ctl serve: engine process" not in text


def test_the_signature_cites_the_line_that_writes_the_words():
    from dsv4ctl.catalogue.signatures import BY_ID
    from dsv4ctl.serve import engines

    sig = BY_ID["serve_engine_died"]
    path, line = re.search(r"(dsv4ctl/serve/engines\.py):(\d+)", sig.source).groups()
    source = (REPO / path).read_text().splitlines()
    assert "{LINE_PREFIX} {self.name} (pid {self.pid}{rank}) {how}" in source[int(line) - 1]
    death = engines.EngineDeath("EngineCore_DP3", 77, -11, 0.0)
    m = sig.match(death.describe())
    assert m and m.group("rank") == "3" and m.group("signal") == "SIGSEGV" and m.group("pid") == "77"
    assert sig.match(engines.EngineDeath("EngineCore", 5, 1, 0.0).describe()).group("code") == "1"
    assert engines.EngineDeath("EngineCore", 5, 1, 0.0).rank is None
