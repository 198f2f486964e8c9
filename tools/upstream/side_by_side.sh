#!/usr/bin/env bash
# One GPU run beside LTX-2's own ltx-kernels (development only): builds both packages' CUDA
# extensions, then runs the named phases, writing everything under $OUT (default ./out).
#
#   bash tools/upstream/side_by_side.sh build block-eager block-compile gemm tests
#
# Phases: build (upstream through build_upstream.sh, ours through `python -m ltx_kernels build`,
# in parallel; both builds are also packed as ours_ext.tgz / upstream_so.tgz so a later run can
# reuse them with OURS_PREBUILT=tgz UPSTREAM_SO=tgz), first-use (tools/first_use.py), block-eager /
# block-compile (bench/ltx_core_block.py eager+graph+full with a profile in one process /
# compile+captured, one process per package with turns interleaved),
# gemm (tools/gemm_protocols.py with the deep_gemm column; GEMM_LIBS="NAME=PATH ..." adds kernel
# variant libraries for lib:NAME@cfg backends; GEMM_SHAPES, GEMM_BACKENDS, GEMM_ANCHORS,
# GEMM_SUSTAIN_MS, GEMM_PROTOCOLS, GEMM_RUNS, GEMM_RUN_BEFORE), ncu (ours and deep_gemm in one Nsight Compute
# profile; NCU_CFGS: BMxBNxCL or LIB.so@BMxBNxCL; per-SASS stall samples in ncu_gemm_sass.csv.gz),
# tests (the GPU suite), ab (tools/graph_ab.py over AB_LIBS="A=PATH B=PATH" with AB_ARGS). REPO_COMMIT names the commit of the tree (recorded);
# BLOCK_ARGS adds arguments to the block phases (later ones win: --modes compile --variants bf16,fp8).
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
LOGS=/tmp/side_by_side_logs  # packed into $OUT/logs.tgz at the end (few files come back)
mkdir -p "$LOGS"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 LTX_KERNELS_CACHE_DIR=${LTX_KERNELS_CACHE_DIR:-/tmp/ltxk}
SCRATCH=${UPSTREAM_SCRATCH:-/tmp/ltx2}
BUDGET=${BUDGET:-240}

env_json() {
  python3 - "$1" <<'PY'
import json, subprocess, sys, time, torch, triton
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,power.limit,clocks.max.sm",
                      "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
import os
# REPO_COMMIT: the commit of the tree that was copied here (a copied tree's .git may be another's)
commit = os.environ.get("REPO_COMMIT") or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                         text=True).stdout.strip()
json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": torch.cuda.get_device_name(),
           "nvidia_smi": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
           "triton": triton.__version__, "commit": commit}, open(sys.argv[1], "w"), indent=1)
PY
}

