"""serve's probe routes: the engine-progress judgement kept in vLLM's API server process and served to Kubernetes.

- `judgement`: evidence -> liveness, readiness and startup answers (pure).
- `reading`: the evidence read in the process (vLLM's engine client, its counters in prometheus_client's registry).
- `routes`: the ASGI middleware vLLM installs (`--middleware`), the background updater, the paths.

docs/serve.md ("Probe routes") and docs/kubernetes.md say what each route answers and how to probe them.
"""
