"""Real networks with freezing: max abs error against eager, builds side by side.

Usage: python3 bench/real_models.py LABEL=PY [LABEL=PY ...] [--models a,b] [--out FILE]
       (each PY is run as a child: PY bench/real_models.py --child MODELS)

For each build and each torchvision model (random weights, trained-like
BatchNorms: test/dynamo/real_models.py), compiles once for CPU inference under
torch.no_grad with freezing through `compile_fx(torch.fx.symbolic_trace(m))`
and once through `torch.compile`, and prints a markdown table of the max abs
error against eager (and the largest output, for scale). It measures; it
asserts nothing (test/dynamo/test_real_models.py is the test).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_MODELS = "resnet18,resnet50,mobilenet_v3_small,efficientnet_b0,densenet121"


def child(models: list[str]) -> None:
    sys.path.insert(0, str(HERE.parent / "test" / "dynamo"))
    import torch

    from real_models import compile_with_freezing, make_real_model, max_abs_error

    rows: dict[str, Any] = {"torch": torch.__version__, "models": {}}
    for name in models:
        model, x = make_real_model(name)
        with torch.no_grad():
            expected = model(x)
        row: dict[str, float] = {"scale": float(expected.abs().max())}
        for entry in ("compile_fx", "torch_compile"):
            start = time.perf_counter()
            row[entry] = max_abs_error(compile_with_freezing(entry, model, x), expected)
            row[f"{entry}_seconds"] = time.perf_counter() - start
        rows["models"][name] = row
        print(f"  {torch.__version__} {name}: compile_fx {row['compile_fx']:.3g}, "
              f"torch.compile {row['torch_compile']:.3g}", file=sys.stderr, flush=True)
    print(json.dumps(rows))


def table(results: list[tuple[str, dict[str, Any]]], models: list[str]) -> str:
    lines = [
        "Max abs error against eager, CPU, torch.no_grad, freezing on; "
        "`compile_fx` on a symbolic_trace'd module / `torch.compile`. "
        "Largest output in brackets.",
        "",
        "| model | " + " | ".join(label for label, _ in results) + " |",
        "|---|" + "---:|" * len(results),
    ]
    for name in models:
        cells = []
        for _, data in results:
            row = data["models"][name]
            cells.append(f"{row['compile_fx']:.3g} / {row['torch_compile']:.2g}")
        scale = results[0][1]["models"][name]["scale"]
        lines.append(f"| {name} [{scale:.3g}] | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2].split(","))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("builds", nargs="+", metavar="LABEL=PY")
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    models = args.models.split(",")
    results = []
    for spec in args.builds:
        label, _, python = spec.partition("=")
        if not python:
            parser.error(f"{spec!r}: expected LABEL=PY")
        print(f"{label} ({python})", file=sys.stderr, flush=True)
        done = subprocess.run([python, __file__, "--child", ",".join(models)],
                              stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"real_models.py: {label} failed (exit {done.returncode})", file=sys.stderr)
            return 1
        results.append((label, json.loads(done.stdout.splitlines()[-1])))
    text = (f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
            + ", ".join(f"{label} = torch {data['torch']}" for label, data in results)
            + "\n\n" + table(results, models))
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
