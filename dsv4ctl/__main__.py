"""Where a `dsv4ctl` process starts (the console script and `python -m dsv4ctl`): the collector's policy, then the CLI.

A command that ends within seconds or minutes on bounded memory (`diagnose`, `fit-length`, `gpus`, `check`, and
`--help`/`--version`) runs with Python's cyclic garbage collector off. Start-up allocates some 100,000 objects that
live until the process exits (modules, classes, Typer's and pydantic's tables); the collector's passes over them
free nothing and took about a tenth of a short `diagnose` (the median of 25 runs on the 100 KB excerpts log of
benchmarks/startup_bench.py: 259 ms with it, 228 ms without, 2026-12-02). These commands make little cyclic
garbage: reference counting frees the rest as it always does, and `diagnose` of the 1 GiB serving log peaked at the
same resident memory either way (68 MB). Every other command (`serve` runs vLLM in this process, `watch` runs
until stopped, `collect` and `doctor` run tools) keeps the collector as Python starts it.

`diagnose [--json] LOG` of one big regular file also starts its scanning processes here, before the CLI's imports
(`dsv4ctl.diagnosis.run.prestart`): they scan from the log's end while this process starts (Typer, pydantic, the
CLI: about 0.15 s on the machine the benchmarks ran on), and the scan `diagnose` then makes adopts them. Any other
command line starts nothing early. From then on SIGTERM, SIGHUP and Ctrl-C stop the process as they stop diagnose
(its scanners ended, one error line, 143/129/130, the JSON error document with --json), even before the CLI has
installed its own handlers. Ctrl-C during any command's start-up (the CLI's imports, Typer's first parse of the
command line) is the same one line and 130.

A `diagnose` process also ends without Python's finalization, which tears down every module and object one by one
and took longer than the rest of a short diagnose's report (0.12-0.17 s of a 100 KB log's 0.4 s, and 0.07-0.09 s
for a bare Typer + Rich app; 2026-12-02, the benchmark machine): the exit handlers registered run (`re_cache`'s
save, `multiprocessing`'s end of its children), stdout and stderr are flushed, and the process exits with the
command's status (`_exit_now`). diagnose leaves no file of its own open: what it writes (`--svg`, the caches) is
written whole and closed where it is written.

`check --once URL... [--timeout S] [--json] [--liveness]`, a liveness probe's command line run every few seconds,
runs here without the CLI's imports (`commands.check_once.main_once`: one GET /health through the standard
library's HTTP client, the error funnel's words and codes without Typer, Rich, pydantic, httpx or prometheus_client;
0.26 s of CPU down to about 0.07 s, benchmarks/check_once_bench.py). Any other form of it (`--help`, another
option, a mistake) goes to the CLI, which runs the same look.

All four are this process's only: `dsv4ctl.cli.main`, which tests and other programs call, does none of them, and
neither does `main(argv)` with its arguments given.
"""

import sys

try:
    import atexit
    import gc
    import os
    import signal
    import threading

    from dsv4ctl.errors import STOP_SIGNALS, Stopped, later_if_dropped, raise_stopped
except KeyboardInterrupt:  # Ctrl-C in dsv4ctl's very first imports: said as the CLI says it (dsv4ctl.render's words)
    sys.stderr.write("Error: interrupted\n")
    if "--json" in sys.argv[1:]:
        import json

        error = {"message": "interrupted", "hint": None, "exit_code": 130}
        sys.stdout.write(json.dumps({"schema_version": 1, "error": error}, indent=2) + "\n")
    raise SystemExit(130) from None

# Commands that end on their own with bounded memory: the collector stays off for them (see above).
BOUNDED_COMMANDS = frozenset({"diagnose", "fit-length", "gpus", "check"})
# Commands whose process ends without the interpreter's finalization (see above).
QUICK_EXIT_COMMANDS = frozenset({"diagnose"})


def _bounded(args: list[str]) -> bool:
    """Whether the command these arguments name is bounded (no command at all: `--help`, `--version`)."""
    for arg in args:
        if arg == "--":
            return False
        if not arg.startswith("-"):
            return arg in BOUNDED_COMMANDS
    return True


def _early_log(args: list[str]) -> str | None:
    """The log of `diagnose [--json] LOG` (one path, not stdin, no other option), else None."""
    if not args or args[0] != "diagnose":
        return None
    paths = [a for a in args[1:] if not a.startswith("-")]
    options = [a for a in args[1:] if a.startswith("-")]
    return paths[0] if len(paths) == 1 and set(options) <= {"--json"} else None


