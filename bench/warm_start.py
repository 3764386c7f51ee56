"""Whole-process warm start: four builds, one run, spawning python to the first compiled result.

Usage: PY bench/warm_start.py --stock PY --patched PY --patched-isa PY --upstream PY
                              [--repeats N] [--out DIR]
       PY bench/warm_start.py --report DIR    (the section and plot again from DIR/results.json)

What a user's process pays on a warm start: the parent records the time, spawns
`PYTHON bench/warm_start.py --child`, and the child reports when its first
compiled result is ready, so the figure contains interpreter start-up, `import
torch`, the per-process CPU vector-ISA probe, Dynamo and Inductor with their
cache hits, and the first call. The workload is worker.py's convbn-8 (conv +
batch-norm + relu blocks, eval, under torch.no_grad) on the CPU, with the
default Inductor configuration (the FX graph and AOTAutograd caches are on by
default on every build here).

Each build gets its own TORCHINDUCTOR_CACHE_DIR, shared by all its runs and
filled by one untimed run first (compiled graphs, the ISA test libraries and,
where the build has them, the probe's `.load_ok` markers). Then every repeat
starts each build once, the order rotating every repeat. The builds: stock
2.11.0, patched 2.11.0 (default topic, pre-grad-pass-timing), patched 2.11.0
with both topics (plus cpu-isa-probe) and upstream (2.15.0, the newest).

Writes the key "warm_start_process" into DIR/results.json (the rest of the file
is kept), the section between the warm-start markers of DIR/results.md (added
if missing, the rest kept) and DIR/warm_start_process.png (with matplotlib).
Exit codes: 0 done; 1 a run failed or a build is not what its flag says; 2 usage.
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


CLOCK = time.CLOCK_MONOTONIC  # system-wide on Linux: parent and child read the same clock
HERE = Path(__file__).resolve().parent
BUILDS = ["stock", "patched", "patched-isa", "upstream"]
NAMES = {"stock": "stock {v}", "patched": "patched {v} (default topic)",
         "patched-isa": "patched {v} (both topics)", "upstream": "upstream {v}"}
# What the ISA probe of each build must look like (checked in the child's source):
# True = the child dlopens without `import torch` and a `.load_ok` marker skips it.
FAST_PROBE = {"stock": False, "patched": False, "patched-isa": True, "upstream": True}
WORKLOAD = ("convbn", 8, "infer")
PHASES = [("startup_seconds", "interpreter start-up"), ("import_torch_seconds", "import torch"),
          ("probe_seconds", "CPU ISA probe"), ("compile_seconds", "torch.compile → first result")]
BEGIN, END = "<!-- warm-start-process: begin -->", "<!-- warm-start-process: end -->"


def child() -> None:
    """One timed process; prints its clock readings and counters as JSON."""
    t_import = time.clock_gettime(CLOCK)
    import torch
    t_torch = time.clock_gettime(CLOCK)

    sys.path.insert(0, str(HERE))
    import worker  # for build(); what else it imports, torch.compile imports anyway
    from torch._dynamo.utils import counters
    from torch._inductor import cpu_vec_isa

    probe = {"calls": 0, "seconds": 0.0}
    real = cpu_vec_isa.valid_vec_isa_list  # cached: the first call is the probe

    def timed_probe() -> Any:
        probe["calls"] += 1
        start = time.clock_gettime(CLOCK)
        try:
            return real()
        finally:
            probe["seconds"] += time.clock_gettime(CLOCK) - start

    cpu_vec_isa.valid_vec_isa_list = timed_probe  # pick_vec_isa looks it up here
    model, x = worker.build(*WORKLOAD)
    with torch.no_grad():
        out = torch.compile(model)(x)
        t_result = time.clock_gettime(CLOCK)
        expected = model(x)
    source = Path(cpu_vec_isa.__file__).read_text()
    print(json.dumps({
        "t_import": t_import, "t_torch": t_torch, "t_result": t_result,
        "probe_seconds": probe["seconds"], "probe_calls": probe["calls"],
        "isa": str(cpu_vec_isa.pick_vec_isa()),
        "fast_probe": "def _build_probe_env(" in source and ".load_ok" in source,
        "aot_hit": counters["aot_autograd"]["autograd_cache_hit"],
        "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
        "matches_eager": bool(torch.allclose(out, expected, atol=1e-4, rtol=1e-4)),
        "torch": torch.__version__,
    }), flush=True)


def run_child(python: str, cache_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir)}
    t_spawn = time.clock_gettime(CLOCK)
    result = subprocess.run([python, str(HERE / "warm_start.py"), "--child"],
                            capture_output=True, text=True, env=env)
    t_exit = time.clock_gettime(CLOCK)
    if result.returncode != 0:
        raise SystemExit(f"warm start: the run failed ({python}):\n{result.stderr[-3000:]}")
    c = json.loads(result.stdout.splitlines()[-1])
    run = {
        "seconds_to_first_result": c["t_result"] - t_spawn,
        "startup_seconds": c["t_import"] - t_spawn,
        "import_torch_seconds": c["t_torch"] - c["t_import"],
        "probe_seconds": c["probe_seconds"],
        "compile_seconds": c["t_result"] - c["t_torch"] - c["probe_seconds"],
        "seconds_to_exit": t_exit - t_spawn,
    }
    kept = ("probe_calls", "isa", "fast_probe", "aot_hit", "fx_hit", "fx_miss",
            "matches_eager", "torch")
    return {**run, **{k: c[k] for k in kept}}


def check_build(build: str, run: dict[str, Any]) -> None:
    if run["fast_probe"] != FAST_PROBE[build]:
        want = "has" if FAST_PROBE[build] else "must not have"
        raise SystemExit(f"warm start: the --{build} torch ({run['torch']}) {want} the "
                         "cpu-isa-probe change (_build_probe_env and the .load_ok marker); "
                         "wrong venv?")


def measure(pythons: dict[str, str], repeats: int) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    total = repeats * len(BUILDS)
    with tempfile.TemporaryDirectory(prefix="pregrad-warm-start-") as tmp:
        caches = {b: Path(tmp) / b for b in BUILDS}
        started = time.monotonic()
        for i, build in enumerate(BUILDS):
            print(f"[prime {i + 1}/{len(BUILDS)}] {build}: one untimed run fills its cache "
                  "directory ...", file=sys.stderr, flush=True)
            run = run_child(pythons[build], caches[build])
            check_build(build, run)
            print(f"    {run['seconds_to_first_result']:.1f} s (cold; ISA {run['isa']})",
                  file=sys.stderr, flush=True)
        primed = time.monotonic() - started
        print(f"timed runs: {repeats} x {len(BUILDS)}, at most about "
              f"{primed / len(BUILDS) * total / 60:.0f} min (the priming runs were cold)",
              file=sys.stderr, flush=True)
        started = time.monotonic()
        for repeat in range(repeats):
            shift = repeat % len(BUILDS)
            for build in BUILDS[shift:] + BUILDS[:shift]:
                run = run_child(pythons[build], caches[build])
                runs.append({"build": build, "repeat": repeat, **run})
                done = len(runs)
                per = (time.monotonic() - started) / done
                hit = ("" if run["aot_hit"] and run["fx_hit"] and not run["fx_miss"]
                       else " (NOT a cache hit)")
                print(f"[{done}/{total}] repeat {repeat + 1} {build}: "
                      f"{run['seconds_to_first_result']:.2f} s = start-up "
                      f"{run['startup_seconds']:.2f} + import torch "
                      f"{run['import_torch_seconds']:.2f}"
                      f" + probe {run['probe_seconds']:.2f} + compile "
                      f"{run['compile_seconds']:.2f}{hit} — about "
                      f"{per * (total - done) / 60:.1f} min left", file=sys.stderr, flush=True)
    versions = {b: next(r["torch"] for r in runs if r["build"] == b) for b in BUILDS}
    return {"machine": machine(), "repeats": repeats, "workload": list(WORKLOAD),
            "torch": versions, "runs": runs}


def machine() -> dict[str, Any]:
    """host.py's description of the machine (bench.py records the same), and
    how busy it was. Imported here, in the parent only: the timed child
    imports nothing it does not need."""
    sys.path.insert(0, str(HERE))
    import host
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {**host.machine(), "load_average_at_end": load}


def stats(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for build in BUILDS:
        runs = [r for r in data["runs"] if r["build"] == build]
        totals = [r["seconds_to_first_result"] for r in runs]
        out[build] = {
            "name": NAMES[build].format(v=data["torch"][build].split("+")[0]),
            "median": statistics.median(totals), "min": min(totals), "max": max(totals),
            **{key: statistics.median(r[key] for r in runs) for key, _ in PHASES},
            "exit": statistics.median(r["seconds_to_exit"] for r in runs),
            "hits": all(r["aot_hit"] and r["fx_hit"] and not r["fx_miss"] for r in runs),
            "eager": all(r["matches_eager"] for r in runs),
            "isa": sorted({r["isa"] for r in runs}),
        }
    return out


def ratios(s: dict[str, dict[str, Any]]) -> dict[str, float]:
    out = {f"{b}/upstream": s[b]["median"] / s["upstream"]["median"] for b in BUILDS}
    out["patched-isa/stock"] = s["patched-isa"]["median"] / s["stock"]["median"]
    return out


def markdown(data: dict[str, Any]) -> str:
    s, r = stats(data), ratios(stats(data))
    m = data["machine"]
    up = s["upstream"]["name"]
    lines = [
        BEGIN,
        "## Whole-process warm start",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores; {m['date']}; repeats: {data['repeats']} "
        f"(round-robin, rotating order); load average at the end: {m['load_average_at_end']:.2f}; "
        "builds: " + ", ".join(f"{s[b]['name']} = torch {data['torch'][b]}" for b in BUILDS) + ".",
        "",
        "Wall time from spawning `python` to the first compiled result of convbn-8 (CPU "
        "inference, `torch.compile` with the default configuration), the build's cache "
        "directory warm (one untimed run first): median [min–max]. The phases are "
        "medians of each phase; the ISA probe runs inside `torch.compile`, and \"compile\" "
        f"is the rest of it. Ratios compare medians with {up}; below 1.00 is faster.",
        "",
        f"| build | s to first result | ÷ {up} | interpreter | import torch | ISA probe | "
        "compile (cache hits) | s to exit | cache hits | = eager |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for b in BUILDS:
        x = s[b]
        lines.append(
            f"| {x['name']} | {x['median']:.2f} [{x['min']:.2f}–{x['max']:.2f}] | "
            f"{r[f'{b}/upstream']:.2f} | {x['startup_seconds']:.2f} | "
            f"{x['import_torch_seconds']:.2f} | {x['probe_seconds']:.2f} | "
            f"{x['compile_seconds']:.2f} | {x['exit']:.2f} | {'yes' if x['hits'] else 'NO'} | "
            f"{'yes' if x['eager'] else 'NO'} |")
    isas = sorted({i for b in BUILDS for i in s[b]["isa"]})
    lines += [
        "",
        f"{s['patched-isa']['name']} ÷ {s['stock']['name']}: {r['patched-isa/stock']:.2f}; "
        f"ISA picked: {', '.join(isas)}"
        + (" (the same on every build)." if len(isas) == 1 else " (builds differ!)."),
        "",
        "![whole-process warm start](warm_start_process.png)",
        END,
    ]
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], out: Path) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable here: no plot", file=sys.stderr)
        return None
    s, r = stats(data), ratios(stats(data))
    fig, ax = plt.subplots(figsize=(8, 4.8))
    colors = ["#8c8c8c", "#dd8452", "#c44e52", "#4c72b0"]
    xs = range(len(BUILDS))
    bottom = [0.0] * len(BUILDS)
    for (key, name), color in zip(PHASES, colors):
        heights = [s[b][key] for b in BUILDS]
        ax.bar(xs, heights, bottom=bottom, color=color, label=name, width=0.6)
        bottom = [a + h for a, h in zip(bottom, heights)]
    medians = [s[b]["median"] for b in BUILDS]
    ax.errorbar(xs, medians, yerr=[[m - s[b]["min"] for m, b in zip(medians, BUILDS)],
                                   [s[b]["max"] - m for m, b in zip(medians, BUILDS)]],
                fmt="_", color="black", markersize=18, capsize=6, label="total: median, min–max")
    for x, b in zip(xs, BUILDS):
        ax.annotate(f"{s[b]['median']:.1f} s\n×{r[f'{b}/upstream']:.2f}",
                    (x, s[b]["max"]), textcoords="offset points", xytext=(0, 6), ha="center",
                    fontsize=9)
    ax.set_xticks(list(xs), [s[b]["name"].replace(" (", "\n(") for b in BUILDS], fontsize=9)
    ax.set_ylabel("seconds from spawn to first compiled result")
    ax.set_ylim(0, max(s[b]["max"] for b in BUILDS) * 1.25)
    ax.set_title(f"Whole-process warm start, convbn-8 CPU inference (median of {data['repeats']}; "
                 f"× = ratio to {s['upstream']['name']})", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(out / "warm_start_process.png", dpi=110)
    plt.close(fig)
    return "warm_start_process.png"


def write_section(md: Path, section: str) -> None:
    text = md.read_text() if md.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section.rstrip("\n") + rest.split(END, 1)[1]
    else:
        text = text + ("\n" if text and not text.endswith("\n\n") else "") + section
    md.write_text(text)


def report(data: dict[str, Any], out: Path) -> int:
    section = markdown(data)
    write_section(out / "results.md", section)
    image = plot(data, out)
    print(section.replace(BEGIN + "\n", "").replace(END + "\n", ""))
    s, r = stats(data), ratios(stats(data))
    print("side by side: " + "   ".join(
        f"{s[b]['name']} {s[b]['median']:.2f} s ×{r[f'{b}/upstream']:.2f}" for b in BUILDS))
    print(f"{s['patched-isa']['name']} ÷ {s['stock']['name']}: {r['patched-isa/stock']:.2f}")
    print("README rows (build | s to first result | ÷ upstream | of which ISA probe):")
    for b in BUILDS:
        x = s[b]
        print(f"| {x['name']} | {x['median']:.2f} [{x['min']:.2f}–{x['max']:.2f}] | "
              f"{r[f'{b}/upstream']:.2f} | {x['probe_seconds']:.2f} |")
    print(f"written: {out / 'results.json'}, {out / 'results.md'}"
          + (f", {out / image}" if image else ""))
    return 0


def main() -> int:
    if sys.argv[1:] == ["--child"]:
        child()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for build in BUILDS:
        parser.add_argument(f"--{build}", metavar="PY", help=f"python of the {build} torch")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per build (default 5)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="only write the section and the plot from DIR/results.json")
    args = parser.parse_args()
    if args.report:
        return report(json.loads((args.report / "results.json").read_text())["warm_start_process"],
                      args.report)
    missing = [f"--{b}" for b in BUILDS if not getattr(args, b.replace("-", "_"))]
    if missing:
        parser.error("the following arguments are required: " + ", ".join(missing))
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    pythons = {b: getattr(args, b.replace("-", "_")) for b in BUILDS}
    data = measure(pythons, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**saved, "warm_start_process": data}, indent=1))
    return report(data, args.out)


if __name__ == "__main__":
    sys.exit(main())
