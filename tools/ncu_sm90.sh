#!/usr/bin/env bash
# Nsight Compute view of the SM90 GEMM at 16384x4096x4096, one launch per tile config: speed of
# light (tensor pipe, L2, DRAM) and the memory workload. Clocks are left as they are.
#   bash tools/ncu_sm90.sh OUTDIR [configs]     configs: "256,128,2 128,128,1" (default)
set -uo pipefail
OUTDIR=${1:-${OUT:-bench/out}}
CONFIGS=${2:-"256,128,2 128,128,1"}
mkdir -p "$OUTDIR"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
for cfg in $CONFIGS; do
  echo "== ncu $cfg"
  "$NCU" --clock-control none -k regex:fp8_gemm_kernel -s 2 -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis python3 - "$cfg" <<'PY' 2>&1 | grep -E "Throughput|Busy|Pipe|Hit Rate|Bandwidth|Duration|Issue|==PROF==|Error|error" | head -40
import sys, torch, ltx_kernels as lk
from ltx_kernels import _ext
cfg = tuple(int(v) for v in sys.argv[1].split(","))
mod = _ext.load("_C_gemm_sm90")[0]
m, n, k = 16384, 4096, 4096
qa, sa = lk.quantize_blockwise(torch.randn(m, k, device="cuda"))
qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    mod.fp8_gemm_nt(qa, sa, qb, sb, None, d, *cfg)
torch.cuda.synchronize()
PY
done
