#!/usr/bin/env bash
# SM90 GEMM evidence on an H100/H200: SASS (QGMMA, FFMA bank conflicts), ptxas registers/smem, memcheck on a small shape.
#   bash tools/sm90_check.sh OUTDIR
set -uo pipefail
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
SO=$(ls ltx_kernels/_C_gemm_sm90*.so 2>/dev/null | head -1)
# else the module compiled on first use (in LTX_KERNELS_CACHE_DIR)
[ -n "$SO" ] || SO=$(python3 -c "from ltx_kernels import _ext; m = _ext.load('_C_gemm_sm90')[0]; print(m.__file__ if m else '')")
[ -n "$SO" ] || { echo "ltx_kernels/_C_gemm_sm90 not built"; exit 1; }
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
"$CUOBJDUMP" -sass "$SO" > "$OUTDIR/sm90_gemm.sass" 2>&1
echo "SASS: $(grep -c QGMMA "$OUTDIR/sm90_gemm.sass") QGMMA, $(grep -c UTMALDG "$OUTDIR/sm90_gemm.sass") UTMALDG, $(grep -c 'SYNCS' "$OUTDIR/sm90_gemm.sass") SYNCS (mbarrier) instructions"
grep -o "QGMMA[.A-Z0-9x]*" "$OUTDIR/sm90_gemm.sass" | sort | uniq -c | head -5
# promotion FFMAs reading three same-bank registers (0 is what ptxas reaches when unconstrained)
python3 "$(dirname "$0")/sass_ffma_banks.py" "$OUTDIR/sm90_gemm.sass" | sed 's/_ZN13ltx_gemm_sm90.*fp8_gemm_kernel//' | cut -c1-80
# R2UR per instantiation: a cluster build should have its one-CTA tile's count (a cluster barrier
# met by every thread after the role branches once made ptxas move the producer's TMA coordinates
# to uniform registers before every load: 2.8-3.8x the count, docs/sm90-gemm.md)
awk '/Function :/ {f = $3; sub(/.*fp8_gemm_kernel/, "", f); sub(/EEEv.*/, "", f)} /R2UR/ {n[f]++}
     END {for (f in n) if (f !~ /splitk/) print "R2UR", n[f], f}' "$OUTDIR/sm90_gemm.sass" | sort -k3
# one line per instantiation: fp8_gemm_kernel<BM, BN, CLUSTER> and its registers / shared memory
"$CUOBJDUMP" -res-usage "$SO" 2>&1 | grep -A1 fp8_gemm_kernel | grep -o "ILi[0-9]*ELi[0-9]*ELi[0-9]\|REG:[0-9]*\|STACK:[0-9]*\|SHARED:[0-9]*" | paste - - - - 
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
"$SAN" --tool memcheck --error-exitcode 9 python3 - > "$OUTDIR/memcheck.log" 2>&1 <<'PY'
import torch, ltx_kernels as lk
from ltx_kernels import _ext
mod = _ext.load("_C_gemm_sm90")[0]
for m, n, k in ((1, 128, 128), (130, 384, 640), (300, 256, 1024)):
    qa, sa = lk.quantize_blockwise(torch.randn(m, k, device="cuda"))
    qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
    sa, sb = lk.gemm._tma_scales(sa), lk.gemm._tma_weight_scales(sb)  # the layouts the TMA reads
    for cfg in lk.gemm.SM90_TILES:
        for splits in (1, 2, 4) if k >= 1024 else (1,):  # split-K: fp32 slices, then the reduce kernel
            d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            mod.fp8_gemm_nt(qa, sa, qb, sb, torch.randn(n, device="cuda"), d, *cfg, splits)
torch.cuda.synchronize()
print("memcheck run done")
PY
rc=$?
grep -q "memcheck run done" "$OUTDIR/memcheck.log" || echo "memcheck: the script did not finish (its error is in memcheck.log)"
echo "memcheck rc=$rc: $(grep -E 'ERROR SUMMARY|memcheck run done' "$OUTDIR/memcheck.log" | tr '\n' ' ')"
