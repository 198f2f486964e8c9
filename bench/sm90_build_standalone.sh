#!/usr/bin/env bash
# Build standalone SM90 GEMM binaries (bench/sm90_standalone.cu, no torch) with nvcc, on any
# machine: DIR/sm90_<name> for each NAME=FLAGS argument (FLAGS: extra nvcc flags, may be empty).
# KERNEL_ROOT=path builds from another checkout's csrc/ and bench/ (e.g. an older commit).
#   bash bench/sm90_build_standalone.sh DIR new= nopromote=-DLTX_SM90_TIMING_NO_PROMOTE
set -euo pipefail
DIR=$1
shift
ROOT=${KERNEL_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
mkdir -p "$DIR"
for spec in "$@"; do
  name=${spec%%=*}
  flags=${spec#*=}
  # shellcheck disable=SC2086
  nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 -DLTX_SM90_CLOCK_PROBE $flags \
    -I "$ROOT/csrc/gemm_sm90" "$ROOT/bench/sm90_standalone.cu" -o "$DIR/sm90_$name" &
done
wait
ls -l "$DIR"
