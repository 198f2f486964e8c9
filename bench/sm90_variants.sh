#!/usr/bin/env bash
# Time the standalone SM90 GEMM variants (bench/sm90_standalone.cu, built into DIR beforehand) and
# take an Nsight Compute source-level profile of the base variant.
#   bash bench/sm90_variants.sh DIR OUTDIR
set -uo pipefail
DIR=$1
OUTDIR=${2:-${OUT:-bench/out}}
for shape in "16384 4096 4096" "4096 4096 4096"; do
  for cfg in "256 128 1" "256 128 2" "128 128 1"; do
    for v in base nopromote noepi none; do
      [ -x "$DIR/sm90_$v" ] && printf "%-10s " "$v" && "$DIR/sm90_$v" $shape $cfg 20
    done
  done
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
"$NCU" --clock-control none -k regex:fp8_gemm_kernel -s 3 -c 1 --section SourceCounters --section WarpStateStats \
  --section SchedulerStats --section SpeedOfLight -o "$OUTDIR/gemm" -f "$DIR/sm90_base" 16384 4096 4096 256 128 1 3 \
  > "$OUTDIR/ncu.log" 2>&1; tail -3 "$OUTDIR/ncu.log"
"$NCU" -i "$OUTDIR/gemm.ncu-rep" --page details > "$OUTDIR/ncu_details.txt" 2>&1
"$NCU" -i "$OUTDIR/gemm.ncu-rep" --page source --csv --print-source sass > "$OUTDIR/ncu_source.csv" 2>&1
grep -iE "stall|warp cycles|eligible|issued" "$OUTDIR/ncu_details.txt" | head -30
wc -l "$OUTDIR/ncu_source.csv"; head -c 600 "$OUTDIR/ncu_source.csv"
