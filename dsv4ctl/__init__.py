"""dsv4ctl: launch and diagnose vLLM servers that run DeepSeek-V4."""

__version__ = "0.6.0"
