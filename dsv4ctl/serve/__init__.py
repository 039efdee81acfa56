"""`dsv4ctl serve`: run vLLM's own OpenAI server in this process, with dsv4ctl's fixes, a preflight
length decision, a complete log file, live progress and a diagnosis when startup fails.

Modules:
- `vllm_entry`: vLLM's own argument parser and CLI entry point (the only vLLM imports).
- `flags`: edits of the raw vLLM flag list (`--max-model-len`).
- `preflight`: the length decision made before vLLM starts (pure; uses `dsv4ctl.planning`).
- `capture`: fd-level tee of this process and its children into the log file and the terminal.
- `children`: pid tracking and reaping of vLLM's processes.
- `session`: the run itself (capture + progress + launch + shutdown) returning a `ServeOutcome`.
- `memory`: the good starts remembered per launch (the log's path), in dsv4ctl's cache directory, bounded.
- `recall`: a failed start compared with the last good start of its launch (`dsv4ctl.compare`, diff's core).
"""
