#!/usr/bin/env bash
# One run on a GPU machine: build, GPU tests, autotune warmup, main job, benchmarks.
#   bash bench/gpu_check.sh OUTDIR [phases]     phases: any of
#   build,tests,properties,sm90,memcheck,warmup,probe,main,bench,block,host,standalone,ncu,protocols
#   (default: build,tests,warmup,main,bench,block). properties: the property tests under the gpu
#   profile (five times CI's examples, a fresh seed), a line per test, alone on the GPU: the
#   torch / cuda ids in one process, then the Triton ids with PROPERTIES_WORKERS (4) workers
#   (the four test_fp8_gemm_nt[triton-*] ids, the longest, in four processes from the start);
#   PROPERTIES_TIMEOUT, 540 s in all, then SIGINT: pytest still prints what passed, failed and
#   the slowest tests. sm90: the SM90 GEMM's tests, every tile config next to cuBLAS
#   (tools/probe_sm90.py), SASS and memcheck; memcheck: only the last two. host: Python cost per
#   eager call.
#   standalone: prebuilt standalone SM90 binaries (tools/sm90_build_standalone.sh into
#   $SM90_BIN, default .carry/sm90bin) over shapes and configs, burst and sustained.
#   ncu: Nsight Compute of standalone binaries and cuBLAS (tools/ncu_gemm.sh, $NCU_RUNS).
#   protocols: GEMM backends next to cuBLAS, burst and sustained, with the SM clock
#   (tools/gemm_protocols.py). probe: tools/probe_sm90.py with $PROBE_ARGS (after warmup, so the
#   Triton column uses the configs it tuned).
# The build runs in the background while the phases that need no extension (standalone, ncu) use
# the GPU. Writes logs and JSON under OUTDIR; prints a short table last. BENCH_K="expr" selects
# benchmarks (pytest -k, spaces allowed); BENCH_ARGS adds plain pytest arguments; BENCH_TIMEOUT=s
# stops the benchmarks after s seconds, keeping those done.
set -uo pipefail
OUTDIR=${1:-${OUT:-bench/out}}
PHASES=${2:-build,tests,warmup,main,bench,block}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export LTX_KERNELS_CACHE_DIR=${LTX_KERNELS_CACHE_DIR:-$OUTDIR/cache}
has() { [[ ",$PHASES," == *",$1,"* ]]; }
t0=$(date +%s)
stamp() { echo "== $1 ($(( $(date +%s) - t0 ))s)"; }

python3 - > "$OUTDIR/env.json" <<'PY'
import json, platform, subprocess, time, torch, triton
p = torch.cuda.get_device_properties(0)
smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
print(json.dumps({"device": p.name, "sms": p.multi_processor_count, "torch": torch.__version__,
                  "cuda": torch.version.cuda, "triton": triton.__version__, "python": platform.python_version(),
                  "nvidia_smi": smi, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}, indent=1))
PY
cat "$OUTDIR/env.json"

BUILD_PID=
if has build; then
  stamp "build (background)"
  ( LTX_KERNELS_BUILD_CUDA=${LTX_KERNELS_BUILD_CUDA:-} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} \
    python3 setup.py build_ext --inplace > "$OUTDIR/build.log" 2>&1 || echo "build failed" >> "$OUTDIR/build.log" ) &
  BUILD_PID=$!
fi
built() {  # wait for the background build once, before the first phase that imports the extensions
  if [ -n "$BUILD_PID" ]; then
    wait "$BUILD_PID"
    BUILD_PID=
    stamp "build done"
    tail -3 "$OUTDIR/build.log"
  fi
}
if has standalone; then
  stamp standalone
  SUSTAIN_MS=${SUSTAIN_MS:-1500} bash tools/sm90_variants.sh "${SM90_BIN:-.carry/sm90bin}" "${SM90_VARIANTS:-}" \
    "${SM90_CONFIGS:-256,128,1 128,128,1 128,128,2}" > "$OUTDIR/standalone.log" 2>&1
  sed 's/check ok: 0 unwritten, 0 written past M, //' "$OUTDIR/standalone.log" | cut -c1-150
fi
if has ncu; then
  stamp ncu
  # variant:MxNxK:BM,BN,CL of the standalone binaries, or cublas:MxNxK
  bash tools/ncu_gemm.sh "$OUTDIR" ${NCU_RUNS:-new:16384x4096x4096:256,128,1 cublas:16384x4096x4096}
fi
if has tests; then
  built
  stamp tests
  python3 -m pytest tests -q -x -n 8 -p no:cacheprovider > "$OUTDIR/tests.log" 2>&1; echo "tests rc=$?"
  tail -5 "$OUTDIR/tests.log"