upstream_path() {
  if [ -n "${UPSTREAM_SO:-}" ]; then
    mkdir -p /tmp/upstream_so && tar xzf "$UPSTREAM_SO" -C /tmp/upstream_so
    UPSTREAM_PREBUILT=/tmp/upstream_so UPSTREAM_SCRATCH=$SCRATCH bash tools/upstream/build_upstream.sh 2>> "$LOGS/build_upstream.log" | tail -1
  else
    UPSTREAM_SCRATCH=$SCRATCH MAX_JOBS=${MAX_JOBS:-12} bash tools/upstream/build_upstream.sh 2>> "$LOGS/build_upstream.log" | tail -1
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
      (python -m ltx_kernels build > "$LOGS/build_ours.log" 2>&1; echo "ours rc=$?" >> "$LOGS/build_ours.log") &
      UP=$(upstream_path)
      wait
      echo "upstream: $UP; ours: $(tail -1 "$LOGS/build_ours.log"); $(( $(date +%s) - t0 )) s"
      (cd "$LTX_KERNELS_CACHE_DIR" && find extensions -name '*.so' -o -name '*.json' | tar czf "$OUT/ours_ext.tgz" -T -)
      (cd "$UP" && tar czf "$OUT/upstream_so.tgz" ./*.so)
      ;;
    readme-install)  # README's commands on a fresh machine (offline: the setuptools wheel in .whl/)
      ( export PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.whl
        python -m pip install -e ".[test]" 2>&1 | tail -3
        python -c "import ltx_kernels._C_gemm_sm90" 2>&1 | tail -1
        LTX_KERNELS_LOG=debug python tools/first_use.py 2>&1; echo "first_use rc=$?"
        python tools/first_use.py 2>&1; echo "first_use again rc=$?"
        python -m ltx_kernels --no-bench 2>&1; echo "main rc=$?" ) > "$OUT/readme_install.log" 2>&1
      grep -E "rc=|compil|SM90 kernel ran|checked|auto ->" "$OUT/readme_install.log" | head -40 ;;
    first-use) python tools/first_use.py > "$LOGS/first_use.log" 2>&1; tail -3 "$LOGS/first_use.log" ;;
    block-eager)
      [ -n "$UP" ] || UP=$(upstream_path)
      python bench/ltx_core_block.py --ltx2 "$SCRATCH" --upstream-path "$UP" --modes eager,graph,full --profile ${REPO_COMMIT:+--repo-commit $REPO_COMMIT} ${BLOCK_ARGS:-} \
        --budget-s "$BUDGET" --json "$OUT/block_eager.json" > "$OUT/block_eager.md" 2> "$LOGS/block_eager.log"
      tail -40 "$OUT/block_eager.md" ;;
    block-compile)
      # ltx-core's compiled code cannot serve two packages named ltx_kernels in one process, so
      # --split-processes runs one process per package at once and interleaves their setups,
      # rounds and profiles (bf16 in both processes: the protocol's floor, printed).
      [ -n "$UP" ] || UP=$(upstream_path)
      python bench/ltx_core_block.py --ltx2 "$SCRATCH" --upstream-path "$UP" --modes compile,captured --split-processes \
        ${REPO_COMMIT:+--repo-commit $REPO_COMMIT} ${BLOCK_ARGS:-} --budget-s "$BUDGET" \
        --json "$OUT/block_compile.json" > "$OUT/block_compile.md" 2> "$LOGS/block_compile.log"
      sed -n '/^# LTX-2 video transformer/,$p' "$OUT/block_compile.md" | grep -v "^| .* e-0" ;;
    gemm)
      [ -n "$UP" ] || UP=$(upstream_path)
      libs=()
      for spec in ${GEMM_LIBS:-}; do libs+=(--lib "$spec"); done
      # GEMM_RUNS processes one after the other (gemm_run1.json, ...; one run: gemm.json), a later
      # one only while the phase has run less than GEMM_RUN_BEFORE seconds (default: always)
      g0=$(date +%s)
      for r in $(seq 1 "${GEMM_RUNS:-1}"); do
        if [ "$r" -gt 1 ] && [ $(( $(date +%s) - g0 )) -ge "${GEMM_RUN_BEFORE:-999999}" ]; then
          echo "gemm: run $r skipped ($(( $(date +%s) - g0 )) s in)"; break
        fi
        name=gemm; [ "${GEMM_RUNS:-1}" -gt 1 ] && name=gemm_run$r
        python tools/gemm_protocols.py --upstream-path "$UP" --json "$OUT/$name.json" ${GEMM_SHAPES:+--shapes $GEMM_SHAPES} "${libs[@]}" \
          ${GEMM_SUSTAIN_MS:+--sustain-ms $GEMM_SUSTAIN_MS} ${GEMM_PROTOCOLS:+--protocols $GEMM_PROTOCOLS} \
          --backends "${GEMM_BACKENDS:-cuda}" \
          --anchors "${GEMM_ANCHORS:-cublas_blockwise,cublas_tensorwise,cublas_bf16}" > "$OUT/$name.log" 2>&1
        echo "gemm run $r rc=$? at $(( $(date +%s) - g0 )) s"; tail -30 "$OUT/$name.log"
      done ;;
    ncu)
      [ -n "$UP" ] || UP=$(upstream_path)
      NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      read -r -a cfgs <<< "${NCU_CFGS:-256x128x2}"
      read -r _ ncu_n ncu_k <<< "${NCU_SHAPE:-32768 4096 4096}"
      # ncu_vs_deep_gemm.py launches deep_gemm only at the N, K it accepts
      dg=$(python -c "import sys; sys.path.insert(0, 'tools'); from gemm_protocols import deep_gemm_accepts; print(int(deep_gemm_accepts($ncu_n, $ncu_k)))")
      n=$(( ${#cfgs[@]} + 1 + dg ))
      timeout 300 "$NCU" --clock-control none -k regex:"fp8_gemm_kernel|sm90_fp8_gemm_1d2d" -s "$n" -c "$n" --set detailed \
        --section WarpStateStats --section InstructionStats --section SourceCounters -o /tmp/ncu_gemm -f \
        python tools/upstream/ncu_vs_deep_gemm.py "$UP" ${NCU_SHAPE:-32768 4096 4096} "${cfgs[@]}" > "$LOGS/ncu_run.log" 2>&1
      "$NCU" -i /tmp/ncu_gemm.ncu-rep --print-details all > "$OUT/ncu_gemm.txt" 2>&1
      # per-SASS-line stall samples of every profiled kernel (where the warps wait), compressed
      "$NCU" -i /tmp/ncu_gemm.ncu-rep --page source --csv --print-source sass 2> /dev/null | gzip > "$OUT/ncu_gemm_sass.csv.gz"
      grep -E "^  [a-z_].*\(|SM Frequency|^    Duration|Tensor|Issue Slots Busy|L2 Cache Throughput|Executed Instructions  |Registers Per" \
        "$OUT/ncu_gemm.txt" | head -60 ;;
    tests) python -m pytest tests -q -x ${TEST_K:+-k "$TEST_K"} > "$LOGS/tests.log" 2>&1; tail -5 "$LOGS/tests.log" ;;
    ab)  # two kernel builds as libraries, CUDA graphs replayed in alternation (AB_LIBS="A=PATH B=PATH")
      # shellcheck disable=SC2086
      python tools/graph_ab.py ${AB_LIBS:?AB_LIBS="A=PATH B=PATH"} ${AB_ARGS:-} --json "$OUT/ab.json" > "$OUT/ab.log" 2>&1
      tail -30 "$OUT/ab.log" ;;
    *) echo "unknown phase $phase" ;;
  esac
done
tar czf "$OUT/logs.tgz" -C "$LOGS" .
