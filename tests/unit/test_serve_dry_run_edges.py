"""`serve --dry-run` is the real start's verdict: a flag vLLM's parser rejects fails it as vLLM would (exit 2), a
checkpoint vLLM cannot split is refused with or without memory figures (exit 6), a refusal prints no command on
stdout, and the command it prints is the one serve runs, with the environment the plan relies on."""

from __future__ import annotations

import json
import shlex

import pytest

from fitkit import FLASH, PRO


@pytest.fixture
def no_vllm(monkeypatch):
    """A machine without vLLM (an operator's laptop): the flags are read from dsv4ctl's table of vLLM's flags."""
    from dsv4ctl.errors import EngineUnavailableError
    from dsv4ctl.planning.mirror import versions
    from dsv4ctl.serve import vllm_entry

    def missing(flags):
        raise EngineUnavailableError("vLLM is not installed in this Python environment")

    monkeypatch.setattr(vllm_entry, "parse_serve_flags", missing)
    monkeypatch.setattr(versions, "installed_vllm_version", lambda: None)
    monkeypatch.setattr("dsv4ctl.planning.installed_vllm_version", lambda: None)  # the face's name too (serve's environment reads it)


def _no_gpu(monkeypatch):
    from dsv4ctl.errors import GpuUnavailableError
    from dsv4ctl.serve import preflight

    def none():
        raise GpuUnavailableError("no NVIDIA driver here")

    monkeypatch.setattr(preflight, "_default_snapshot_reader", none)


@pytest.mark.parametrize("flags, words", [
    (["--max-model-length", "100000"], "unrecognized arguments: --max-model-length 100000"),
    (["--max-num", "8"], "ambiguous option: --max-num could match"),
    (["--tensor_parallel_sizes", "2"], "unrecognized arguments: --tensor_parallel_sizes 2"),
])
def test_a_flag_vllms_parser_rejects_fails_the_dry_run(cli, no_vllm, monkeypatch, flags, words):
    _no_gpu(monkeypatch)
    res = cli("serve", FLASH, *flags, "--dry-run")
    assert res.exit_code == 2 and res.stdout == "" and words in res.stderr
    if "length" in flags[0]:
        assert "--max-model-len" in res.stderr  # the flags with its words, from the table: not a guess by spelling


@pytest.mark.parametrize("flags", [
    ["--max_model_len=512k", "-tp", "2"], ["--speculative-config.method", "mtp"], ["-O3"], ["--max-model", "4096"],
    ["--no-enable-prefix-caching"], ["--port", "8001", "--host", "0.0.0.0"],
])
def test_what_vllms_parser_takes_passes(cli, no_vllm, monkeypatch, flags):
    _no_gpu(monkeypatch)
    res = cli("serve", FLASH, *flags, "--kv-cache-memory-bytes", "10G", "--dry-run")
    assert res.exit_code == 0, res.stderr


@pytest.mark.parametrize("tp", ["16", "12", "3"])
def test_a_split_the_checkpoint_cannot_take_is_refused_without_memory_figures(cli, no_vllm, monkeypatch, tp):
    _no_gpu(monkeypatch)
    res = cli("serve", PRO, "-tp", tp, "--dry-run")
    assert res.exit_code == 6 and res.stdout == ""
    assert "1, 2, 4, 8" in res.stderr
    doc = cli("serve", PRO, "-tp", tp, "--dry-run", "--json")
    decision = json.loads(doc.stdout)["serve_preflight"]
    assert doc.exit_code == 6 and decision["action"] == "refuse" and decision["command"] is None


def test_a_refusal_prints_no_command(cli, no_vllm, monkeypatch):
    _no_gpu(monkeypatch)
    res = cli("serve", FLASH, "--max-model-len", "2000000", "--kv-cache-memory-bytes", "10G", "--dry-run")
    assert res.exit_code == 6 and res.stdout == "" and "vLLM would refuse" in res.stderr


