"""vLLM's KV-cache planner, mirrored per release without importing vLLM: the layers' specs (`kv_specs`,
`layers`), the planner (`kv_planner`, its answers kept in `plans`), the figures vLLM logs (`capacity`), which
release plans (`versions`) and vLLM's own startup plans (`startup_plans`). Changes when vLLM releases; reads a
checkpoint's geometry, never the plan dsv4ctl makes."""
