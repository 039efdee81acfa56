"""Where a `dsv4ctl` process starts (the console script and `python -m dsv4ctl`): the collector's policy, then the CLI.

A command that ends within seconds or minutes on bounded memory (`diagnose`, `fit-length`, `gpus`, `check`, and
`--help`/`--version`) runs with Python's cyclic garbage collector off. Start-up allocates some 100,000 objects that
live until the process exits (modules, classes, Typer's and pydantic's tables); the collector's passes over them
free nothing and took about a tenth of a short `diagnose` (the median of 25 runs on the 100 KB excerpts log of
benchmarks/startup_bench.py: 259 ms with it, 228 ms without, 2026-12-02). These commands make little cyclic
garbage: reference counting frees the rest as it always does, and `diagnose` of the 1 GiB serving log peaked at the
same resident memory either way (68 MB). Every other command (`serve` runs vLLM in this process, `watch` runs
until stopped, `collect` and `doctor` run tools) keeps the collector as Python starts it.

The policy is this process's only: `dsv4ctl.cli.main`, which tests and other programs call, leaves it alone.
"""

import gc
import sys

# Commands that end on their own with bounded memory: the collector stays off for them (see above).
BOUNDED_COMMANDS = frozenset({"diagnose", "fit-length", "gpus", "check"})


def _bounded(args: list[str]) -> bool:
    """Whether the command these arguments name is bounded (no command at all: `--help`, `--version`)."""
    for arg in args:
        if arg == "--":
            return False
        if not arg.startswith("-"):
            return arg in BOUNDED_COMMANDS
    return True


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: the CLI's exit status, with the collector off for a bounded command."""
    off = gc.isenabled() and _bounded(sys.argv[1:] if argv is None else argv)
    if off:
        gc.disable()  # before the CLI's imports: they are most of what the collector would walk
    try:
        from dsv4ctl.cli import main as cli_main

        return cli_main(argv)
    finally:
        if off:
            gc.enable()


if __name__ == "__main__":
    raise SystemExit(main())
