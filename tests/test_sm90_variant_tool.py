"""tools/sm90_kernel_variant.py rewrites exact lines of the SM90 kernel: every variant must still
apply to the kernel as it is (the tool exits with the line it could not find otherwise), and the
copy must differ from the kernel where the variant changes it. Pure text; no compiler, no GPU."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "sm90_kernel_variant.py"
SRC = ROOT / "csrc" / "gemm_sm90"
KERNEL = "fp8_gemm_sm90_kernel.cu"


@pytest.mark.parametrize("variant", ["nopromote", "fadd", "muladd", "boxes", "rank0a", "boxes+rank0a", "c192",
                                     "c192+rank0a", "muladd+boxes", "hint", "relfirst", "hint+relfirst", "peek", "hint+peek",
                                     "ngroup", "ngroup8", "ngroup32", "gm16", "hint+ngroup", "txlast",
                                     "epiwait", "hint+epiwait", "nostorewait", "nostorewait+ngroup8",
                                     "samc", "samc+ngroup8", "splitepi", "stagger", "stagger2",
                                     "stagger+splitepi", "epiafter", "epiafter+boxes",
                                     "epiafter+boxes+rank0a+samc+ngroup8+hint+relfirst", "noepi", "nostore",
                                     "nobar", "nobar+nostorewait", "cvtint", "pdl", "warpbox", "stgpk", "lent", "twowaves",
                                     "onebar", "sbuf3", "stsm", "onebar+sbuf3+stsm", "early",
                                     "early+hint", "noop", "stamps"])
def test_variant_applies_to_the_current_kernel(variant, tmp_path):
    r = subprocess.run([sys.executable, str(TOOL), variant, str(SRC), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    original = (SRC / KERNEL).read_text()
    rewritten = (tmp_path / KERNEL).read_text()
    assert rewritten != original
    # the other files of the folder are copied unchanged
    for f in SRC.iterdir():
        if f.is_file() and f.name != KERNEL:
            assert (tmp_path / f.name).read_bytes() == f.read_bytes()


def test_unknown_variant_is_refused(tmp_path):
    r = subprocess.run([sys.executable, str(TOOL), "nosuchvariant", str(SRC), str(tmp_path)], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "nosuchvariant" in (r.stdout + r.stderr)
