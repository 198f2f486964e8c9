"""Print a table of a pytest-benchmark JSON written by bench/ (ours vs the anchors of the same run)."""
import json
import sys


def main(path):
    data = json.load(open(path))
    rows = []
    for b in data["benchmarks"]:
        e = b["extra_info"]
        unit = "tflops" if "tflops" in e else "gbps"
        anchors = sorted({k[len("anchor_"):-len("_" + unit)] for k in e
                          if k.startswith("anchor_") and k.endswith(unit) and not k.endswith("_graph_" + unit)})
        ours = e.get(unit)
        parts = [f"{a} {e[f'anchor_{a}_{unit}']:.0f}"
                 + (f" (graph {e[f'anchor_{a}_graph_{unit}']:.0f})" if f"anchor_{a}_graph_{unit}" in e else "")
                 for a in anchors]
        label = e.get("op", b["name"]) + (f"[{e['backend']}]" if "backend" in e else "")
        extra = e.get("out", "")
        graph = e.get("graph_" + unit)
        unit_name = "TFLOP/s" if unit == "tflops" else "GB/s"
        graph_txt = f"{graph:.0f}" if graph else "-"
        err = f" err {e['rel_err']:.1e}" if "rel_err" in e else ""
        rows.append(f"| {label} | {e.get('shape', '')} {extra} | {ours:.0f} {unit_name} | {graph_txt} | "
                    f"{'; '.join(parts)}{err} |")
    print(f"device: {data['benchmarks'][0]['extra_info'].get('device', '?') if data['benchmarks'] else '?'}")
    print("| op | shape | ours (eager call) | ours (graph replay) | anchors (same run, eager) |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1])
