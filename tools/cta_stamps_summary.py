"""Summarize per-CTA stamps of several launches of one shape (the standalone harness's
LTX_SM90_STAMPS_CSV files): whether the same CTAs or SMs are slow in every launch, or the
slowest differ from launch to launch.

    python tools/cta_stamps_summary.py stamps_512_1.csv stamps_512_2.csv stamps_512_3.csv
"""
import argparse
import csv
import statistics as st


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="one file a launch, same shape and tile")
    args = ap.parse_args()
    launches = []
    for path in args.csv:
        with open(path) as f:
            launches.append({int(r["cta"]): (int(r["sm"]), float(r["end_ns"]) - float(r["start_ns"])) for r in csv.DictReader(f)})
    ctas = sorted(launches[0])
    dur = [[run[c][1] for c in ctas] for run in launches]
    for i, d in enumerate(dur):
        print(f"launch {i + 1}: {len(d)} CTAs, duration min / median / max {min(d):.0f} / {st.median(d):.0f} / {max(d):.0f} ns"
              f" (max {100 * (max(d) / st.median(d) - 1):.1f} % over the median)")
    pairs = [(i, j) for i in range(len(dur)) for j in range(i + 1, len(dur))]
    print("same CTA, two launches, correlation of durations:",
          ", ".join(f"{i + 1}-{j + 1} {st.correlation(dur[i], dur[j]):+.2f}" for i, j in pairs))
    by_sm = {}
    for run in launches:
        for sm, d in run.values():
            by_sm.setdefault(sm, []).append(d)
    sms = [s for s, v in by_sm.items() if len(v) > 1]
    if len(sms) > 2:  # each SM in the first two launches that used it (CTAs land on other SMs each launch)
        first = [by_sm[s][0] for s in sms]
        second = [by_sm[s][1] for s in sms]
        print(f"same SM, its first two launches, correlation of durations: {st.correlation(first, second):+.2f} over {len(sms)} SMs")


if __name__ == "__main__":
    main()
