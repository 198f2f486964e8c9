#!/usr/bin/env bash
# Build standalone SM90 GEMM binaries (tools/sm90_standalone.cu, no torch) with nvcc, on any
# machine: DIR/sm90_<name> for each NAME[:VARIANT]=FLAGS argument (FLAGS: extra nvcc flags, may
# be empty). VARIANT builds a copy of the kernel rewritten by tools/sm90_kernel_variant.py (the
# variants are listed in its docstring; join them with +). KERNEL_ROOT=path takes the kernel from another checkout's csrc/gemm_sm90
# (e.g. an older commit, to time it beside this one in the same run); the harness is always this
# checkout's.
#   bash tools/sm90_build_standalone.sh DIR new= nopromote:nopromote= muladd:muladd=
#   KERNEL_ROOT=/tmp/old bash tools/sm90_build_standalone.sh DIR old=
# LIB=1 builds DIR/libsm90_<name>.so from tools/sm90_lib.cu instead (a C entry point for ctypes:
# tools/gemm_protocols.py --lib NAME=DIR/libsm90_NAME.so).
set -euo pipefail
DIR=$1
shift
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${KERNEL_ROOT:-$(cd "$HERE/.." && pwd)}
mkdir -p "$DIR"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Every variant's source first, so that one the tool refuses stops the script before any compile
# starts (a refusal while others compile would remove their sources under them).
for spec in "$@"; do
  name=${spec%%=*}
  if [[ $name == *:* ]]; then
    python3 "$HERE/sm90_kernel_variant.py" "${name#*:}" "$ROOT/csrc/gemm_sm90" "$TMP/${name%%:*}"
  fi
done
pids=()
for spec in "$@"; do
  name=${spec%%=*}
  flags=${spec#*=}
  inc=$ROOT/csrc/gemm_sm90
  if [[ $name == *:* ]]; then
    name=${name%%:*}
    inc=$TMP/$name
  fi
  # shellcheck disable=SC2086
  if [ "${LIB:-0}" = 1 ]; then
    nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 -shared -Xcompiler -fPIC $flags \
      -I "$inc" "$HERE/sm90_lib.cu" -o "$DIR/libsm90_$name.so" &
  else
    nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 $flags \
      -I "$inc" "$HERE/sm90_standalone.cu" -o "$DIR/sm90_$name" &
  fi
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
ls -l "$DIR"
