#!/usr/bin/env bash
# Prepare .upstream/ (ignored by git) on the development machine, for tools/upstream/*.sh on a GPU
# machine without network: LTX-2's ltx-kernels and ltx-core sources from a fetched mirror, and the
# CUTLASS 3.8 headers from the nvidia-cutlass==3.8.0.0 wheel. Nothing here enters the repository.
#
#   bash tools/upstream/prepare.sh /path/to/LTX-2.git   # a bare clone or mirror of Lightricks/LTX-2
set -euo pipefail
MIRROR=${1:?usage: prepare.sh LTX2_GIT_DIR [REV]}
REV=${2:-HEAD}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEST=$REPO/.upstream
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$DEST" "$TMP/src"
git -C "$MIRROR" archive "$REV" packages/ltx-kernels packages/ltx-core | tar x -C "$TMP/src"
tar czf "$DEST/ltx2-src.tgz" -C "$TMP/src" packages
git -C "$MIRROR" rev-parse "$REV" > "$DEST/LTX2_COMMIT"
python3 -m pip download -q --no-deps nvidia-cutlass==3.8.0.0 -d "$TMP/whl"
(cd "$TMP" && python3 -m zipfile -e whl/nvidia_cutlass-3.8.0.0-py3-none-any.whl cutlass)
tar czf "$DEST/cutlass-3.8.0-include.tgz" -C "$TMP/cutlass/cutlass_library/source" include
ls -l "$DEST"
