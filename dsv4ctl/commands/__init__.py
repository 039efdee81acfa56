"""One module per command, the way the hf CLI keeps its commands: each defines its function with its options and
help; `dsv4ctl.cli` registers them on the one Typer app and owns the error funnel. A command parses, calls the core
and renders; its heavy imports stay inside it, so `--help`, `diagnose` and `fit-length` start fast."""
