#!/usr/bin/env bash
# The README's install on a machine with nvcc and a CUDA torch, as a new user gets it: a fresh venv,
# the CUDA torch wheel, then the README's install command (pip's isolated build: no extension is
# built ahead of time). Proves without a GPU that both CUDA extensions then compile through the
# first-use path (for sm_90, as `python -m ltx_kernels build`), import in a new process, and that
# `python -m ltx_kernels` says so; that a wheel carries the CUDA sources and finds the same cache;
# and that setup.py's ahead-of-time path still sets up both extensions from the same definitions.
# Everything goes to one temporary folder, removed on exit (a CUDA torch is several GB).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export LTX_KERNELS_CACHE_DIR=$TMP/cache
step() { echo "--- [cuda install, $(( SECONDS ))s] $*"; }

step "fresh venv + torch 2.14.1 (CUDA 13.0 build)"
python3 -m venv "$TMP/venv"
# shellcheck disable=SC1091
. "$TMP/venv/bin/activate"
python -m pip install -q torch==2.14.1
python -c "import torch; assert torch.version.cuda, torch.__version__; print('torch', torch.__version__)"

step "the README's install command"
pip install -q -e ".[test]"

step "before any compile: python -m ltx_kernels says they compile on first use"
python -m ltx_kernels --no-bench > "$TMP/main0.log" 2>&1 || { cat "$TMP/main0.log"; exit 1; }
grep -A1 "_C_" "$TMP/main0.log"
[ "$(grep -c 'compiles on first use' "$TMP/main0.log")" = 2 ] || { echo "expected 'compiles on first use' twice"; exit 1; }

step "compile both extensions (the first-use path, ahead of time, for sm_90)"
TORCH_CUDA_ARCH_LIST=9.0 python -m ltx_kernels build

step "a new process imports both from the cache"
TORCH_CUDA_ARCH_LIST=9.0 python -m ltx_kernels build --check
python -m ltx_kernels --no-bench > "$TMP/main1.log" 2>&1 || { cat "$TMP/main1.log"; exit 1; }
grep -A1 "_C_" "$TMP/main1.log"
[ "$(grep -c 'compiled earlier for sm_90a\?, loads' "$TMP/main1.log")" = 2 ] || { echo "expected both extensions to load"; exit 1; }
tail -2 "$TMP/main1.log"

step "a wheel (isolated build) carries csrc and, installed, finds the same cached builds"
pip wheel -q --no-deps -w "$TMP/wheel" .
python - "$TMP"/wheel/ltx_kernels-*.whl <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for f in ("ltx_kernels/_csrc/gemm_sm90/fp8_gemm_sm90_kernel.cu", "ltx_kernels/_csrc/all2all/all2all.cpp",
          "ltx_kernels/_csrc/gemm_sm90/fp8_gemm_sm90.h", "ltx_kernels/_build_config.py"):
    assert f in names, f"{f} missing from the wheel"
print("wheel has csrc:", sum(n.startswith("ltx_kernels/_csrc/") for n in names), "files")
PY
pip install -q --no-deps --force-reinstall "$TMP"/wheel/ltx_kernels-*.whl
(cd "$TMP" && TORCH_CUDA_ARCH_LIST=9.0 python -m ltx_kernels build --check | tee "$TMP/wheel_check.log")
(cd "$TMP" && python -c "
from ltx_kernels import _jit
assert '/site-packages/ltx_kernels/_csrc' in str(_jit.toolchain().csrc), _jit.toolchain().csrc
print('sources of the installed wheel:', _jit.toolchain().csrc)")

step "setup.py's ahead-of-time path sets up both extensions (no compile)"
LTX_KERNELS_BUILD_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 python "$SRC/setup.py" --name 2>&1 | grep "building"
step "done"
