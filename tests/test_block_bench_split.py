"""bench/ltx_core_block.py --split-processes (one process per package, turns interleaved): the
coordinator's turns, checked with small workers that speak its protocol; the workers' arguments;
the merged results and the bf16 control between processes."""
import io
import json
import pathlib
import sys
import textwrap

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bench"))
import ltx_core_block as blk  # noqa: E402

WORKER = textwrap.dedent('''
    import json, sys, time
    name, log, keys = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    print("a line of ordinary output", flush=True)
    for key in keys:
        print(PROTOCOL + json.dumps({"ready": key}), flush=True)
        assert sys.stdin.readline() == "go\\n"
        with open(log, "a") as f:
            f.write(json.dumps([name, "start", key]) + "\\n")
        time.sleep(0.02)
        with open(log, "a") as f:
            f.write(json.dumps([name, "end", key]) + "\\n")
        print(PROTOCOL + json.dumps({"done": key}), flush=True)
    sys.exit(3 if name == "b" else 0)
''')


def test_turns_never_overlap_and_alternate(tmp_path):
    log = tmp_path / "turns.log"
    both = [[0, 0, -1], [0, 0, 0], [0, 0, 1], [0, 0, 2]]
    keys = {"a": both + [[1, 0, -1]], "b": both[:2] + [[0, 0, 0, 5]] + both[2:] + [[0, 3, 0]]}
    code = f"PROTOCOL = {blk.PROTOCOL!r}\n" + WORKER
    out = io.StringIO()
    rcs = blk.coordinate({n: [sys.executable, "-c", code, n, str(log), json.dumps(k)] for n, k in keys.items()}, out)
    assert rcs == {"a": 0, "b": 3}
    assert out.getvalue().count("a line of ordinary output") == 2 and "[a] a line" in out.getvalue()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    # one turn at a time: every start is followed by its own end
    for (n1, e1, k1), (n2, e2, k2) in zip(events[::2], events[1::2]):
        assert (e1, e2) == ("start", "end") and n1 == n2 and k1 == k2
    turns = [(n, tuple(k)) for n, e, k in events if e == "start"]
    assert sorted(turns) == sorted((n, tuple(k)) for n, ks in keys.items() for k in ks)  # every turn ran once
    assert [t[1] for t in turns] == sorted(t[1] for t in turns)  # in key order
    shared = [n for n, k in turns if list(k) in both]
    assert shared == ["a", "b", "b", "a", "a", "b", "b", "a"]  # pairs, the first alternating


def test_worker_argv():
    argv = ["--ltx2", "/x", "--split-processes", "--packages", "ours,upstream", "--json=/r.json", "--modes",
            "compile", "--workdir", "/w"]
    got = blk.worker_argv(argv, "upstream", pathlib.Path("/t/upstream.json"), pathlib.Path("/w"))
    assert got == ["--ltx2", "/x", "--modes", "compile", "--packages", "upstream", "--serve", "--json",
                   "/t/upstream.json", "--workdir", "/w/upstream"]


def _timing(variant, package, rounds):
    return {"variant": variant, "package": package, "tokens": 8192, "mode": "compile", "median_ms": rounds[0],
            "round_medians_ms": rounds, "round_mhz": [None] * len(rounds), "setup_s": 1.0, "vs_eager": 0.0}


def test_merge_and_process_control():
    env = {"device": "d"}
    proto = {"packages": ["x"], "isolation": "in-process"}
    ours = {"environment": env, "protocol": proto, "notes": ["n"], "errors": [], "ops_registered": {"ours": ["a"]},
            "accuracy": [], "profile": [],
            "timing": [_timing("bf16", "torch", [10.0, 10.2]), _timing("fp8", "ours", [8.0, 8.1])]}
    up = {"environment": env, "protocol": proto, "notes": [], "errors": [{"what": "w", "traceback": ""}],
          "ops_registered": {"upstream": ["b"]}, "accuracy": [], "profile": [],
          "timing": [_timing("bf16", "torch", [10.0, 10.0]), _timing("fp8", "upstream", [8.0, 8.0])]}
    res = blk.merge({"ours": ours, "upstream": up})
    assert {r["package"] for r in res["timing"]} == {"torch@ours", "torch@upstream", "ours", "upstream"}
    assert res["ratios"][0]["ours_over_upstream"] == pytest.approx((1.0 + 8.1 / 8.0) / 2)
    (ctl,) = res["process_control"]
    assert ctl["bf16_ratio"] == pytest.approx(1.01) and ctl["processes"] == ["ours", "upstream"]
    assert res["notes"] == ["ours process: n"] and res["errors"][0]["what"] == "upstream process: w"
    assert res["ops_registered"] == {"ours": ["a"], "upstream": ["b"]}
    blk.print_tables(res)  # prints the control line


def test_median_ci_order_statistics():
    assert blk.median_ci([1.0] * 5) is None
    assert blk.median_ci([3.0, 1.0, 2.0, 8.0, 5.0, 4.0, 7.0, 6.0]) == (1.0, 8.0)  # n = 8: 99.2 %, the next pair 93 %
    values = [float(v) for v in range(40)]
    assert blk.median_ci(values[::-1]) == (13.0, 26.0)  # n = 40: 96.2 %, the next pair 91.9 %
