"""Reading vLLM logs: lines -> records -> starts. Pure reading: imports nothing above it but the catalogue's words.

- `reader`: streaming, bounded-memory line reader and the prefix parser (`LogLine`, `parse_line`,
  `iter_log_lines`);
- `formats`: files as shippers write them (JSON records, Docker's json-file, CRI, Loki/Grafana/Datadog exports),
  told from their first bytes and unwrapped into the lines the program printed;
- `prefilter`: the fast line selector (hyperscan when installed, `re` otherwise), on the catalogue's words;
- `parallel`: the same selection of a big regular file, its parts scanned in several processes;
- `records`: errors assembled from whatever is left of them (tracebacks, CUDA/HIP/NPU/NCCL/C++ errors, core dumps,
  the kernel's crash reports);
- `starts`: which launch of vLLM a line belongs to;
- `timeline`: `StartupTracker` / `StartupTimeline`, the startup reconstructed line by line;
- `deployment`: the launch's own flags, as suggested commands repeat them;
- `facts`: the figures a log showed that planning takes as data (`LogCalibration`);
- `examples`: the example logs shipped with the package (`dsv4ctl diagnose --example NAME`).

What the lines mean is `dsv4ctl.diagnosis`'s; what to do about it, `dsv4ctl.advice`'s.

Nothing here imports vLLM, torch or pynvml.
"""
