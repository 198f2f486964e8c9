#!/usr/bin/env bash
# Time standalone SM90 GEMM builds (tools/sm90_standalone.cu, built into DIR beforehand as
# DIR/sm90_<variant> by tools/sm90_build_standalone.sh) over shapes and tile configs; each run
# first checks its output. SUSTAIN_MS>0 also times each after that long of back-to-back launches.
#   [SHAPES="16384x4096x4096 ..."] [SUSTAIN_MS=1500] bash tools/sm90_variants.sh DIR [variants] [configs]
set -uo pipefail
DIR=$1
VARIANTS=${2:-$(cd "$DIR" && ls sm90_* | sed 's/^sm90_//' | tr '\n' ' ')}
CONFIGS=${3:-"256,128,1 256,128,2 128,128,1 128,128,2 128,192,1"}
SHAPES=${SHAPES:-"16384x4096x4096 16384x16384x4096 16384x4096x16384 4096x4096x4096 1024x4096x4096 3000x2176x7168"}
MODES="burst"
[ "${SUSTAIN_MS:-0}" != 0 ] && MODES="burst sustained"
for shape in $SHAPES; do
  for cfg in $CONFIGS; do
    for mode in $MODES; do
      for v in $VARIANTS; do
        printf "%-12s %-9s " "$v" "$mode"
        sus=0
        [ "$mode" = sustained ] && sus=$SUSTAIN_MS
        LTX_SM90_SUSTAIN_MS=$sus timeout 60 "$DIR/sm90_$v" ${shape//x/ } ${cfg//,/ } 30 | tr '\n' ' '
        echo
      done
    done
  done
done
