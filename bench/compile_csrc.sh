#!/usr/bin/env bash
# Compile csrc/ against a CUDA build of torch without a GPU (used by CI when CUDA sources exist).
# Everything goes to one temporary folder, removed on exit (a CUDA torch is several GB).
set -euo pipefail
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
VENV=$TMP/venv
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q torch==2.14.1 setuptools wheel ninja numpy
LTX_KERNELS_BUILD_CUDA=1 "$VENV/bin/python" setup.py build_ext --build-temp "$TMP/build" --build-lib "$TMP/lib"
