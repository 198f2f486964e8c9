"""tools/cta_stamps_summary.py on the committed per-CTA stamps and on made-up launches: no GPU."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "cta_stamps_summary.py"
RUN = ROOT / "bench" / "results" / "2026-12-07-h100-sm90-cta-stamps-and-one-replay"


def summary(paths):
    out = subprocess.run([sys.executable, str(TOOL), *map(str, paths)], capture_output=True, text=True, check=True)
    return out.stdout


def write(path, rows):
    path.write_text("cta,sm,start_ns,end_ns,cycles\n" + "".join(f"{c},{sm},0,{d},{d}\n" for c, sm, d in rows))
    return path


def test_committed_run():
    text = summary(RUN / f"stamps_1024_{i}.csv" for i in (1, 2, 3))
    assert "launch 1: 128 CTAs, duration min / median / max 24672 / 25456 / 25920 ns" in text
    assert "same SM, its first two launches, correlation of durations: +0.70 over 128 SMs" in text


def test_a_slow_sm_follows_its_sm_not_its_cta(tmp_path):
    # SM 3 is slow; the CTAs move to other SMs in the second launch
    a = write(tmp_path / "a.csv", [(c, c, 1000 + (300 if c == 3 else 10 * c)) for c in range(6)])
    b = write(tmp_path / "b.csv", [(c, (c + 2) % 6, 1000 + (300 if (c + 2) % 6 == 3 else 10 * c)) for c in range(6)])
    text = summary([a, b])
    assert "launch 1: 6 CTAs, duration min / median / max 1000 / 1030 / 1300 ns" in text
    same_sm = float(text.split("same SM, its first two launches, correlation of durations: ")[1].split()[0])
    same_cta = float(text.split("1-2 ")[1].split()[0])
    assert same_sm > 0.9 > same_cta