fi
if has properties; then
  built
  stamp properties
  # The torch / cuda / auto ids wait on the GPU at every sync: in one process they run 400
  # examples of test_fp8_gemm_nt[torch] in 7.5 s, among 8 workers (8 processes time-slicing one
  # GPU) in 421 s. So they run in one process; the Triton ids after them with PROPERTIES_WORKERS,
  # except the longest, the four test_fp8_gemm_nt[triton-*] ids (about 40 distinct Triton
  # specializations each, counted on CPU), which run in four processes from the start. The
  # one-process phase may take half the time; what it leaves goes to the Triton ids.
  T=tests/test_properties.py
  left=${PROPERTIES_TIMEOUT:-540}
  t1=$(date +%s)
  LTX_KERNELS_HYPOTHESIS_PROFILE=gpu timeout -s INT "$left" python3 -m pytest $T -k "test_fp8_gemm_nt and triton" \
    -v -n 4 -p no:cacheprovider --durations=4 > "$OUTDIR/properties_gpu_fp8_gemm_triton.log" 2>&1 &
  long_pid=$!
  LTX_KERNELS_HYPOTHESIS_PROFILE=gpu timeout -s INT $(( left / 2 )) python3 -m pytest $T -k "not triton" \
    -v -p no:cacheprovider --durations=10 > "$OUTDIR/properties_gpu.log" 2>&1; echo "properties (one process) rc=$? (124: stopped)"
  rest=$(( left - $(date +%s) + t1 ))
  LTX_KERNELS_HYPOTHESIS_PROFILE=gpu timeout -s INT "$rest" python3 -m pytest $T -k "triton and not test_fp8_gemm_nt" \
    -v -n "${PROPERTIES_WORKERS:-4}" -p no:cacheprovider --durations=10 >> "$OUTDIR/properties_gpu.log" 2>&1; echo "properties (triton) rc=$? (124: stopped)"
  wait "$long_pid"; echo "properties (test_fp8_gemm_nt[triton-*]) rc=$? (124: stopped)"
  cat "$OUTDIR/properties_gpu_fp8_gemm_triton.log" >> "$OUTDIR/properties_gpu.log"
  echo "$(grep -c ' PASSED' "$OUTDIR/properties_gpu.log") passed, $(grep -c ' FAILED' "$OUTDIR/properties_gpu.log") failed"
  grep -E "^[0-9=]+ .*(passed|failed)" "$OUTDIR/properties_gpu.log"
fi
if has sm90; then
  built
  stamp sm90
  timeout 150 python3 -m pytest tests/test_gemm_sm90.py -q -p no:cacheprovider > "$OUTDIR/sm90_tests.log" 2>&1; echo "sm90 tests rc=$? (124: timed out, a hang)"
  tail -3 "$OUTDIR/sm90_tests.log"
  timeout 240 python3 tools/probe_sm90.py --json "$OUTDIR/probe_sm90.json" 2>&1 | tee "$OUTDIR/probe_sm90.log"
  bash tools/sm90_check.sh "$OUTDIR" 2>&1 | tee "$OUTDIR/sm90_check.log"
fi
if has memcheck && ! has sm90; then
  built
  stamp memcheck
  bash tools/sm90_check.sh "$OUTDIR" 2>&1 | tee "$OUTDIR/sm90_check.log"
fi
if has warmup; then
  built
  stamp warmup
  python3 -m ltx_kernels.warmup ${WARMUP_ARGS:---quick} > "$OUTDIR/warmup.log" 2>&1; echo "warmup rc=$?"
  sed -n '/chosen configs/,$p' "$OUTDIR/warmup.log" | cut -c1-150
fi
if has probe; then
  built
  stamp probe
  timeout ${PROBE_TIMEOUT:-300} python3 tools/probe_sm90.py --json "$OUTDIR/probe.json" ${PROBE_ARGS:-} 2>&1 | tee "$OUTDIR/probe.log"
fi
if has main; then
  built
  stamp main
  python3 -m ltx_kernels > "$OUTDIR/main.log" 2>&1; echo "main rc=$?"
  sed -n '/self-check/,$p' "$OUTDIR/main.log"
fi
if has bench; then
  built
  stamp bench
  # BENCH_TIMEOUT=s interrupts pytest (SIGINT) after s seconds; the benchmarks done so far are still written
  timeout -s INT "${BENCH_TIMEOUT:-0}" python3 -m pytest bench -q -p no:cacheprovider --benchmark-json="$OUTDIR/bench.json" \
    ${BENCH_ARGS:-} ${BENCH_K:+-k "$BENCH_K"} > "$OUTDIR/bench.log" 2>&1; echo "bench rc=$?"
  tail -3 "$OUTDIR/bench.log"
  python3 tools/summarize.py "$OUTDIR/bench.json" | tee "$OUTDIR/summary.md"
fi
if has block; then
  built
  stamp block
  python3 tools/block_accuracy.py --tokens ${BLOCK_TOKENS:-8192} --time --json "$OUTDIR/block_accuracy.json" \
    > "$OUTDIR/block.log" 2>&1; echo "block rc=$?"
  tail -4 "$OUTDIR/block.log"
fi
if has host; then
  built
  stamp host
  python3 tools/host_overhead.py 2>&1 | tee "$OUTDIR/host_overhead.log"
fi
if has protocols; then
  built
  stamp protocols
  python3 tools/gemm_protocols.py --json "$OUTDIR/protocols.json" ${PROTOCOL_ARGS:-} 2>&1 | tee "$OUTDIR/protocols.log"
fi
built
stamp done
