#!/usr/bin/env bash
# One GPU run beside LTX-2's own ltx-kernels (development only): builds both packages' CUDA
# extensions, then runs the named phases, writing everything under $OUT (default ./out).
#
#   bash tools/upstream/side_by_side.sh build block-eager block-compile gemm tests
#
# Phases: build (upstream through build_upstream.sh, ours through `python -m ltx_kernels build`,
# in parallel; both builds are also packed as ours_ext.tgz / upstream_so.tgz so a later run can
# reuse them with OURS_PREBUILT=tgz UPSTREAM_SO=tgz), first-use (bench/first_use.py), block-eager /
# block-compile (bench/ltx_core_block.py eager+graph+full with a profile / compile+captured),
# gemm (tools/gemm_protocols.py with the deep_gemm column), tests (the GPU suite).
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 LTX_KERNELS_CACHE_DIR=${LTX_KERNELS_CACHE_DIR:-/tmp/ltxk}
SCRATCH=${UPSTREAM_SCRATCH:-/tmp/ltx2}
BUDGET=${BUDGET:-240}

env_json() {
  python3 - "$1" <<'PY'
import json, subprocess, sys, time, torch, triton
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,power.limit,clocks.max.sm",
                      "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": torch.cuda.get_device_name(),
           "nvidia_smi": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
           "triton": triton.__version__, "commit": commit}, open(sys.argv[1], "w"), indent=1)
PY
}

upstream_path() {
  if [ -n "${UPSTREAM_SO:-}" ]; then
    mkdir -p /tmp/upstream_so && tar xzf "$UPSTREAM_SO" -C /tmp/upstream_so
    UPSTREAM_PREBUILT=/tmp/upstream_so UPSTREAM_SCRATCH=$SCRATCH bash tools/upstream/build_upstream.sh 2>> "$OUT/build_upstream.log" | tail -1
  else
    UPSTREAM_SCRATCH=$SCRATCH MAX_JOBS=${MAX_JOBS:-12} bash tools/upstream/build_upstream.sh 2>> "$OUT/build_upstream.log" | tail -1
  fi
}

[ -f "$OUT/env.json" ] || env_json "$OUT/env.json"
UP=""
for phase in "$@"; do
  echo "=== $phase $(date +%T)"
  case $phase in
    build)
      t0=$(date +%s)
      if [ -n "${OURS_PREBUILT:-}" ]; then
        mkdir -p "$LTX_KERNELS_CACHE_DIR" && tar xzf "$OURS_PREBUILT" -C "$LTX_KERNELS_CACHE_DIR"
      fi
      (python -m ltx_kernels build > "$OUT/build_ours.log" 2>&1; echo "ours rc=$?" >> "$OUT/build_ours.log") &
      UP=$(upstream_path)
      wait
      echo "upstream: $UP; ours: $(tail -1 "$OUT/build_ours.log"); $(( $(date +%s) - t0 )) s"
      (cd "$LTX_KERNELS_CACHE_DIR" && find extensions -name '*.so' -o -name '*.json' | tar czf "$OUT/ours_ext.tgz" -T -)
      (cd "$UP" && tar czf "$OUT/upstream_so.tgz" ./*.so)
      ;;
    first-use) python bench/first_use.py > "$OUT/first_use.log" 2>&1; tail -3 "$OUT/first_use.log" ;;
    block-eager)
      [ -n "$UP" ] || UP=$(upstream_path)
      python bench/ltx_core_block.py --ltx2 "$SCRATCH" --upstream-path "$UP" --modes eager,graph,full --profile \
        --budget-s "$BUDGET" --json "$OUT/block_eager.json" > "$OUT/block_eager.md" 2> "$OUT/block_eager.log"
      tail -40 "$OUT/block_eager.md" ;;
    block-compile)
      [ -n "$UP" ] || UP=$(upstream_path)
      python bench/ltx_core_block.py --ltx2 "$SCRATCH" --upstream-path "$UP" --modes compile,captured \
        --budget-s "$BUDGET" --json "$OUT/block_compile.json" > "$OUT/block_compile.md" 2> "$OUT/block_compile.log"
      tail -30 "$OUT/block_compile.md" ;;
    gemm)
      [ -n "$UP" ] || UP=$(upstream_path)
      python tools/gemm_protocols.py --upstream-path "$UP" --json "$OUT/gemm.json" ${GEMM_SHAPES:+--shapes $GEMM_SHAPES} \
        > "$OUT/gemm.log" 2>&1; tail -30 "$OUT/gemm.log" ;;
    tests) python -m pytest tests -q -x ${TEST_K:+-k "$TEST_K"} > "$OUT/tests.log" 2>&1; tail -5 "$OUT/tests.log" ;;
    *) echo "unknown phase $phase" ;;
  esac
done
