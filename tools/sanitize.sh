#!/usr/bin/env bash
# compute-sanitizer over the GPU code: memcheck over the GPU test suite (the largest GEMM shapes
# left out: sm90_check.sh already memchecks every SM90 config), racecheck over the SM90 GEMM (every
# tile config, with and without split-K) and the All2All kernels on small shapes.
#   bash tools/sanitize.sh [OUTDIR] [phases]     phases: any of memcheck,racecheck-gemm,racecheck-a2a
#                                                 (default: all three)
# Runs `python -m ltx_kernels build` first. Time limits (seconds): MEMCHECK_TIMEOUT per test file
# (120), RACECHECK_TIMEOUT (150 each). MEMCHECK_FILES: the test files memcheck runs
# (names without .py; default: every file with CUDA work); MEMCHECK_K: pytest -k expression of
# the memcheck runs (default leaves out the M = 3000 / 20000 SM90 shapes); MEMCHECK_ARGS: more
# pytest arguments. Writes OUTDIR/sanitize_*.log and OUTDIR/sanitize_summary.txt; exits 1 when a tool
# reported an error or a run failed.
set -uo pipefail
OUTDIR=${1:-${OUT:-sanitize_out}}
PHASES=${2:-memcheck,racecheck-gemm,racecheck-a2a}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
has() { [[ ",$PHASES," == *",$1,"* ]]; }
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
SUMMARY=$OUTDIR/sanitize_summary.txt
: > "$SUMMARY"
status=0
t0=$(date +%s)
stamp() { echo "== $1 ($(( $(date +%s) - t0 ))s)"; }

# The extensions as the package loads them: `python -m ltx_kernels build` compiles whatever the
# extension cache lacks (seconds when it has both; modules built in place take precedence anyway).
stamp "build"
python3 -m ltx_kernels build > "$OUTDIR/sanitize_build.log" 2>&1 \
  || { echo "build failed: $OUTDIR/sanitize_build.log"; tail -5 "$OUTDIR/sanitize_build.log"; }