def test_the_command_carries_the_fix_the_plan_relies_on(cli, no_vllm, monkeypatch):
    """0.30 with --max-model-len auto is safe only with the stale-length fix in vLLM's processes: the printed command
    sets it, so that it runs the same by itself; with the fix off, serve pins an explicit length instead."""
    _no_gpu(monkeypatch)
    monkeypatch.delenv("DSV4CTL_FIXES", raising=False)
    res = cli("serve", FLASH, "-tp", "2", "--kv-cache-memory-bytes", "10G", "--vllm-version", "0.30.0", "--dry-run")
    assert res.exit_code == 0
    argv = shlex.split(res.stdout)
    assert "DSV4CTL_FIXES=all" in argv and argv[argv.index("vllm"):][:3] == ["vllm", "serve", FLASH]
    assert argv[argv.index("--max-model-len") + 1] == "auto"
    assert "adding --max-model-len auto" in res.stderr  # not given: added, not "kept"
    off = cli("serve", FLASH, "-tp", "2", "--kv-cache-memory-bytes", "10G", "--vllm-version", "0.30.0", "--fixes", "none",
              "--dry-run")
    argv = shlex.split(off.stdout)
    assert not any(a.startswith("DSV4CTL_FIXES=") for a in argv) and argv[argv.index("--max-model-len") + 1].isdigit()


@pytest.mark.parametrize("release, on", [("0.34.0", False), ("0.32.0", True)])
def test_startup_plans_follow_the_release_planned_not_the_one_installed(cli, monkeypatch, release, on):
    """0.32 installed, the dry run plans 0.34: 0.34's startup plans are not turned on (planning's
    startup_plans.available_in), so neither the command nor the notes carry VLLM_ENABLE_STARTUP_PLAN=1."""
    from dsv4ctl.planning import startup_plans
    from dsv4ctl.planning.mirror import versions

    _no_gpu(monkeypatch)
    monkeypatch.delenv(startup_plans.ENV, raising=False)
    monkeypatch.setattr(versions, "installed_vllm_version", lambda: "0.32.0")
    monkeypatch.setattr("dsv4ctl.planning.installed_vllm_version", lambda: "0.32.0")
    res = cli("serve", "--dry-run", "--vllm-version", release, FLASH, "-tp", "8", "--max-model-len", "auto",
              "--kv-cache-memory-bytes", "10G")
    assert res.exit_code == 0, res.stderr
    assert (f"{startup_plans.ENV}=1" in shlex.split(res.stdout)) is on
    assert (f"{startup_plans.ENV}=1: vLLM {release} keeps" in res.stderr) is on
    assert "vLLM 0.32.0 keeps" not in res.stderr or release == "0.32.0"


@pytest.mark.parametrize("argv", [
    ["-tp", "8", FLASH], ["--headless", FLASH], ["--enable-expert-parallel", "-tp", "8", FLASH],
    ["--port", "8001", FLASH, "-tp", "2"], ["--speculative-config.method", "mtp", FLASH], ["-O", "3", FLASH],
    ["--tensor-parallel", "8", FLASH], ["-tp", "2", "--model", FLASH],
])
def test_the_model_is_taken_where_vllms_parser_takes_it(cli, no_vllm, monkeypatch, argv):
    """`vllm serve -tp 8 MODEL`: vLLM's parser takes the positional model after options too (model_tag, nargs '?'),
    8 being -tp's value; the dry run plans that model and prints the argv as given."""
    _no_gpu(monkeypatch)
    res = cli("serve", "--dry-run", *argv, "--kv-cache-memory-bytes", "10G")
    assert res.exit_code == 0, res.stderr
    printed = shlex.split(res.stdout)
    assert printed[printed.index("serve") + 1:][:len(argv)] == argv


