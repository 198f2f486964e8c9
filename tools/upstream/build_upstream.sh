#!/usr/bin/env bash
# Build LTX-2's own ltx-kernels package (the one this project re-creates) for side-by-side runs on a
# GPU machine. Development only: nothing this script produces belongs in the repository.
#
#   bash tools/upstream/build_upstream.sh
#
# The last line printed is a directory that, put on sys.path (PYTHONPATH or
# bench/ltx_core_block.py --upstream-path), makes `import ltx_kernels` load LTX-2's package with its
# compiled extensions ops_cpp, blockwise_cpp (SM89 kernel, plus the SM90 deep_gemm kernel when
# sm_90a is targeted) and all2all_cpp. Upstream imports them as top-level modules, so they sit next
# to the package folder. Nothing is fetched: CUTLASS comes from the local tarball (CUTLASS_DIR) and
# nvidia-cutlass-dsl, which only upstream's VAE kernels import, is not needed.
#
# Environment (all optional):
#   UPSTREAM_DIR          folder holding ltx2-src.tgz and cutlass-3.8.0-include.tgz
#                         (default: .upstream/ at the repository root)
#   UPSTREAM_SCRATCH      where to unpack and build (default: /tmp/ltx2); the LTX-2 sources end up in
#                         $UPSTREAM_SCRATCH/packages/, which is what `--ltx2` of the benchmark wants
#   UPSTREAM_PREBUILT     folder with the three built extensions (ops_cpp*.so, blockwise_cpp*.so,
#                         all2all_cpp*.so, e.g. brought back from an earlier run): copied, no compiling
#   UPSTREAM_EXTENSIONS   which extensions to compile (default: "ops_cpp blockwise_cpp all2all_cpp")
#   UPSTREAM_NO_IMPORT_CHECK=1  skip the final import of the result
#   UPSTREAM_STRIP=0      keep debug info in the installed extensions (stripped by default, so that
#                         they are small enough to carry to a later run)
#   TORCH_CUDA_ARCH_LIST  (default 9.0), MAX_JOBS (default 16), PYTHON (default python3)
#
# Idempotent: the sources are unpacked again only when the tarball changed, and the compile is
# skipped when the result already holds extensions built from the same tarball, torch and arch list.
set -euo pipefail

