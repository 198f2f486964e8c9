#!/usr/bin/env bash
# Where a GEMM's operand bytes come from, ours beside LTX-2's deep_gemm, one launch each under
# Nsight Compute with L2 kept warm between passes (as in CUDA-graph replays): L2 read sectors
# (hits, misses), sectors crossing between the L2's two halves (ltcfabric), DRAM bytes, bytes
# delivered to the SMs, and the spread of the SMs' active cycles (min / mean / max against the
# launch's elapsed cycles: how far the slowest CTAs run past the rest).
#
#   bash tools/ncu_l2_traffic.sh OUT UP MxNxK:SPEC,SPEC... [MxNxK:SPEC,...]
#
# UP: the folder tools/upstream/build_upstream.sh prints; SPEC as tools/upstream/ncu_vs_deep_gemm.py
# takes it (BMxBNxCL, or LIB.so@BMxBNxCL for a variant library). Writes OUT/l2_MxNxK.csv per shape
# (ncu --csv: one row a kernel and metric); `python tools/ncu_l2_table.py OUT/l2_*.csv` tabulates.
set -uo pipefail
OUT=$1
UP=$2
shift 2
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
MET=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min
MET+=,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
MET+=,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__t_sectors_srcunit_ltcfabric.sum
MET+=,dram__bytes_read.sum,dram__bytes_write.sum,l1tex__m_xbar2l1tex_read_bytes.sum
for run in "$@"; do
  shape=${run%%:*}
  IFS=, read -r -a specs <<< "${run#*:}"
  read -r _ n k <<< "${shape//x/ }"
  dg=$(python -c "import sys; sys.path.insert(0, 'tools'); from gemm_protocols import deep_gemm_accepts; print(int(deep_gemm_accepts($n, $k)))")
  count=$(( ${#specs[@]} + 1 + dg ))  # the host's pick, the specs, deep_gemm where it accepts the shape
  timeout 200 "$NCU" --clock-control none --cache-control none -k regex:"fp8_gemm_kernel|sm90_fp8_gemm_1d2d" \
    -s "$count" -c "$count" --metrics "$MET" --csv \
    python tools/upstream/ncu_vs_deep_gemm.py "$UP" ${shape//x/ } "${specs[@]}" > "$OUT/l2_$shape.csv" 2> "$OUT/l2_$shape.err"
  echo "ncu $shape rc=$?"
done
