#!/usr/bin/env python3
"""Benchmark `dsv4ctl diagnose BUNDLE` (a deployment of 16 ranks, 50 MB of log each) against `dsv4ctl
diagnose` of the same logs concatenated into one file, in the same run: a bundle must not cost more than
its bytes.

    python benchmarks/group_bench.py                      # 16 ranks x 50 MB
    python benchmarks/group_bench.py --ranks 4 --size 2MB --json   # a quick run

The logs are benchmarks/prodlogs.py's `serving` scenario (a startup, days of serving with request-time
tracebacks, a restart), one per rank; the bundle is written by `dsv4ctl collect` of the 16 files (redacted,
gzip-compressed: what an operator gets; and once more as a plain `.tar`, which costs no decompression to
read back), the concatenation by `cat`. Each command runs in its own process
after an untimed warm-up read of its input; reported: wall seconds of each, the ratio bundle / concatenated
(1.0 = the bundle costs what its bytes cost read as one log), and, for scale, the time `collect` took.
Run it under `flock /tmp/dsv4ctl-heavy.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import prodlogs  # noqa: E402 - benchmarks/prodlogs.py, next to this script
from dsv4ctl.units import parse_size  # noqa: E402


def _timed(argv: list[str]) -> tuple[float, int, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, cwd=REPO)
    return time.perf_counter() - start, done.returncode, done.stdout.decode(errors="replace")


def _warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--size", default="50MB", help="each rank's log (default 50MB)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    py = [sys.executable, "-m", "dsv4ctl"]
    with tempfile.TemporaryDirectory(prefix="dsv4ctl-group-bench-") as tmp:
        root = Path(tmp)
        logs = []
        for rank in range(args.ranks):
            path = root / f"rank{rank:02d}.log"
            prodlogs.write("serving", path, size)
            logs.append(path)
        concat = root / "all.log"
        with open(concat, "wb") as out:
            for path in logs:
                with open(path, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 24)
        bundle, plain = root / "group.tar.gz", root / "group.tar"
        collect_s, code, _ = _timed([*py, "collect", *map(str, logs), "-o", str(bundle), "--max-log-bytes", f"{size * 2}B"])
        assert code == 0, "collect failed"
        _, code, _ = _timed([*py, "collect", *map(str, logs), "-o", str(plain), "--max-log-bytes", f"{size * 2}B"])
        assert code == 0, "collect failed"
        for path in (concat, bundle, plain):
            _warm(path)
        concat_s, concat_code, concat_out = _timed([*py, "diagnose", str(concat), "--json"])
        bundle_s, bundle_code, bundle_out = _timed([*py, "diagnose", str(bundle), "--json"])
        plain_s, plain_code, plain_out = _timed([*py, "diagnose", str(plain), "--json"])
        group = json.loads(bundle_out)
        result = {
            "ranks": args.ranks, "rank_bytes": size, "total_bytes": size * args.ranks,
            "bundle_bytes": bundle.stat().st_size, "plain_bundle_bytes": plain.stat().st_size,
            "concatenated_s": round(concat_s, 2), "bundle_s": round(bundle_s, 2), "plain_bundle_s": round(plain_s, 2),
            "ratio_bundle_to_concatenated": round(bundle_s / concat_s, 3),
            "ratio_plain_bundle_to_concatenated": round(plain_s / concat_s, 3),
            "collect_s": round(collect_s, 2),
            "concatenated_verdict": json.loads(concat_out)["verdict"], "bundle_verdict": group["verdict"],
            "plain_bundle_verdict": json.loads(plain_out)["verdict"],
            "bundle_members": len(group["members"]), "exit_codes": [concat_code, bundle_code, plain_code],
        }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:32} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
