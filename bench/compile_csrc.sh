#!/usr/bin/env bash
# Compile csrc/ against a CUDA build of torch without a GPU (used by CI when CUDA sources exist).
set -euo pipefail
VENV=$(mktemp -d)/venv
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q torch==2.14.1 setuptools wheel ninja numpy
LTX_KERNELS_BUILD_CUDA=1 "$VENV/bin/python" setup.py build_ext --build-temp "$(mktemp -d)" --build-lib "$(mktemp -d)"
