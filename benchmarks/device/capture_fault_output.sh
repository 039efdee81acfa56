#!/usr/bin/env bash
# Capture, on a real SM90 GPU, the text the CUDA driver and torch print for the faults `diagnose` recognises,
# so the fixtures quote real output instead of reconstructed text:
#   1. DeepGEMM's SM90 paged-MQA metadata kernel (vLLM 0.27.1 headers, batch 256, zero lengths) faulting with
#      the driver's core dump on (CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1, CUDA_COREDUMP_SHOW_PROGRESS=1);
#   2. the same core opened with cuda-gdb when the node has it (the faulting kernel's name);
#   3. torch's own error text for an illegal memory access and a device-side assert.
# Needs the .device/ folder of probe_deepgemm.sh (0.27.1 headers + cutlass). Run from the repository root;
# the texts go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
OUT_DIR=${OUT:-benchmarks/out}
mkdir -p "$OUT_DIR" /tmp/dsv4ctl-cap
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
python3 - <<'PYEOF'
from pathlib import Path
from dsv4ctl.probe import deepgemm as dg
nvcc = dg.find_nvcc()
inc = [Path(".device/vllm-0.27.1/include"), Path(".device/cutlass/include")]
v = dg.inspect_include_dir(inc[0])
cmd = dg.build_launcher(nvcc, inc, 132, dg.launch_form(v), Path("/tmp/dsv4ctl-cap/launcher"))
print("built:", " ".join(cmd)[:200])
PYEOF
cd /tmp/dsv4ctl-cap
CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1 CUDA_COREDUMP_SHOW_PROGRESS=1 CUDA_COREDUMP_FILE=/tmp/dsv4ctl-cap/core.%p \
  ./launcher 256 0 > "$OUT_DIR/coredump-stdout.txt" 2> "$OUT_DIR/coredump-stderr.txt"
echo "launcher exit $?" >> "$OUT_DIR/coredump-stdout.txt"
ls -la /tmp/dsv4ctl-cap >> "$OUT_DIR/coredump-stdout.txt"
core=$(ls /tmp/dsv4ctl-cap/core.* 2>/dev/null | head -1)
GDB=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
if [ -n "$core" ] && [ -n "$GDB" ]; then
  timeout 120 "$GDB" -batch -ex "target cudacore $core" -ex "bt" -ex "info cuda kernels" > "$OUT_DIR/cuda-gdb.txt" 2>&1
else
  echo "core=$core gdb=$GDB" > "$OUT_DIR/cuda-gdb.txt"
fi
cat > bad.cu <<'CU'
__global__ void dsv4ctl_bad_write(int* p) { p[threadIdx.x] = 1; }
extern "C" void launch_bad() { dsv4ctl_bad_write<<<1, 32>>>((int*)0x10); }
CU
nvcc -shared -Xcompiler -fPIC -o libbad.so bad.cu
cd - >/dev/null
python3 - > "$OUT_DIR/torch-errors.txt" 2>&1 <<'PYEOF'
import ctypes, subprocess, sys
code_ima = r'''
import ctypes, torch
torch.zeros(1, device="cuda")
ctypes.CDLL("/tmp/dsv4ctl-cap/libbad.so").launch_bad()
torch.cuda.synchronize()
'''
code_assert = r'''
import torch
x = torch.zeros(4, device="cuda")
i = torch.tensor([7], device="cuda")
y = x[i]
torch.cuda.synchronize()
'''
import torch
print("torch", torch.__version__, torch.version.cuda)
for name, code in (("illegal_memory_access", code_ima), ("device_side_assert", code_assert)):
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    print(f"===== {name} exit {p.returncode}")
    print(p.stdout[-3000:]); print(p.stderr[-6000:])
PYEOF
echo done
