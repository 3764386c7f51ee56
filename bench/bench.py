"""Warm-start benchmark: stock vs patched vs upstream torch, one run, side by side.

Usage: PY bench/bench.py --stock PY --patched PY --upstream PY [--repeats N]
                         [--quick] [--out DIR]
       PY bench/bench.py --report DIR    (tables and plots again from DIR/results.json)

The whole-process warm-start figure is warm_start.py's; a "warm_start_process"
entry it left in DIR/results.json is kept, and --report writes its section too.

For every configuration (workload, size, mode, custom pass) and every
repeat, each build in turn (the order rotates every repeat: ABC, BCA, CAB)
compiles in a new process against an empty cache directory (cold), then in
another new process against the same directory (warm); see worker.py for what
one process measures. Writes DIR/results.json (every run), DIR/results.md
(medians, spread and ratios) and, where matplotlib is importable, two plots.
It asserts nothing about time: it is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from host import machine

HERE = Path(__file__).resolve().parent
BUILDS = ["stock", "patched", "upstream"]

# (workload, size, mode, custom pass)
FULL = (
    [("chain", links, "infer", custom) for links in (250, 1000, 3000)
     for custom in ("none", "fakeprop")]
    + [("transformer", 4, "infer", custom) for custom in ("none", "uuid", "nouuid", "fakeprop")]
    + [("transformer", 4, "train", custom) for custom in ("none", "fakeprop")]
    + [("convbn", 8, "infer", "none")]
    + [("resnet50", 2, "infer", custom) for custom in ("none", "fakeprop")]
)
QUICK = [("chain", 250, "infer", "none"), ("chain", 1000, "infer", "fakeprop"),
         ("transformer", 2, "train", "uuid")]


def run_worker(python: str, config: tuple[str, int, str, str], cache_dir: Path) -> dict[str, Any]:
    workload, size, mode, custom = config
    result = subprocess.run(
        [python, str(HERE / "worker.py"), workload, str(size), mode, custom],
        capture_output=True, text=True,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir)},
    )
    if result.returncode != 0:
        raise SystemExit(f"worker failed ({python} {config}):\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def label(config: tuple[str, int, str, str]) -> str:
    workload, size, mode, custom = config
    return f"{workload}-{size} {mode} / {custom}"


def median_spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def summarize(runs: list[dict[str, Any]], configs: list[tuple[str, int, str, str]],
              upstream: str = "upstream") -> str:
    def pick(config: tuple, build: str, phase: str, key: str) -> list[float]:
        return [r[key] for r in runs
                if tuple(r["config"]) == config and r["build"] == build and r["phase"] == phase]

    lines = [
        "Warm start (new process, cache directory filled by the cold run): median of the "
        "repeats, [min–max]. Ratios compare medians; below 1.00 means patched is faster.",
        "",
        f"| configuration | FX nodes | warm s: stock | patched | {upstream} | patched/stock "
        "| patched/upstream | warm pre-grad s: stock | patched | upstream | pre-grad s saved "
        "| pre-grad calls cold+warm (S/P/U) | warm AOT hit (S/P/U) | = eager |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for config in configs:
        warm = {b: median_spread(pick(config, b, "warm", "seconds_to_first_result"))
                for b in BUILDS}
        pre = {b: statistics.median(pick(config, b, "warm", "pre_grad_seconds")) for b in BUILDS}
        calls = "/".join(
            f"{statistics.median(pick(config, b, 'cold', 'pre_grad_calls')):.0f}+"
            f"{statistics.median(pick(config, b, 'warm', 'pre_grad_calls')):.0f}" for b in BUILDS)
        hits = "/".join(f"{min(pick(config, b, 'warm', 'aot_hit')):.0f}" for b in BUILDS)
        nodes = max(pick(config, "stock", "cold", "graph_nodes"))
        eager = all(r["matches_eager"] for r in runs if tuple(r["config"]) == config)
        cell = {b: f"{warm[b][0]:.2f} [{warm[b][1]:.2f}–{warm[b][2]:.2f}]" for b in BUILDS}
        lines.append(
            f"| {label(config)} | {nodes:.0f} | {cell['stock']} | {cell['patched']} | "
            f"{cell['upstream']} | {warm['patched'][0] / warm['stock'][0]:.2f} | "
            f"{warm['patched'][0] / warm['upstream'][0]:.2f} | {pre['stock']:.3f} | "
            f"{pre['patched']:.3f} | {pre['upstream']:.3f} | {pre['stock'] - pre['patched']:.3f} | "
            f"{calls} | {hits} | {'yes' if eager else 'NO'} |"
        )
    lines += [
        "",
        "Cold start (empty cache directory), pre-grad work by graph size, stock build:",
        "",
        "| configuration | FX nodes | built-in + custom pre-grad s | of which custom pass s "
        "| cold s |",
        "|---|---:|---:|---:|---:|",
    ]
    for config in configs:
        nodes = max(pick(config, "stock", "cold", "graph_nodes"))
        lines.append(
            f"| {label(config)} | {nodes:.0f} | "
            f"{statistics.median(pick(config, 'stock', 'cold', 'pre_grad_seconds')):.3f} | "
            f"{statistics.median(pick(config, 'stock', 'cold', 'custom_pass_seconds')):.3f} | "
            f"{statistics.median(pick(config, 'stock', 'cold', 'seconds_to_first_result')):.2f} |"
        )
    return "\n".join(lines) + "\n"


def plot(runs: list[dict[str, Any]], configs: list[tuple[str, int, str, str]],
         out: Path) -> list[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable here: no plots", file=sys.stderr)
        return []

    def med(config: tuple, build: str, phase: str, key: str) -> float:
        return statistics.median(r[key] for r in runs if tuple(r["config"]) == config
                                 and r["build"] == build and r["phase"] == phase)

    fig, ax = plt.subplots(figsize=(11, 0.55 * len(configs) * len(BUILDS) + 1.5))
    y = 0.0
    ticks, names = [], []
    colors = {"stock": "#c44e52", "patched": "#4c72b0", "upstream": "#55a868"}
    for config in configs:
        for build in BUILDS:
            pre = med(config, build, "warm", "pre_grad_seconds")
            total = med(config, build, "warm", "seconds_to_first_result")
            ax.barh(y, total - pre, color=colors[build], alpha=0.45)
            ax.barh(y, pre, left=total - pre, color=colors[build], hatch="//", edgecolor="black")
            ticks.append(y)
            names.append(f"{label(config)} · {build}")
            y += 1
        y += 0.6
    ax.set_yticks(ticks, names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("warm start: seconds to first compiled result (hatched: pre-grad passes)")
    ax.set_title("Warm-start breakdown per build (median of repeats)")
    fig.tight_layout()
    fig.savefig(out / "warm_breakdown.png", dpi=110)
    plt.close(fig)

    chain = [c for c in configs if c[0] == "chain"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for custom, key, name in (("none", "pre_grad_seconds", "built-in pre-grad passes"),
                              ("fakeprop", "custom_pass_seconds", "fake-tensor-prop custom pass")):
        points = sorted((med(c, "stock", "cold", "graph_nodes"), med(c, "stock", "cold", key))
                        for c in chain if c[3] == custom)
        if points:
            ax.plot(*zip(*points), marker="o", label=name)
    ax.set_xlabel("FX graph nodes (chain workload)")
    ax.set_ylabel("seconds per compile (stock 2.11.0, cold)")
    ax.set_title("Pre-grad work vs graph size")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "pregrad_vs_size.png", dpi=110)
    plt.close(fig)
    return ["warm_breakdown.png", "pregrad_vs_size.png"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for build in BUILDS:
        parser.add_argument(f"--{build}", help=f"python of the {build} torch")
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="only write results.md and the plots from DIR/results.json")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="three small configurations")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--only", metavar="TEXT[,TEXT...]",
                        help="run only the configurations whose label contains one TEXT")
    args = parser.parse_args()
    if args.report:
        saved = json.loads((args.report / "results.json").read_text())
        return report(saved, saved["runs"], args.report)
    missing = [f"--{build}" for build in BUILDS if not getattr(args, build)]
    if missing:
        parser.error("the following arguments are required: " + ", ".join(missing))
    configs = [c for c in (QUICK if args.quick else FULL)
               if not args.only or any(text in label(c) for text in args.only.split(","))]
    pythons = {build: getattr(args, build) for build in BUILDS}
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    total = len(configs) * args.repeats * len(BUILDS) * 2
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pregrad-bench-") as tmp:
        for repeat in range(args.repeats):
            for config in configs:
                order = BUILDS[repeat % 3:] + BUILDS[:repeat % 3]
                for build in order:
                    name = label(config).replace(' ', '_').replace('/', '')
                    cache_dir = Path(tmp) / f"{repeat}-{build}-{name}"
                    for phase in ("cold", "warm"):
                        result = run_worker(pythons[build], config, cache_dir)
                        runs.append({"config": list(config), "build": build, "phase": phase,
                                     "repeat": repeat, **result})
                        done = len(runs)
                        eta = (time.monotonic() - started) / done * (total - done)
                        print(f"[{done}/{total}] repeat {repeat + 1} {label(config)} {build} "
                              f"{phase}: {result['seconds_to_first_result']:.2f} s, pre-grad "
                              f"{result['pre_grad_seconds']:.3f} s ({result['pre_grad_calls']} "
                              f"call) — about {eta / 60:.0f} min left", file=sys.stderr, flush=True)
    info = {"machine": machine(), "repeats": args.repeats,
            "torch": {b: next(r["torch"] for r in runs if r["build"] == b) for b in BUILDS}}
    path = args.out / "results.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    if "warm_start_process" in saved:  # warm_start.py's figure, measured separately: keep it
        info["warm_start_process"] = saved["warm_start_process"]
    path.write_text(json.dumps({**info, "runs": runs}, indent=1))
    return report(info, runs, args.out)


def report(info: dict[str, Any], runs: list[dict[str, Any]], out: Path) -> int:
    configs: list[tuple[str, int, str, str]] = []
    for run in runs:
        if tuple(run["config"]) not in configs:
            configs.append(tuple(run["config"]))
    version = info["torch"].get("upstream", "").split("+")[0]
    table = summarize(runs, configs, f"upstream {version}".strip())
    header = (f"Machine: {info['machine']['cpu']}, {info['machine']['cores']} cores; "
              f"{info['machine']['date']}; repeats: {info['repeats']}; builds: "
              + ", ".join(f"{b} = torch {v}" for b, v in info["torch"].items())
              + (f"; {info['note']}" if info.get("note") else "") + "\n\n")
    (out / "results.md").write_text(header + table)
    images = plot(runs, configs, out)
    if "warm_start_process" in info:
        import warm_start
        data = info["warm_start_process"]
        warm_start.write_section(out / "results.md", warm_start.markdown(data))
        images += [image for image in [warm_start.plot(data, out)] if image]
    print(header + table)
    for image in images:
        print(f"plot: {out / image}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
