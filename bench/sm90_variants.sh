#!/usr/bin/env bash
# Time standalone SM90 GEMM builds (bench/sm90_standalone.cu, built into DIR beforehand as
# DIR/sm90_<variant>) at the LTX-2 shapes and tile configs; each run first checks its output.
#   bash bench/sm90_variants.sh DIR [variants] [configs]
set -uo pipefail
DIR=$1
VARIANTS=${2:-$(cd "$DIR" && ls sm90_* | sed 's/^sm90_//' | tr '\n' ' ')}
CONFIGS=${3:-"256,128,1 256,128,2 128,128,1 128,128,2 128,192,1"}
for shape in "16384 4096 4096" "16384 16384 4096" "16384 4096 16384" "4096 4096 4096" "1024 4096 4096" "3000 2176 7168"; do
  for cfg in $CONFIGS; do
    for v in $VARIANTS; do
      printf "%-10s " "$v"
      timeout 60 "$DIR/sm90_$v" $shape ${cfg//,/ } 20 | tr '\n' ' '
      echo
    done
  done
done
