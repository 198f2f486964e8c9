"""tools/tile_boundary_fit.py on a committed Nsight Compute table: pure text, no GPU."""
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("tile_boundary_fit", ROOT / "tools" / "tile_boundary_fit.py")
tbf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tbf)

TABLE = ROOT / "bench" / "results" / "2026-12-05-h200-sm90-packed-epilogue" / "tiles_ncu_cycles.txt"


def test_fit_recovers_a_line():
    c, t = tbf.fit([(16, 16 * 1000 + 3000), (32, 32 * 1000 + 3000), (128, 128 * 1000 + 3000)])
    assert c == pytest.approx(1000) and t == pytest.approx(3000)


def test_waves_count_the_busiest_cta():
    assert tbf.waves("8192x8192x2048", (256, 128, 1), 132) == 16  # 2048 tiles
    assert tbf.waves("8192x8192x2048", (256, 128, 2), 132) == 16  # 1024 pairs on 66 clusters
    assert tbf.waves("8192x8192x2048", (192, 128, 1), 132) == 21  # 43 x 64 tiles


def test_table_fit():
    res = {r["kernel"]: r for r in tbf.boundary_fit(TABLE.read_text())}
    assert "extension (host's pick)" not in res  # its tile is not in the table
    assert set(res) == {"pk@256x128x1", "pk@192x128x1", "pk@256x128x2", "deep_gemm"}
    assert res["pk@256x128x1"]["c"] == pytest.approx(1068, abs=1)
    assert res["deep_gemm"]["t"] == pytest.approx(2397, abs=1)
    for r in res.values():  # the fitted shapes sit on the line
        assert abs(r["residual"]["32768x4096x4096"]) < 0.01


def test_one_k_count_is_refused(tmp_path):
    one = "kernel  8192x4096x4096\npk@256x128x1  300,000\n"
    f = tmp_path / "t.txt"
    f.write_text(one)
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "tile_boundary_fit.py"), str(f)], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "two K-block counts" in r.stderr


def test_table_without_header_is_refused():
    with pytest.raises(ValueError, match="no header line"):
        tbf.read_table("pk@256x128x1  300,000\n")


def test_missing_values_are_left_out_of_the_fit():
    line = {16: 16 * 1000 + 3000, 32: 32 * 1000 + 3000, 128: 128 * 1000 + 3000}
    shapes = ["8448x4096x2048", "8448x4096x4096", "8448x4096x16384", "8448x6144x4096"]
    table = "kernel " + " ".join(shapes) + "\n"
    # 8448 rows = 33 row blocks of 256: 33 x 16 / 66 = 8 waves at N 4096 (2-CTA), 12 at N 6144
    table += "deep_gemm " + " ".join(f"{8 * line[int(s.split('x')[2]) // 128]:,}" for s in shapes[:3]) + " -\n"
    (r,) = tbf.boundary_fit(table, min_kb=16)
    assert r["c"] == pytest.approx(1000) and r["t"] == pytest.approx(3000)
    assert r["residual"]["8448x6144x4096"] is None