# report NAME LOG RC: one summary line from the sanitizer's own summary lines and the run's exit code
report() {
  local name=$1 log=$2 rc=$3
  local errs
  errs=$(grep -hE "(ERROR|RACECHECK) SUMMARY" "$log" | sed 's/=* *//' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  local line="$name: rc=$rc ${errs:-no sanitizer summary (did it run?)}"
  echo "$line" | tee -a "$SUMMARY"
  if [ "$rc" -ne 0 ] || grep -qE "(ERROR|RACECHECK) SUMMARY: [1-9]" "$log"; then status=1; fi
}

if has memcheck; then
  # One sanitizer run per test file, no pytest-xdist: with xdist workers under the sanitizer the
  # suite did not get past start-up in 280 s on the H200; per file, a slow file costs only its own
  # limit and every file that finished is reported.
  for f in ${MEMCHECK_FILES:-test_gemm_sm90 test_gemm test_quantize test_norm_rope test_fp6 test_linear test_all2all_cuda test_compile}; do
    stamp "memcheck: tests/$f.py"
    log="$OUTDIR/sanitize_memcheck_$f.log"
    timeout "${MEMCHECK_TIMEOUT:-120}" "$SAN" --tool memcheck --target-processes all --print-limit 20 \
      python3 -m pytest "tests/$f.py" -q -x -p no:cacheprovider \
      -k "${MEMCHECK_K:-not 20000 and not 3000}" ${MEMCHECK_ARGS:-} > "$log" 2>&1
    rc=$?
    tail -1 "$log"
    report "memcheck ($f)" "$log" $rc
  done
fi

if has racecheck-gemm; then
  stamp "racecheck: SM90 GEMM, every tile config, 1 and 2 K slices"
  timeout "${RACECHECK_TIMEOUT:-150}" "$SAN" --tool racecheck --racecheck-report all --print-limit 20 \
    --error-exitcode 9 python3 - > "$OUTDIR/sanitize_racecheck_gemm.log" 2>&1 <<'PY'
import torch, ltx_kernels as lk
from ltx_kernels import _ext
mod = _ext.load("_C_gemm_sm90")[0]
assert mod is not None, _ext.load("_C_gemm_sm90")[1]
m, n, k = 130, 256, 1024  # two M tiles of 128 (one partial), two N tiles, 8 K blocks
qa, sa = lk.quantize_blockwise(torch.randn(m, k, device="cuda"))
qb, sb = lk.quantize_weights_blockwise(torch.randn(n, k, device="cuda"))
want = lk.fp8_gemm_nt(qa, sa, qb, sb, backend="torch").float()
for cfg in lk.gemm.SM90_TILES:
    for splits in (1, 2):
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        mod.fp8_gemm_nt(qa, sa, qb, sb, None, d, *cfg, splits)
        torch.cuda.synchronize()
        err = ((d.float() - want).norm() / want.norm()).item()
        print(f"config {cfg} splits {splits}: rel. error {err:.2e}", flush=True)
        assert err < 3e-3, (cfg, splits, err)
print("racecheck gemm run done")
PY
  rc=$?
  grep -E "config|done|Error" "$OUTDIR/sanitize_racecheck_gemm.log" | tail -14
  report "racecheck (SM90 GEMM)" "$OUTDIR/sanitize_racecheck_gemm.log" $rc
fi

if has racecheck-a2a; then
  stamp "racecheck: All2All kernels, W = 1 and 2 local ranks"
  # W = 1 needs no other kernel to run beside it; W = 2 needs both ranks' kernels resident at
  # once. If the tool runs kernels one at a time, W = 2 times out (All2AllTimeout after 60 s):
  # logged as such, not as a race.
  timeout "${RACECHECK_TIMEOUT:-150}" "$SAN" --tool racecheck --racecheck-report all --print-limit 20 \
    --error-exitcode 9 python3 - > "$OUTDIR/sanitize_racecheck_a2a.log" 2>&1 <<'PY'
import torch, ltx_kernels as lk
from ltx_kernels import reference as ref
for world, counts in ((1, [37]), (2, [37, 20])):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ranks = lk.All2All.local_ranks(world, sum(counts), 4 * 72, max(world, min(8, sms // world)),
                                   torch.bfloat16, 60.0)
    streams = [torch.cuda.Stream() for _ in ranks]
    for a in ranks:
        a.set_rank_tokens(counts)
    xs = [torch.randn(1, c, 4, 72, device="cuda", dtype=torch.bfloat16) for c in counts]  # 144-byte rows
    try:
        for it in range(2):
            ys = lk.All2All.run_local(ranks, streams, "send_recv_heads", xs, copy_out=True)
            back = lk.All2All.run_local(ranks, streams, "gather_heads", ys, copy_out=True)
            ag = lk.All2All.run_local(ranks, streams, "allgather", xs, copy_out=True)
            for a in ranks:
                a.check()
            ok = all(torch.equal(y, w) for y, w in zip(ys, ref.send_recv_heads(xs)))
            ok &= all(torch.equal(o, x) for o, x in zip(back, xs))
            ok &= all(torch.equal(o, w) for o, w in zip(ag, ref.allgather(xs)))
            print(f"W={world} round {it}: {'bit-exact' if ok else 'WRONG'}", flush=True)
            assert ok
    except lk.All2AllTimeout as e:
        print(f"W={world}: All2AllTimeout under racecheck ({e}): the tool did not run the ranks' kernels "
              f"side by side", flush=True)
    finally:
        torch.cuda.synchronize()
        for a in ranks:
            a.destroy()
print("racecheck all2all run done")
PY
  rc=$?
  grep -E "W=|done|Error" "$OUTDIR/sanitize_racecheck_a2a.log" | tail -8
  report "racecheck (All2All)" "$OUTDIR/sanitize_racecheck_a2a.log" $rc
fi

stamp "done"
cat "$SUMMARY"
exit $status
