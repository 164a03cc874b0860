"""Embedding store benchmark (issue 35, item 3): Fashion-MNIST through EfficientNet-Lite0 in a chunked run.

``--fashion``: the command ``python -m pipeline dataset=fashion_mnist dataset.split=all
dataset.chunk_rows=500 encoder=efficientnet_lite0 clustering=kmeans explainer=[mmdt]`` with a fresh
cache, SIGKILLed when the embedding store holds about half the images; the same command again
(it must embed only the rest); then the three classes 5, 7, 9 (it must embed nothing). Each run's
wall time, peak RSS (``ru_maxrss`` of the process, from ``os.wait4``, also for the killed one),
the store's counts from its log line and the encode throughput (images embedded / seconds between
the store's log line and the "embedded" line) go to ``benchmarks/results/embedding_store.json``
with the commands and the load average before and after each run. Runs at ``nice 10``.

    python benchmarks/embedding_store.py --fashion [--threads 2] [--split all|train|test] [--image-size S]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "embedding_store.json"
STORED = re.compile(r"^\[([\d\- :,]+)\].*embedding store (\S+): (\d+) of (\d+) items stored; embedding (\d+) in "
                    r"(\d+) chunks", re.M)
EMBEDDED = re.compile(r"^\[([\d\- :,]+)\].*embedded (\d+) items", re.M)


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _records(cache: Path) -> int:
    """Items in finished shards of the (only) store under ``cache``."""
    total = 0
    for rec in cache.glob("embeddings/*/shards/*.json"):
        try:
            total += json.loads(rec.read_text())["rows"]
        except (OSError, ValueError, KeyError):
            pass
    return total


def run_pipeline(args: list[str], run_dir: Path, kill_at_items: int | None = None, cache: Path | None = None) -> dict:
    """``nice -n 10 python -m pipeline <args>``; with ``kill_at_items`` SIGKILLed once the store holds that many."""
    cmd = ["nice", "-n", "10", sys.executable, "-m", "pipeline", *args, f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    load_before = os.getloadavg()
    start = time.time()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    console = open(run_dir.parent / f"{run_dir.name}.console.txt", "w+")  # a file, never a pipe that fills up
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=console, stderr=subprocess.STDOUT, text=True)
    killed = None
    if kill_at_items is not None:
        while proc.poll() is None:
            if _records(cache) >= kill_at_items:
                os.kill(proc.pid, signal.SIGKILL)
                killed = {"at_s": round(time.time() - start, 1), "items_in_store": _records(cache)}
                break
            time.sleep(0.5)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    console.seek(0)
    out = console.read()
    console.close()
    wall = time.time() - start
    log = (run_dir / "__main__.log").read_text() if (run_dir / "__main__.log").exists() else ""
    res = {"command": "python -m pipeline " + " ".join(args), "returncode": proc.returncode, "wall_s": round(wall, 1),
           "peak_rss_gb": round(usage.ru_maxrss / 1e6, 3), "load_average_before": [round(x, 2) for x in load_before],
           "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    if killed:
        res["killed"] = killed
    m = STORED.search(log)
    if m:
        res.update(store=m.group(2), items=int(m.group(4)), stored_before=int(m.group(3)), to_embed=int(m.group(5)),
                   chunks=int(m.group(6)), store_line=m.group(0).split("] - ", 1)[-1])
        e = EMBEDDED.search(log)
        t0 = _stamp(m.group(1))
        t1 = _stamp(e.group(1)) if e else (start + killed["at_s"] if killed else None)
        done = int(e.group(2)) if e else (killed["items_in_store"] - res["stored_before"] if killed else 0)
        if t1 and done:
            res["encode_s"] = round(t1 - t0, 1)
            res["images_per_s"] = round(done / (t1 - t0), 2)
    if proc.returncode not in (0, -signal.SIGKILL):
        res["output_tail"] = out[-3000:]
    print(json.dumps(res, indent=1), flush=True)
    return res


def fashion(ns) -> dict:
    work = Path(ns.work)
    shutil.rmtree(work, ignore_errors=True)
    cache = work / "cache"
    base = ["dataset=fashion_mnist", f"dataset.split={ns.split}", "dataset.chunk_rows=500", "encoder=efficientnet_lite0",
            "clustering=kmeans", "explainer=[mmdt]", "report.figures=false"]
    extra = [f"threads={ns.threads}", f"paths.cache_dir={cache}"]
    if ns.image_size:
        base.append(f"encoder.image_size={ns.image_size}")
    total = {"all": 70000, "train": 60000, "test": 10000}[ns.split]
    out = {"machine": "2 CPU cores (shared), 24 GB; runs at nice 10", "threads": ns.threads,
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    out["killed_at_half"] = run_pipeline(base + extra, work / "run1", kill_at_items=total // 2, cache=cache)
    out["rerun"] = run_pipeline(base + extra, work / "run2")
    out["three_classes"] = run_pipeline(base + ["dataset.classes=[5,7,9]"] + extra, work / "run3")
    out["store_bytes"] = sum(p.stat().st_size for p in cache.glob("embeddings/**/*") if p.is_file())
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fashion", action="store_true", help="Fashion-MNIST through EfficientNet-Lite0 (kill, rerun, subset)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--split", default="all", choices=["all", "train", "test"])
    ap.add_argument("--image-size", type=int, default=None, help="encoder.image_size (default: the network's 224)")
    ap.add_argument("--work", default="/tmp/embedding_store_bench")
    ap.add_argument("--out", default=str(RESULTS))
    ns = ap.parse_args(argv)
    if not ns.fashion:
        ap.error("choose a section: --fashion")
    res = {"fashion": fashion(ns)}
    path = Path(ns.out)
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update(res)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(old, indent=1) + "\n")
    print(f"written {path}")


if __name__ == "__main__":
    main()
