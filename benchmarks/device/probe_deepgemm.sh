#!/usr/bin/env bash
# Kernel probe of DeepGEMM's SM90 scheduler-metadata kernel on a real SM90 GPU (H100/H200/GH200),
# against the headers vendored in two vLLM wheels: 0.27.1 (DeepGEMM 2.6.1, expected AFFECTED) and
# 0.33.0 (DeepGEMM 2.8.1, expected not affected).
#
# Needs, on the GPU node: python3 (standard library only), nvcc (sm_90a), and the folder .device/
# prepared from the wheels (ignored by git; carried to the node):
#   .device/vllm-0.27.1/include/deep_gemm/   (vllm-0.27.1 wheel: vllm/third_party/deep_gemm/include/deep_gemm)
#   .device/vllm-0.33.0/include/deep_gemm/   (vllm-0.33.0 wheel: same path)
#   .device/cutlass/include/{cute,cutlass}/  (identical in both wheels, shared)
# Run from the repository root:  bash benchmarks/device/probe_deepgemm.sh
# JSON results go to $OUT (or ./benchmarks/out) as probe-<version>.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-benchmarks/out}
mkdir -p "$OUT_DIR"

nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader || true
command -v nvcc >/dev/null && nvcc --version | tail -2

for version in 0.27.1 0.33.0; do
  echo
  echo "=== DeepGEMM headers from vLLM ${version} ==="
  "$PY" -m dsv4ctl.probe deepgemm --mode kernel \
    --include ".device/vllm-${version}/include" --cutlass-include .device/cutlass/include \
    --json > "$OUT_DIR/probe-${version}.json"
  rc=$?
  "$PY" - "$OUT_DIR/probe-${version}.json" "$rc" <<'PYEOF'
import json, sys
from dsv4ctl.probe.deepgemm import ProbeCase, ProbeResult
from dsv4ctl.probe.text import plain_lines  # the same lines and table as `dsv4ctl probe deepgemm`
doc = json.load(open(sys.argv[1]))
print(f"mode={doc['mode']} affected={doc['affected']} exit={sys.argv[2]}")
cases = tuple(ProbeCase(c["batch_size"], c["fill"], c["outcome"], c["detail"]) for c in doc["cases"])
tried = tuple((m["mode"], m["reason"]) for m in doc["unavailable_modes"])
print("\n".join(plain_lines(ProbeResult(doc["mode"], doc["affected"], doc["reason"], cases, tried=tried,
                                         details=doc["details"]))))
PYEOF
done