die() { echo "build_upstream: $*" >&2; exit 1; }
say() { echo "build_upstream: $*" >&2; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
UPSTREAM_DIR=${UPSTREAM_DIR:-$REPO/.upstream}
SCRATCH=${UPSTREAM_SCRATCH:-/tmp/ltx2}
PYTHON=${PYTHON:-python3}
EXTS=${UPSTREAM_EXTENSIONS:-ops_cpp blockwise_cpp all2all_cpp}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export MAX_JOBS=${MAX_JOBS:-16}

SRC_TGZ=$UPSTREAM_DIR/ltx2-src.tgz
CUTLASS_TGZ=$UPSTREAM_DIR/cutlass-3.8.0-include.tgz
[ -f "$SRC_TGZ" ] || die "missing $SRC_TGZ (set UPSTREAM_DIR to the folder holding ltx2-src.tgz)"
command -v "$PYTHON" > /dev/null || die "no $PYTHON on PATH"
TORCH_ID=$("$PYTHON" -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>/dev/null) \
  || die "$PYTHON cannot import torch"

PKG=$SCRATCH/packages/ltx-kernels
SITE=$SCRATCH/site
mkdir -p "$SCRATCH" "$SITE"

# --- unpack (again only when the tarball changed) ---------------------------------------------
src_sum=$(sha256sum "$SRC_TGZ" | cut -c1-16)
if [ "$(cat "$SCRATCH/.src_stamp" 2>/dev/null)" != "$src_sum" ] || [ ! -f "$PKG/setup.py" ]; then
  say "unpacking $SRC_TGZ into $SCRATCH"
  rm -rf "$SCRATCH/packages"
  tar xzf "$SRC_TGZ" -C "$SCRATCH"
  [ -f "$PKG/setup.py" ] || die "$SRC_TGZ has no packages/ltx-kernels/setup.py"
  echo "$src_sum" > "$SCRATCH/.src_stamp"
fi

so_of() {  # the built file of extension $1 in folder $2, if any
  local f
  for f in "$2/$1".*.so "$2/$1.so"; do [ -f "$f" ] && { echo "$f"; return 0; }; done
  return 1
}

install_so() {  # extension file $1 of extension $2 into the site folder, without debug info (25 MB -> 1 MB)
  rm -f "$SITE/$2".*.so "$SITE/$2.so"
  cp "$1" "$SITE/"
  if [ "${UPSTREAM_STRIP:-1}" = 1 ] && command -v strip > /dev/null; then
    strip --strip-debug "$SITE/$(basename "$1")" || true
  fi
}

build_stamp="$src_sum|$TORCH_ID|$TORCH_CUDA_ARCH_LIST|$EXTS"
have_all() { local e; for e in $EXTS; do so_of "$e" "$SITE" > /dev/null || return 1; done; }

if [ -n "${UPSTREAM_PREBUILT:-}" ]; then
  # --- prebuilt extensions ------------------------------------------------------------------
  [ -d "$UPSTREAM_PREBUILT" ] || die "UPSTREAM_PREBUILT=$UPSTREAM_PREBUILT is not a folder"
  for e in $EXTS; do
    f=$(so_of "$e" "$UPSTREAM_PREBUILT") || die "UPSTREAM_PREBUILT=$UPSTREAM_PREBUILT has no $e*.so"
    install_so "$f" "$e"
  done
  echo "prebuilt from $UPSTREAM_PREBUILT" > "$SITE/.build_stamp"
  say "using prebuilt extensions from $UPSTREAM_PREBUILT"
elif have_all && [ "$(cat "$SITE/.build_stamp" 2>/dev/null)" = "$build_stamp" ]; then
  say "extensions already built for this source, torch and arch list: not compiling"
else
  # --- compile ------------------------------------------------------------------------------
  # torch derives CUDA_HOME from `which nvcc`, which a wrapper script in /usr/local/bin misleads
  if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda; fi
  CUDA_HOME_FOUND=$("$PYTHON" -c 'from torch.utils.cpp_extension import CUDA_HOME; print(CUDA_HOME or "")' 2>/dev/null)
  [ -n "$CUDA_HOME_FOUND" ] || die "torch finds no CUDA toolkit (set CUDA_HOME or put nvcc on PATH)"
  [ -x "$CUDA_HOME_FOUND/bin/nvcc" ] || die "no nvcc at $CUDA_HOME_FOUND/bin/nvcc (set CUDA_HOME)"
  [ -f "$CUDA_HOME_FOUND/include/cuda_runtime_api.h" ] \
    || die "CUDA_HOME=$CUDA_HOME_FOUND has no include/cuda_runtime_api.h (set CUDA_HOME to the toolkit root)"
  if [[ " $EXTS " == *" blockwise_cpp "* ]]; then
    [ -f "$CUTLASS_TGZ" ] || die "missing $CUTLASS_TGZ (blockwise_cpp needs CUTLASS headers)"
    cut_sum=$(sha256sum "$CUTLASS_TGZ" | cut -c1-16)
    if [ "$(cat "$SCRATCH/.cutlass_stamp" 2>/dev/null)" != "$cut_sum" ] \
        || [ ! -f "$SCRATCH/cutlass/include/cutlass/cutlass.h" ]; then
      say "unpacking $CUTLASS_TGZ"
      rm -rf "$SCRATCH/cutlass"
      mkdir -p "$SCRATCH/cutlass"
      tar xzf "$CUTLASS_TGZ" -C "$SCRATCH/cutlass"
      [ -f "$SCRATCH/cutlass/include/cutlass/cutlass.h" ] || die "$CUTLASS_TGZ has no include/cutlass/cutlass.h"
      echo "$cut_sum" > "$SCRATCH/.cutlass_stamp"
    fi
  fi
  # upstream's setup.py reads $CUTLASS_DIR/include and would clone CUTLASS without it
  export CUTLASS_DIR=$SCRATCH/cutlass
  # setup.py puts the include folders of pip's nvidia-* wheels first; their cuda_runtime_api.h
  # includes crt/host_defines.h, which only ships with nvcc. The toolkit's own include folder, as a
  # fallback after every -I folder, supplies it to the host compiler.
  export CPLUS_INCLUDE_PATH=$CUDA_HOME_FOUND/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
  say "compiling $EXTS (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST, MAX_JOBS=$MAX_JOBS, CUDA_HOME=$CUDA_HOME_FOUND); log: $SCRATCH/build.log"
  t0=$(date +%s)
  # setup.py declares its extensions inside `if __name__ == "__main__"`; running it through runpy
  # with setuptools.setup wrapped keeps only the requested ones (nvfp4_cpp is Blackwell-only and
  # setup.py already drops it for 9.0).
  if ! ( cd "$PKG" && rm -f ./*.so src/*.so && UPSTREAM_EXTENSIONS="$EXTS" "$PYTHON" - build_ext --inplace <<'PY'
import os
import runpy
import sys

import setuptools

from pathlib import Path

from torch.utils.cpp_extension import include_paths

wanted = set(os.environ["UPSTREAM_EXTENSIONS"].split())
real_setup = setuptools.setup
# torch >= 2.13 headers refuse anything below C++20, and an explicit -std= keeps torch from
# adding its own; upstream pins c++17 (fine up to torch 2.12).
aten_h = Path(include_paths()[0]) / "ATen" / "ATen.h"
needs_cxx20 = aten_h.is_file() and "C++20 or later" in aten_h.read_text()


def setup(**kwargs):
    exts = [e for e in kwargs.get("ext_modules", []) if e.name in wanted]
    missing = wanted - {e.name for e in exts}
    if missing:
        sys.exit(f"setup.py declares no extension named {sorted(missing)}")
    if needs_cxx20:
        print("torch's headers need C++20: building with -std=c++20 instead of upstream's -std=c++17")
        for e in exts:
            e.extra_compile_args = {k: ["-std=c++20" if f == "-std=c++17" else f for f in v]
                                    for k, v in e.extra_compile_args.items()}
    kwargs["ext_modules"] = exts
    return real_setup(**kwargs)


setuptools.setup = setup
sys.argv = ["setup.py", *sys.argv[1:]]
runpy.run_path("setup.py", run_name="__main__")
PY
  ) > "$SCRATCH/build.log" 2>&1; then
    tail -40 "$SCRATCH/build.log" >&2
    die "compile failed after $(( $(date +%s) - t0 ))s (full log: $SCRATCH/build.log)"
  fi
  for e in $EXTS; do
    # --inplace puts them in the package folder (src/, upstream's package-dir)
    f=$(so_of "$e" "$PKG/src" || so_of "$e" "$PKG") || die "compile produced no $e*.so (log: $SCRATCH/build.log)"
    install_so "$f" "$e"
  done
  echo "$build_stamp" > "$SITE/.build_stamp"
  say "compiled in $(( $(date +%s) - t0 ))s"
fi

# --- the Python package, next to the extensions ------------------------------------------------
rm -rf "$SITE/ltx_kernels"
cp -r "$PKG/src/ltx_kernels" "$SITE/ltx_kernels"
find "$SITE/ltx_kernels" -name __pycache__ -prune -exec rm -rf {} +
ls -l "$SITE"/*.so >&2

if [ "${UPSTREAM_NO_IMPORT_CHECK:-0}" != 1 ]; then
  # Importing needs no GPU: the extensions load, the package registers its ops.
  ( cd / && PYTHONPATH=$SITE UPSTREAM_EXTENSIONS="$EXTS" "$PYTHON" - <<'PY'
import importlib
import os

import torch  # noqa: F401  (loads libc10 & co. for the extensions)

wanted = set(os.environ["UPSTREAM_EXTENSIONS"].split())
for name in sorted(wanted):
    importlib.import_module(name)
if "all2all_cpp" in wanted:  # upstream's package __init__ imports it
    import ltx_kernels

    assert ltx_kernels.__file__.startswith(os.environ["PYTHONPATH"]), ltx_kernels.__file__
    if "ops_cpp" in wanted:
        import ltx_kernels.blockwise.functional  # noqa: F401
        import ltx_kernels.blockwise.linear  # noqa: F401
print("build_upstream: import check ok:", ", ".join(sorted(wanted)))
PY
  ) >&2 || die "the result does not import (PYTHONPATH=$SITE); UPSTREAM_NO_IMPORT_CHECK=1 skips this check"
fi
echo "$SITE"
