"""tools/ncu_gemm_summary.py's split of a kernel's hot-loop stall samples, on made-up SASS rows."""
import importlib.util
import pathlib

spec = importlib.util.spec_from_file_location(
    "ncu_gemm_summary", pathlib.Path(__file__).resolve().parents[1] / "tools/ncu_gemm_summary.py")
S = importlib.util.module_from_spec(spec)
spec.loader.exec_module(S)


def row(src, samples, executed=200000):
    return {"Source": src, "Warp Stall Sampling (All Samples)": str(samples), "Instructions Executed": str(executed),
            "Address": "0x0"}


def test_waits_count_the_branch_on_the_try_wait_predicate():
    lines = [
        row("SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR13+0x35400], R107", 10),
        row("IMAD.U32 R111, RZ, RZ, UR16", 5),  # scheduled between the try-wait and its branch
        row("@!P2  BRA 0x7fd27b7b06e0", 40),  # the wait: counted
        row("QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR16], R24, !UPT, gsb0", 20),
        row("WARPGROUP.DEPBAR.LE gsb0, 0x0", 30),
        row("@P2  BRA 0x7fd27b7ab7b0", 7),  # the other sense: not the retry
        row("SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR13+0x35408], R107", 0),
        row("PLOP3.LUT P2, PT, PT, PT, UP0, 0x80, 0x0", 3),  # P2 written again
        row("@!P2  BRA 0x7fd27b7ab7b0", 4),  # a branch on the new P2
        row("FFMA R1, R2, R3, R1", 8),
        row("@!P0  BRA 0x7fd27b7b0620", 9),  # not the try-wait's predicate
        row("FFMA R1, R2, R3, R1", 1, executed=10),  # outside the hot loop
    ]
    got = S.split_hot_loop(lines, hot=100000)
    n = 136
    assert got["hot_loop_samples"] == n
    assert got["mbarrier wait"] == round(100 * 50 / n, 1)
    assert got["other"] == round(100 * 28 / n, 1)
    assert got["DEPBAR (own wgmma)"] == round(100 * 30 / n, 1) and got["promotion FFMA/FMUL"] == round(100 * 8 / n, 1)
    assert got["of_all_%"] == round(100 * n / (n + 1), 1) and got["instructions_per_wave"] == 11.0
    assert S.outside_hot_loop(lines, 100000, 1)[0].split("%")[0].strip() == "0.7"


def test_wait_sites():
    lines = [
        row("SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR13+0x35400], R107", 10),
        row("IMAD.U32 R111, RZ, RZ, UR16", 5),
        row("@!P2  BRA 0x7fd27b7b06e0", 40),
        row("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR13+0x35408], R6", 1),
        row("@!P0  BRA 0x7fd27b7b0620", 4),
        row("FFMA R1, R2, R3, R1", 40),
    ]
    assert S.wait_sites(lines, 100000) == ["[UR13+0x35400] executed 200,000: 50.0 %",
                                           "[UR13+0x35408] executed 200,000: 5.0 %"]
