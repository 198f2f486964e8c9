#!/usr/bin/env bash
# Nsight Compute of GEMM kernels with the stall reasons, instruction mix and hottest SASS lines:
# standalone SM90 binaries (variant:MxNxK:BM,BN,CL), cuBLAS blockwise _scaled_mm ("cublas:MxNxK")
# and cuBLAS tensorwise _scaled_mm, the plain FP8 GEMM without per-block scales ("cublastw:MxNxK").
# Clocks are left as they are. NCU_CACHE=none keeps L2 warm between the profiler's passes (what
# CUDA-graph replays see; the default flushes it, a cold start from DRAM). The SMs' active-cycle
# spread (min / max beside the mean: how far the slowest CTAs run past the rest) is collected too.
#   [NCU_CACHE=none] [NCU_CYCLES_ONLY=1] bash tools/ncu_gemm.sh OUTDIR RUN...
set -uo pipefail
OUTDIR=$1
shift
BIN=${SM90_BIN:-.carry/sm90bin}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
SECTIONS=(--cache-control "${NCU_CACHE:-all}" --set detailed --section WarpStateStats --section InstructionStats --section SourceCounters
  --metrics sm__cycles_active.min,sm__cycles_active.max)
# NCU_CYCLES_ONLY=1: the launch's elapsed cycles and the SMs' active cycles alone, all from one replay
# (the detailed set needs many, and need not take these metrics from the same one)
CYCLES=gpc__cycles_elapsed.max,sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max,gpu__time_duration.sum
[ "${NCU_CYCLES_ONLY:-0}" = 1 ] && SECTIONS=(--cache-control "${NCU_CACHE:-all}" --metrics "$CYCLES")
for run in "$@"; do
  IFS=: read -r v shape cfg <<< "$run"
  tag=${v}_${shape}${cfg:+_${cfg//,/x}}
  if [ "$v" = cublas ] || [ "$v" = cublastw ]; then
    timeout 150 "$NCU" --clock-control none -k regex:"gemm|sm90|cutlass" -s 3 -c 1 "${SECTIONS[@]}" -o "/tmp/ncu_$tag" -f \
      python3 - "${shape//x/ }" "$v" > "/tmp/ncu_$tag.log" 2>&1 <<'PY'
import sys, torch, ltx_kernels as lk
m, n, k = (int(v) for v in sys.argv[1].split())
one = torch.ones((), device="cuda")
qa, sa = lk.quantize_blockwise(torch.randn(m, k, device="cuda"))
qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
sa_m = sa.t().contiguous().t()
for _ in range(5):
    if sys.argv[2] == "cublastw":
        torch._scaled_mm(qa, qb.t(), one, one, out_dtype=torch.bfloat16)
    else:
        torch._scaled_mm(qa, qb.t(), sa_m, sb.t(), out_dtype=torch.bfloat16)
torch.cuda.synchronize()
PY
  else
    timeout 150 "$NCU" --clock-control none -k regex:fp8_gemm_kernel -s 5 -c 1 "${SECTIONS[@]}" -o "/tmp/ncu_$tag" -f \
      "$PWD/$BIN/sm90_$v" ${shape//x/ } ${cfg//,/ } 3 > "/tmp/ncu_$tag.log" 2>&1
  fi
  echo "ncu $run rc=$?"
  "$NCU" -i "/tmp/ncu_$tag.ncu-rep" --print-details all > "$OUTDIR/ncu_$tag.txt" 2>&1
  if [ "${NCU_CYCLES_ONLY:-0}" = 1 ]; then
    grep -E "gpc__cycles_elapsed|sm__cycles_active|gpu__time_duration" "$OUTDIR/ncu_$tag.txt"
    continue
  fi
  "$NCU" -i "/tmp/ncu_$tag.ncu-rep" --page source --csv --print-source sass > "/tmp/ncu_src_$tag.csv" 2>&1 &&
    gzip -c "/tmp/ncu_src_$tag.csv" > "$OUTDIR/ncu_src_$tag.csv.gz"
  grep -E "^  [a-z].*\(|SM Frequency|Duration|Compute \(SM\) Throughput|Tensor|Issue Slots Busy|L2 Cache Throughput" \
    "$OUTDIR/ncu_$tag.txt" | head -12
done
