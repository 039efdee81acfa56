"""Probes that answer questions about this node without starting vLLM.

`deepgemm`: is this node's DeepGEMM affected by the SM90 scheduler-metadata out-of-bounds read?
Standard library only at import time; the probes start compilers and subprocesses themselves.
"""
