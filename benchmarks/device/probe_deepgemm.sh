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
doc = json.load(open(sys.argv[1]))
print(f"mode={doc['mode']} affected={doc['affected']} exit={sys.argv[2]}")
dev = doc.get("details", {}).get("device") or {}
if dev:
    print(f"device: {dev.get('name')} SM {dev.get('cc_major')}.{dev.get('cc_minor')} {dev.get('num_sms')} SMs; "
          f"{doc['details'].get('nvcc_version')}; launch form {doc['details'].get('launch_form')}")
print(f"{'B':>5} {'fill':>6}  {'result':<7} {'unguarded kernel':<16} detail")
for c in doc["cases"]:
    print(f"{c['batch_size']:>5} {c['fill']:>6}  {c['outcome']:<7} {c['expected_if_affected']:<16} {c['detail']}")
for m in doc.get("unavailable_modes", []):
    print(f"unavailable: {m['mode']}: {m['reason']}")
print("verdict:", doc["reason"])
PYEOF
done
