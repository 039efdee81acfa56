"""Generated catalogues of what vLLM and its neighbours print: `message_index` holds every message that vLLM
0.27.1-0.33.0 raises, asserts or logs at error level, and those of torch, transformers, huggingface_hub,
Ray, safetensors, Triton, the CUDA runtime and NCCL, each cited file:line from the installed sources
(built by scripts/build_message_index.py); `vllm_flags` holds the flags of `vllm serve` in those releases,
their defaults, choices and config fields, and the registries of names they take (built by
scripts/build_vllm_flags.py). Importing this package loads nothing; each table is read at its first lookup.
"""