@pytest.mark.parametrize("argv", [["-tp", "8"], ["--served-model-name", "x", FLASH], ["--port", "8001"]])
def test_an_argv_without_a_model_is_refused(cli, no_vllm, monkeypatch, argv):
    # --served-model-name takes every token up to the next option (nargs '+'), the model too: vLLM would serve its
    # default model, so serve asks for one.
    _no_gpu(monkeypatch)
    res = cli("serve", "--dry-run", *argv)
    assert res.exit_code == 2 and "no MODEL given" in res.stderr and res.stdout == ""


def test_serve_says_it_has_no_gpus_option(cli, no_vllm, monkeypatch):
    _no_gpu(monkeypatch)
    res = cli("serve", "--dry-run", "--gpus", "snap.json", FLASH, "-tp", "8")
    assert res.exit_code == 2 and res.stdout == ""
    assert "serve takes none" in res.stderr and "fit-length MODEL --gpus" in res.stderr
    assert "no MODEL given" not in res.stderr


def test_the_model_reader_agrees_with_vllms_parser():
    """dsv4ctl's reading of the model (for the dry run without vLLM and serve's own check) against the parser of the
    vLLM installed here, on argvs with the model before and after options of each kind."""
    pytest.importorskip("vllm")
    from dsv4ctl.planning import installed_vllm_version
    from dsv4ctl.serve.flags_without_vllm import model_argument
    from dsv4ctl.serve.vllm_entry import parse_serve_flags

    release = installed_vllm_version()
    for argv in (["-tp", "8", "M"], ["--headless", "M"], ["--no-enable-prefix-caching", "M"], ["-O3", "M"],
                 ["--port", "8001", "M", "-tp", "2"], ["--max-model-len=4096", "M"], ["--model", "A", "-tp", "2"],
                 ["--speculative-config.method", "mtp", "M"], ["-tp", "2", "--", "M"]):
        assert model_argument(argv, release) == parse_serve_flags(argv).model, argv


def test_the_dry_run_shows_the_probe_settings_serve_adds(cli, no_vllm, monkeypatch):
    from dsv4ctl.health import routes

    _no_gpu(monkeypatch)
    monkeypatch.delenv(routes.GRACE_ENV, raising=False)
    monkeypatch.delenv(routes.HEALTH_ENV, raising=False)
    argv = ("serve", "--dry-run", "--probe-grace", "5", "--probe-health", FLASH, "-tp", "8", "--kv-cache-memory-bytes",
            "10G")
    res = cli(*argv)
    assert res.exit_code == 0, res.stderr
    assert {f"{routes.GRACE_ENV}=5", f"{routes.HEALTH_ENV}=1"} <= set(shlex.split(res.stdout))
    assert f"--middleware {routes.MIDDLEWARE}" in res.stderr and "--probe-grace" in res.stderr
    doc = json.loads(cli(*argv, "--json").stdout)["serve_preflight"]
    assert doc["environment"][routes.GRACE_ENV] == "5" and doc["environment"][routes.HEALTH_ENV] == "1"
    assert any(routes.MIDDLEWARE in n and f"{routes.GRACE_ENV}=5" in n for n in doc["notes"])
    plain = json.loads(cli("serve", "--dry-run", FLASH, "--kv-cache-memory-bytes", "10G", "--json").stdout)
    assert routes.GRACE_ENV not in plain["serve_preflight"]["environment"]


@pytest.mark.parametrize("probe", [["--probe-grace", "5"], ["--probe-health"]])
def test_probe_options_are_refused_on_a_headless_node(cli, no_vllm, monkeypatch, probe):
    _no_gpu(monkeypatch)
    res = cli("serve", "--dry-run", *probe, "--headless", FLASH, "--kv-cache-memory-bytes", "10G")
    assert res.exit_code == 2 and res.stdout == ""
    assert f"{probe[0]} with --headless" in res.stderr and "no API server" in res.stderr


