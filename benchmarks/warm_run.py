"""A fully cached default run, end to end, and the import cost of the package (issue 17, item 5).

Each measurement is a fresh interpreter (``python -m pipeline`` as a user types it), so
interpreter start-up, imports, Hydra composition, cache look-ups and the report are all
counted. One untimed run first fills the cache (and trains the encoder if needed); then
``--repeats`` warm runs, each into its own output directory, report wall and CPU time
(user + system of the child). The checkpoint is never re-hashed on a warm run: the train
stage reads the sha256 its sidecar recorded (``pipeline.app.stages.encode``).

    python benchmarks/warm_run.py                      # default run, cache in a temporary dir
    python benchmarks/warm_run.py --cache-dir .cache/pipeline --repeats 5
    python benchmarks/warm_run.py -- report.figures=false   # extra Hydra overrides

Also times ``import pipeline`` and ``import pipeline.app.running.runner`` (fresh interpreters,
medians) and lists the slowest imports of the warm run (``-X importtime``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
OUT = HERE.parent / "results" / "warm_run.json"


def child_run(cmd: list[str], env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, CPU s of the child, completed process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return wall, cpu, proc


def import_time(module: str, repeats: int, env: dict) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeats):
        w, c, _ = child_run([sys.executable, "-c", f"import {module}"], env)
        walls.append(w)
        cpus.append(c)
    return statistics.median(walls), statistics.median(cpus)


def slowest_imports(cmd: list[str], env: dict, top: int = 8) -> list[tuple[str, float]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], env=env, capture_output=True, text=True,
                          cwd=ROOT)
    rows = []
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m and len(m.group(3)) <= 3:  # top-level packages only
            rows.append((m.group(4), int(m.group(2)) / 1e6))
    return sorted(rows, key=lambda r: -r[1])[:top]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cache-dir", type=Path, default=None, help="default: a temporary directory")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("overrides", nargs="*", help="Hydra overrides (after --)")
    args = p.parse_args(argv)
    env = dict(os.environ)
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    res: dict = {"load_start": os.getloadavg()}
    for module in ("pipeline", "pipeline.trees", "pipeline.app.running.runner"):
        w, c = import_time(module, max(3, args.repeats), env)
        res[f"import {module}"] = {"wall_s": w, "cpu_s": c}
        print(f"import {module:<22} wall {w:6.2f} s  cpu {c:6.2f} s (median, fresh interpreter)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache_dir or Path(tmp) / "cache"
        cmd = [sys.executable, "-m", "pipeline", f"paths.cache_dir={cache}", *args.overrides]
        w, c, _ = child_run(cmd + [f"hydra.run.dir={tmp}/cold"], env)
        print(f"first run (fills the cache): wall {w:.2f} s  cpu {c:.2f} s", flush=True)
        walls, cpus = [], []
        for i in range(args.repeats):
            w, c, proc = child_run(cmd + [f"hydra.run.dir={tmp}/warm{i}"], env)
            if "computed:" in proc.stderr:
                print("warning: the warm run recomputed a stage:",
                      [ln for ln in proc.stderr.splitlines() if "computed:" in ln][:3])
            walls.append(w)
            cpus.append(c)
        res["warm_run"] = {"wall_s": walls, "cpu_s": cpus, "median_wall_s": statistics.median(walls),
                           "median_cpu_s": statistics.median(cpus), "command": " ".join(cmd)}
        print(f"warm run (every stage cached): median wall {statistics.median(walls):.2f} s  cpu "
              f"{statistics.median(cpus):.2f} s   runs {[round(x, 2) for x in walls]}", flush=True)
        slow = slowest_imports(cmd + [f"hydra.run.dir={tmp}/imports"], env)
        res["slowest_imports_s"] = slow
        print("slowest top-level imports of a warm run: " + ", ".join(f"{m} {s:.2f} s" for m, s in slow))
    res["load_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
