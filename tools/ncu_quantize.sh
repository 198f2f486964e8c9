#!/usr/bin/env bash
# Nsight Compute profile of quantize_adanorm next to quantize_blockwise on [1, 32768, 4096] bf16
# (same bytes moved; adanorm trails), one launch each with the shipped configs.
#   bash tools/ncu_quantize.sh OUTDIR
set -uo pipefail
OUTDIR=${1:-${OUT:-bench/out}}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
cat > "$OUTDIR/ncu_quantize.py" <<'PY'
import torch, ltx_kernels
x = torch.randn(1, 32768, 4096, device="cuda", dtype=torch.bfloat16)
sc = torch.randn(1, 1, 4096, device="cuda", dtype=torch.bfloat16) * 0.1
sh = torch.randn(1, 1, 4096, device="cuda", dtype=torch.bfloat16) * 0.1
for _ in range(3):
    ltx_kernels.quantize_blockwise(x)
    ltx_kernels.quantize_adanorm(x, sc, sh)
torch.cuda.synchronize()
PY
PYTHONPATH=$PWD "$NCU" --set full -k regex:"_adanorm_kernel|_quantize_kernel" -s 2 -c 2 -o "$OUTDIR/quant" -f \
  python3 "$OUTDIR/ncu_quantize.py" > "$OUTDIR/ncu_quantize.log" 2>&1; tail -3 "$OUTDIR/ncu_quantize.log"
"$NCU" -i "$OUTDIR/quant.ncu-rep" --page details > "$OUTDIR/ncu_quantize_details.txt" 2>&1
grep -E "^  [_a-z]|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Issue Slots Busy|No Eligible|Block Limit|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit" \
  "$OUTDIR/ncu_quantize_details.txt" | head -60
