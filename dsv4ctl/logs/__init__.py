"""Reading and diagnosing vLLM startup logs.

- `reader`: streaming, bounded-memory line reader and the prefix parser (`LogLine`, `parse_line`,
  `iter_log_lines`);
- `timeline`: `StartupTracker` / `StartupTimeline`, the startup reconstructed line by line;
- `signatures`: the catalogue of known failure signatures (data);
- `prefilter`: the fast line selector (hyperscan when installed, `re` otherwise);
- `parallel`: the same selection of a big regular file, its parts scanned in several processes;
- `diagnose`: `diagnose(sources)` / `diagnose_lines(lines)` -> `Diagnosis`;
- `examples`: the example logs shipped with the package (`dsv4ctl diagnose --example NAME`).

Nothing here imports vLLM, torch or pynvml.
"""