def test_compare_without_a_gpu_names_what_works_on_serve(cli, no_vllm, monkeypatch):
    """The upgrade view plans under both releases: without a GPU here, the hint names serve's own way (the launch's
    --kv-cache-memory-bytes, which then compares) and fit-length's snapshot, not only fit-length."""
    from dsv4ctl.errors import GpuUnavailableError

    def no_driver(*args, **kwargs):
        raise GpuUnavailableError("no NVIDIA driver here")

    _no_gpu(monkeypatch)
    monkeypatch.setattr("dsv4ctl.gpu.read_snapshot", no_driver)
    res = cli("serve", "--dry-run", "--vllm-version", "0.33.0", "--compare", "0.34.0", FLASH, "-tp", "8")
    assert res.exit_code != 0 and "no NVIDIA driver here" in res.stderr
    hint = res.stderr.split("Hint:", 1)[1]
    assert "--kv-cache-memory-bytes 10G" in hint and "fit-length MODEL --gpus" in hint
    ok = cli("serve", "--dry-run", "--vllm-version", "0.33.0", "--compare", "0.34.0", FLASH, "-tp", "8",
             "--kv-cache-memory-bytes", "10G")
    assert ok.exit_code == 0, ok.stderr


def test_the_watchdog_refuses_a_unix_socket_in_the_dry_run_too(cli, no_vllm, monkeypatch):
    _no_gpu(monkeypatch)
    res = cli("serve", FLASH, "--watchdog", "120", "--uds", "/tmp/x.sock", "--dry-run")
    assert res.exit_code == 2 and "--watchdog needs a TCP port" in res.stderr and res.stdout == ""


@pytest.mark.parametrize("flags, words", [
    (["--kv-cache-memory-bytes", "9.81"], "9.81 GiB is --kv-cache-memory-bytes 10533407294"),
    (["-tp", "abc"], "argument -tp: invalid int value: 'abc'"),
])
def test_a_value_vllm_reads_otherwise_is_explained(cli, no_vllm, monkeypatch, flags, words):
    _no_gpu(monkeypatch)
    res = cli("serve", FLASH, *flags, "--dry-run")
    assert res.exit_code == 2 and words in res.stderr


@pytest.mark.parametrize("flags", [["-tp", "0"], ["--tensor-parallel-size=-2"], ["--max-num-seqs", "0"], ["-pp", "0"]])
def test_a_size_below_one_is_refused_as_vllms_config_refuses_it(cli, no_vllm, monkeypatch, flags):
    _no_gpu(monkeypatch)
    res = cli("serve", FLASH, *flags, "--kv-cache-memory-bytes", "10G", "--dry-run")
    assert res.exit_code == 2 and res.stdout == "" and "its config takes 1 or more" in res.stderr


@pytest.mark.parametrize("abbreviation", ["--tensor-parallel", "--tensor-parallel-s"])
def test_an_abbreviated_flag_is_planned_as_the_flag_it_names(cli, no_vllm, monkeypatch, abbreviation):
    # argparse takes a prefix that names one option only; the plan reads it as that option (3 does not divide 64 heads).
    _no_gpu(monkeypatch)
    res = cli("serve", FLASH, abbreviation, "3", "--kv-cache-memory-bytes", "10G", "--dry-run")
    assert res.exit_code == 6 and "--tensor-parallel-size 3 does not divide" in res.stderr and res.stdout == ""


def test_the_split_hint_says_what_it_did_not_check(cli):
    # The Flash preset carries no moe_intermediate_size or FP8 block: sizes are named by the heads alone, and said so.
    res = cli("fit-length", FLASH, "-tp", "3", "--kv-cache-memory", "10GiB")
    assert res.exit_code == 6 and "divide the 64 heads" in res.stderr and "is not checked" in res.stderr
    res = cli("fit-length", PRO, "-tp", "3", "--kv-cache-memory", "10GiB")
    assert res.exit_code == 6 and "tensor-parallel sizes that split: 1, 2, 4, 8" in res.stderr
