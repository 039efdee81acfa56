#!/usr/bin/env python3
"""Adds a vLLM release to what dsv4ctl knows, and says what changed against the release before it.

    python scripts/add_release.py 0.34.0                      # pip download vllm==0.34.0 --no-deps
    python scripts/add_release.py 0.34.0 --wheel PATH.whl     # a wheel already downloaded
    python scripts/add_release.py 0.34.0 --json               # the report as JSON (schema_version 1)
    python scripts/add_release.py 0.34.0 --report-only        # no download, no rebuild: the report alone
    python scripts/add_release.py --log-lines                 # only rebuild vllm_log_lines.json, every release

Steps (each says what it does on stderr; the report is stdout):
1. the wheel's Python sources (and METADATA) unpacked where every script reads releases:
   <wheels>/src/vllm-<VERSION>/vllm/... (scripts/build_message_index.py `release_source`);
2. the release added to scripts/vllm_releases.txt (the one list of known releases, in version order);
3. the catalogue rebuilt: the flags table (scripts/build_vllm_flags.py), the message index (scripts/
   build_message_index.py --only vllm: the other packages' entries are kept), and
   dsv4ctl/catalogue/vllm_log_lines.json (which timeline lines each release prints);
4. scripts/planner_oracle.py VERSION (vLLM's own planner answers, tests/data/planner/VERSION.json); its
   failure is reported, not fatal: the oracle may not know the release yet;
5. the report (scripts/release_delta.py): functions by AST, messages, flags, env vars, metrics, timeline lines,
   fixes, startup-plan schema, each against the previous known release.

What the report cannot decide stays for a person (docs/releases.md): whether each fix is still needed, and
whether the planner mirror's rules hold where a function it mirrors changed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import release_delta as rd  # noqa: E402
from build_message_index import (DEFAULT_WHEELS, RELEASES_FILE, pip_download, read_releases,  # noqa: E402
                                 release_source, unpack_wheel, version_key)

LOG_LINES = REPO / "dsv4ctl" / "catalogue" / "vllm_log_lines.json"
DEEPGEMM_HEADER = "vllm/third_party/deep_gemm/include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh"
DEEPGEMM_INIT = "vllm/third_party/deep_gemm/__init__.py"
# Variables dsv4ctl's texts name that the report always shows (the engine's time-outs and the runner switch).
CALLED_OUT_ENV = ("VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "VLLM_USE_V2_MODEL_RUNNER")


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------- the thin part
def ensure_source(version: str, wheels: Path, wheel: Path | None) -> Path:
    dest = release_source(wheels, version)
    if (dest / "vllm" / "config" / "model.py").exists():
        say(f"sources: {dest} already unpacked")
        return dest
    if wheel is None:
        say(f"sources: pip download vllm=={version} --no-deps")
        wheel = pip_download(f"vllm=={version}", wheels / "whl")
    say(f"sources: unpacking {wheel.name} into {dest}")
    unpack_wheel(wheel, dest, lambda n: n.endswith(".py") or n.endswith(".dist-info/METADATA"))
    return dest


def register(version: str, path: Path = RELEASES_FILE) -> bool:
    """Add `version` to the releases file in version order; False when it is there already."""
    known = read_releases(path)
    if version in known:
        return False
    text = path.read_text(encoding="utf-8")
    later = [v for v in known if version_key(v) > version_key(version)]
    if later:
        text = text.replace(f"\n{later[0]}\n", f"\n{version}\n{later[0]}\n", 1)
    else:
        text = text.rstrip("\n") + f"\n{version}\n"
    path.write_text(text, encoding="utf-8")
    return True


def run_step(name: str, cmd: list[str]) -> dict:
    say(f"{name}: $ {' '.join(cmd)}")
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    tail = (p.stdout + p.stderr).strip().splitlines()[-8:]
    for ln in tail:
        say(f"  {ln}")
    return {"step": name, "command": " ".join(cmd), "rc": p.returncode, "seconds": round(time.monotonic() - t0, 1),
            "tail": tail}


def deepgemm_header(wheel: Path | None) -> dict | None:
    """The vendored DeepGEMM's SM90 metadata header in the wheel, judged by dsv4ctl's own header check."""
    if wheel is None:
        return None
    from dsv4ctl.probe.headers import inspect_header_text

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        if DEEPGEMM_HEADER not in names:
            return {"header": None, "guarded": None, "reason": f"{DEEPGEMM_HEADER} not in the wheel"}
        text = z.read(DEEPGEMM_HEADER).decode("utf-8", "replace")
        version = None
        if DEEPGEMM_INIT in names:
            for i, ln in enumerate(z.read(DEEPGEMM_INIT).decode("utf-8", "replace").splitlines(), 1):
                if ln.startswith("__version__"):
                    version = {"value": ln.split("=", 1)[1].strip().strip("'\""), "at": f"{DEEPGEMM_INIT}:{i}"}
    v = inspect_header_text(text, Path(DEEPGEMM_HEADER))
    return {"header": DEEPGEMM_HEADER, "guarded": v.guarded, "reason": v.reason, "version": version}


# ------------------------------------------------------------------------------------------ what is read
def timeline_regexes() -> dict[str, str]:
    from dsv4ctl.logs import timeline

    return {k: p.pattern for k, p in timeline.line_patterns().items()}


def metric_names() -> tuple[str, ...]:
    from dsv4ctl.check import metrics

    return tuple(v for k, v in sorted(vars(metrics).items()) if k.isupper() and isinstance(v, str)
                 and v.startswith("vllm:"))


def named_env(envs: list[dict]) -> tuple[str, ...]:
    """Variables named anywhere in dsv4ctl's sources that vLLM's envs.py defines (in either release)."""
    import re

    named: set[str] = set()
    for p in (REPO / "dsv4ctl").rglob("*.py"):
        named |= set(re.findall(r"\bVLLM_[A-Z0-9_]+\b", p.read_text(encoding="utf-8")))
    defined = set().union(*(e.keys() for e in envs))
    return tuple(CALLED_OUT_ENV) + tuple(sorted((named & defined) - set(CALLED_OUT_ENV)))


def log_lines_file(wheels: Path, releases: tuple[str, ...], regexes: dict[str, str]) -> dict:
    out = {}
    for v in releases:
        say(f"log lines: vllm {v}")
        out[v] = rd.log_lines(rd.Tree(release_source(wheels, v)), regexes)
    printed = {k for per in out.values() for k, x in per.items() if x}
    return {"schema_version": 1,
            "generator": "python scripts/add_release.py --log-lines",
            "about": "for each line dsv4ctl's startup timeline reads (dsv4ctl/logs/timeline.py), the format string "
                     "each vLLM release prints it with and where, or null when the release's sources hold no "
                     "string the line's regex matches; keys no release prints are lines of other programs "
                     "(uvicorn, Python) and are listed in not_vllm",
            "not_vllm": sorted(set(regexes) - printed),
            "releases": {v: {k: x for k, x in per.items() if k in printed} for v, per in out.items()}}


def write_json(data: dict, path: Path) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------- the report
def delta(old_root: Path, new_root: Path, old: str, new: str) -> dict:
    a, b = rd.Tree(old_root), rd.Tree(new_root)
    say("report: functions")
    functions = rd.compare_functions(a, b, rd.MIRROR_TARGETS + rd.fix_targets())
    say("report: messages")
    messages = rd.compare_messages(rd.message_templates(a), rd.message_templates(b))
    say("report: flags")
    try:
        flags = rd.compare_flags(rd.serve_flag_table(old_root), rd.serve_flag_table(new_root))
    except SystemExit as e:  # build_vllm_flags stops where a tree has no `vllm serve` parser it can read
        flags = {**rd.compare_flags({}, {}), "error": str(e)}
    say("report: env vars")
    ea, eb = rd.env_table(a), rd.env_table(b)
    env = rd.compare_env(ea, eb, named_env([ea, eb]))
    say("report: metrics, timeline lines, fixes, startup plans")
    names = metric_names()
    metrics = rd.compare_metrics(rd.metric_sites(a, names), rd.metric_sites(b, names))
    regexes = timeline_regexes()
    lines = rd.compare_log_lines(rd.log_lines(a, regexes), rd.log_lines(b, regexes))
    fixes = {"old": rd.fix_facts(a), "new": rd.fix_facts(b)}
    plans = {"old": rd.startup_plan_schema(a), "new": rd.startup_plan_schema(b)}
    return {"schema_version": rd.SCHEMA_VERSION, "old": old, "new": new, "functions": functions,
            "messages": messages, "flags": flags, "env": env, "metrics": metrics, "log_lines": lines,
            "fixes": fixes, "startup_plan": plans}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="The default run (no --report-only) rewrites the tables in the repository: scripts/vllm_releases.txt, "
        "the flags table, the message index, the log-lines file and the planner oracle's tests/data/planner/VERSION.json; "
        "it needs the network (pip download vllm==VERSION) unless --wheel PATH.whl is given or the release's sources "
        "are already unpacked under --wheels. --report-only reads only what is unpacked and writes nothing.")
    ap.add_argument("version", nargs="?", help="the release to add, e.g. 0.34.0")
    ap.add_argument("--wheel", type=Path, help="the release's wheel (default: pip download vllm==VERSION --no-deps)")
    ap.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="download/unpack folder (default %(default)s)")
    ap.add_argument("--previous", help="compare against this release (default: the known one before VERSION)")
    ap.add_argument("--json", action="store_true", help="the report as JSON")
    ap.add_argument("--report-only", action="store_true", help="no download, no rebuild, no oracle: the report")
    ap.add_argument("--log-lines", action="store_true", help="only rebuild vllm_log_lines.json for every release")
    args = ap.parse_args(argv)
    if args.log_lines:
        data = log_lines_file(args.wheels, read_releases(), timeline_regexes())
        write_json(data, LOG_LINES)
        say(f"wrote {LOG_LINES} ({len(data['releases'])} releases)")
        return 0
    if not args.version:
        ap.error("give the release to add (or --log-lines)")
    v = args.version
    if args.wheel is not None and not args.wheel.is_file():
        ap.error(f"--wheel {args.wheel}: no such file")
    steps: list[dict] = []
    if args.report_only:
        if not (release_source(args.wheels, v) / "vllm").is_dir():
            ap.error(f"--report-only: {release_source(args.wheels, v)} holds no vllm/ (run without it first)")
    else:
        ensure_source(v, args.wheels, args.wheel)
        if register(v):
            say(f"releases: added {v} to {RELEASES_FILE.relative_to(REPO)}")
        py = sys.executable
        extra = [] if args.wheels == DEFAULT_WHEELS else ["--wheels", str(args.wheels)]
        steps.append(run_step("flags table", [py, "scripts/build_vllm_flags.py", "--no-download", *extra]))
        steps.append(run_step("message index", [py, "scripts/build_message_index.py", "--no-download",
                                                "--only", "vllm", *extra]))
        write_json(log_lines_file(args.wheels, read_releases(), timeline_regexes()), LOG_LINES)
        steps.append({"step": "log lines", "command": "python scripts/add_release.py --log-lines", "rc": 0})
        steps.append(run_step("planner oracle", [py, "scripts/planner_oracle.py", v]))
    known = read_releases()
    if v not in known:
        ap.error(f"{v} is not in {RELEASES_FILE.name}: run without --report-only first")
    prev = args.previous or next((r for r in reversed(known) if version_key(r) < version_key(v)), None)
    if prev is None:
        ap.error(f"no known release before {v} to compare with")
    report = delta(release_source(args.wheels, prev), release_source(args.wheels, v), prev, v)
    report["steps"] = steps
    report["deepgemm"] = deepgemm_header(args.wheel)
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=1))
    else:
        from release_report import render

        print(render(report), end="")
    failed = [s["step"] for s in steps if s["rc"] != 0]
    if failed:
        say(f"failed steps: {', '.join(failed)} (see the report's Steps)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
