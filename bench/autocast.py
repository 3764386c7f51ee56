"""Autocast and the AOTAutogradCache (topic autocast-cache-key), measured
side by side on several builds in one run.

Usage: PY bench/autocast.py --build LABEL=PY [--build LABEL=PY ...]
                            [--repeats N] [--out FILE]

Two parts, each build in processes of its own (`PY bench/autocast.py --child
PART`), each with its own new TORCHINDUCTOR_CACHE_DIR:

1. Stale hits: both forms compiled under bfloat16, then, after
   `torch._dynamo.reset()` on the same cache, under float16 — a region inside
   the function that names no dtype (`torch.set_autocast_dtype` sets the
   ambient one) and an autocast-free function called inside
   `torch.autocast("cpu", dtype=...)`. Reports the second compile's
   AOTAutogradCache outcome, its output dtype and the max abs error against
   eager under float16.
2. Whole-process warm start: from spawning python to the first result of a
   small transformer block whose rotary-style embedding runs in an
   `autocast(enabled=False)` float32 island (inference, CPU), on a cache
   filled by one untimed run; the builds round-robin, --repeats runs each
   (default 5), median [min-max], ratios to the first build, and the
   AOTAutogradCache hits and bypasses each warm process saw.

Prints both tables as markdown and writes them to --out (default
bench/results/autocast.md). Exit 1 if a child fails.
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

HERE = Path(__file__).resolve().parent
CLOCK = time.CLOCK_MONOTONIC  # one clock for parent and child


def transformer_block() -> Any:
    import torch

    class RotaryBlock(torch.nn.Module):
        def __init__(self, width: int = 64) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(width, 3 * width)
            self.out = torch.nn.Linear(width, width)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                           torch.nn.Linear(4 * width, width))
            self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.inv_freq = torch.nn.Parameter(
                1.0 / (10000 ** (torch.arange(0, width, 2).float() / width)), requires_grad=False)

        def rotary(self, x: Any) -> Any:
            # The float32 island of HF transformers' rotary embeddings.
            with torch.autocast(device_type="cpu", enabled=False):
                positions = torch.arange(x.shape[1], dtype=torch.float32)
                freqs = torch.outer(positions, self.inv_freq.float())
                cos, sin = freqs.cos(), freqs.sin()
                x1, x2 = x.float()[..., ::2], x.float()[..., 1::2]
                return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

        def forward(self, x: Any) -> Any:
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            q, k = self.rotary(q), self.rotary(k)
            attention = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
            x = x + self.out(attention @ v)
            return x + self.mlp(self.norm2(x))

    return RotaryBlock()


def child_stale() -> None:
    import torch
    from torch._dynamo.utils import counters

    def in_region(a: Any, b: Any) -> Any:
        with torch.autocast(device_type="cpu"):
            return a @ b

    def plain(a: Any, b: Any) -> Any:
        return (a @ b).relu()

    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(32, 32, generator=generator), torch.randn(32, 32, generator=generator)
    report = {}
    for form in ("region", "call_site"):
        outcome = ""
        for dtype in (torch.bfloat16, torch.float16):
            torch._dynamo.reset()
            counters.clear()
            if form == "region":
                torch.set_autocast_dtype("cpu", dtype)
                compiled, eager = torch.compile(in_region)(a, b), in_region(a, b)
            else:
                with torch.autocast("cpu", dtype=dtype):
                    compiled, eager = torch.compile(plain)(a, b), plain(a, b)
            aot = counters["aot_autograd"]
            outcome = ("hit" if aot["autograd_cache_hit"] else
                       "bypass" if aot["autograd_cache_bypass"] else "miss")
        report[form] = {"aot": outcome, "dtype": str(compiled.dtype).replace("torch.", ""),
                        "error": float((compiled.float() - eager.float()).abs().max())}
    print(json.dumps(report))


def child_warm(started: float) -> None:
    import torch
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = transformer_block().eval()
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        compiled = torch.compile(model)(x)
        ready = time.clock_gettime(CLOCK)
        error = float((compiled - model(x)).abs().max())
    aot = counters["aot_autograd"]
    print(json.dumps({"seconds": ready - started, "error": error,
                      "hit": aot["autograd_cache_hit"], "miss": aot["autograd_cache_miss"],
                      "bypass": aot["autograd_cache_bypass"], "torch": torch.__version__}))


def spawn(python: str, part: str, cache: Path) -> dict[str, Any]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    started = time.clock_gettime(CLOCK)
    result = subprocess.run([python, __file__, "--child", part, "--started", repr(started)],
                            env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"{python} --child {part} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", action="append", default=[], metavar="LABEL=PY")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "autocast.md")
    parser.add_argument("--child", choices=["stale", "warm"])
    parser.add_argument("--started", type=float)
    args = parser.parse_args()
    if args.child == "stale":
        child_stale()
        return 0
    if args.child == "warm":
        child_warm(args.started)
        return 0
    builds = dict(item.split("=", 1) for item in args.build)
    if not builds:
        parser.error("name at least one --build LABEL=PY")
    lines = ["Second compile, float16 after bfloat16 on one cache (CPU):", "",
             "| build | region in the function: AOT cache | dtype | max abs error "
             "| region at the call site: AOT cache | dtype | max abs error |",
             "|---|---|---|---:|---|---|---:|"]
    order = list(builds)  # also names each build's cache directory (labels have spaces)
    with tempfile.TemporaryDirectory(prefix="pregrad-autocast-bench-") as tmp:
        for label, python in builds.items():
            print(f"stale hits: {label} ...", file=sys.stderr, flush=True)
            found = spawn(python, "stale", Path(tmp) / f"stale-{order.index(label)}")
            cells = [f"{found[f]['aot']} | {found[f]['dtype']} | {found[f]['error']:.3g}"
                     for f in ("region", "call_site")]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in order}
        for label, python in builds.items():
            print(f"warm start: filling the cache of {label} ...", file=sys.stderr, flush=True)
            spawn(python, "warm", Path(tmp) / f"warm-{order.index(label)}")
        for repeat in range(args.repeats):
            print(f"warm start: repeat {repeat + 1} of {args.repeats}", file=sys.stderr,
                  flush=True)
            for label in order[repeat % len(order):] + order[:repeat % len(order)]:
                runs[label].append(spawn(builds[label], "warm",
                                         Path(tmp) / f"warm-{order.index(label)}"))
    first = statistics.median(r["seconds"] for r in runs[order[0]])
    lines += ["", f"Whole-process warm start, rotary-style transformer block, {args.repeats} "
              "runs each, median [min–max]:", "",
              f"| build | s to first result | ÷ {order[0]} | AOT cache per warm process "
              "(hit/miss/bypass) | max abs error vs eager |",
              "|---|---|---:|---|---:|"]
    for label in order:
        seconds = [r["seconds"] for r in runs[label]]
        last = runs[label][-1]
        lines.append(f"| {label} | {statistics.median(seconds):.2f} [{min(seconds):.2f}–"
                     f"{max(seconds):.2f}] | {statistics.median(seconds) / first:.2f} | "
                     f"{last['hit']}/{last['miss']}/{last['bypass']} | "
                     f"{max(r['error'] for r in runs[label]):.2g} |")
    lines += ["", f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
              f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("# Autocast and the AOTAutogradCache\n\n"
                        "`bench/autocast.py` " + " ".join(f"--build {label}=…"
                                                          for label in order)
                        + f" --repeats {args.repeats}\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