def _once_args(args: list[str]) -> tuple[list[str], float, bool] | None:
    """`check --once`'s URLs, timeout and --json when the command line is one the fast path takes, else None (the
    CLI reads it). The check is done without loading the command's module for every other command line."""
    if not args or args[0] != "check" or "--once" not in args:
        return None
    from dsv4ctl.commands.check_once import fast_args

    return fast_args(args)


def _stopped(message: str, code: int, json_mode: bool, scanners: bool = True) -> int:
    """What a command says when a signal stops it before the CLI could: one error line, and with --json the error
    document (a diagnose's scanning children ended first)."""
    from dsv4ctl.render import emit_json_error, error_line

    if scanners:
        from dsv4ctl.logs.parallel import end_scanners

        end_scanners()
    error_line(message)
    if json_mode:
        emit_json_error(message, None, code)
    return code


def _interrupt(signum: int, frame: object) -> None:
    """Ctrl-C as Python's own handler takes it (KeyboardInterrupt), except where the interpreter would only print the
    exception and go on (an import's weakref callback, a `__del__`): there it is taken a millisecond later."""
    if later_if_dropped(signum, frame, _interrupt):
        return
    if _in_shutdown(frame):  # the command is done and the interpreter ends: an exception here is only printed
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(130)
    raise KeyboardInterrupt


def _in_shutdown(frame: object) -> bool:
    """Whether `frame` is the interpreter's wait for threads at exit (`threading._shutdown`)."""
    while frame is not None:
        code = frame.f_code  # type: ignore[attr-defined]
        if code.co_name == "_shutdown" and code.co_filename.endswith("threading.py"):
            return True
        frame = frame.f_back  # type: ignore[attr-defined]
    return False


def _exit_now(code: int) -> int:
    """End this process with `code` now: the exit handlers, then stdout and stderr flushed, then `os._exit`. Where
    that cannot be done as the interpreter would (no `atexit._run_exitfuncs`, or another thread still running, which
    the interpreter would wait for), returns `code` for the ordinary exit instead."""
    run_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_handlers is None or any(t.is_alive() and not t.daemon for t in threading.enumerate()
                                   if t is not threading.main_thread()):
        return code
    run_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # its reader gone (the CLI already said nothing more goes there), or closed
            pass
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: the CLI's exit status, with the collector off for a bounded command, a big log's
    scan begun before the CLI's imports, and a `diagnose` process ended without the interpreter's finalization
    (`argv` None only: the process's own command line)."""
    args = sys.argv[1:] if argv is None else argv
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)
    off = gc.isenabled() and _bounded(args)
    if off:
        gc.disable()  # before the CLI's imports: they are most of what the collector would walk
    early = _early_log(args)
    once = _once_args(args) if argv is None else None
    try:
        if once is not None:
            from dsv4ctl.commands.check_once import main_once

            return main_once(*once)
        if early is not None:
            from dsv4ctl.diagnosis.run import prestart
            from dsv4ctl.group.detect import is_group

            # Before the fork: from the first child on, a signal stops diagnose as diagnose's own handlers would (the
            # children set theirs back to the default themselves).
            before = {sig: signal.signal(sig, raise_stopped) for sig in STOP_SIGNALS}
            try:
                started = not is_group([early]) and prestart(early)  # a bundle is read otherwise: nothing would adopt it
            except Exception:  # noqa: BLE001 - only a head start: diagnose's own scan reports what is wrong
                started = False
            if not started:
                for sig, handler in before.items():
                    signal.signal(sig, handler)
        from dsv4ctl.cli import main as cli_main

        code = cli_main(argv)
    except KeyboardInterrupt:  # Ctrl-C before the CLI's own funnel was there (its imports): said as it says it
        code = _stopped("interrupted", 130, "--json" in args, scanners=early is not None)
    except Stopped as stop:
        if early is None:
            raise
        code = _stopped(f"stopped by {signal.Signals(stop.signum).name}", 128 + stop.signum, "--json" in args)
    finally:
        if early is not None:
            from dsv4ctl.logs.parallel import end_scanners

            end_scanners()  # a scan the command did not adopt (it failed first, or read the log otherwise)
        if off:
            gc.enable()
    for sig in STOP_SIGNALS if early is not None else ():
        if signal.getsignal(sig) is raise_stopped:  # ours, from the prestart
            signal.signal(sig, signal.SIG_DFL)
    if argv is None and args and args[0] in QUICK_EXIT_COMMANDS:
        return _exit_now(code)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
