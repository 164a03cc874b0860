"""Issue 24's budgets: a 3-class Fashion-MNIST run (the 18,000 training images of classes 6, 7, 9)
with EfficientNet-Lite0 and class attributes, cold <= 15 min and warm <= 5 s on 2 CPU cores.

    python benchmarks/pretrained_budget.py                       # 224 px (the network's own side)
    python benchmarks/pretrained_budget.py --image-size 112      # encoder.image_size=112: ~4x faster
    python benchmarks/pretrained_budget.py --skip-run            # embedding throughput only

Measures, each in a fresh interpreter where a user would have one:

* **embedding throughput** (images/s wall and images per CPU-second, median of ``--repeats``
  interleaved passes over ``--images`` Fashion-MNIST images after a warm-up pass) of the encoder
  as the pipeline runs it (the network's trunk with BatchNorms folded, channels-last:
  :func:`pipeline.encoders.efficientnet_lite.feature_trunk`) beside the previous path (the whole
  eager network read by a forward hook, what this issue's first round ran), per input side;
* the **cold run**: ``python -m pipeline dataset=fashion_mnist dataset.classes=[6,7,9]
  encoder=efficientnet_lite0 clustering=gmm concepts=fashion_attributes
  explainer=[concept_mmdt,concept_cart]`` on an empty cache: wall, CPU (user + system) and peak
  resident memory of that process (``os.wait4``);
* the **warm run**: the same command again ``--repeats`` times (every stage cached), wall / CPU /
  peak memory, and the slowest top-level imports of a warm run (``-X importtime``).

The load average is recorded beside every number (the machine is shared); CPU seconds are the
load-independent figure. Results: ``benchmarks/results/pretrained_budget[_<side>px].json``,
rewritten after every measurement so a cut-off run leaves what it measured.
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

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
from warm_run import slowest_imports  # noqa: E402

RUN = ["dataset=fashion_mnist", "dataset.split=train", "dataset.classes=[6,7,9]", "encoder=efficientnet_lite0",
       "clustering=gmm", "concepts=fashion_attributes", "explainer=[concept_mmdt,concept_cart]"]

THROUGHPUT = r"""
import json, statistics, sys, time
import torch
from pipeline.app.data.fashion_mnist import default_root, read_split
from pipeline.app.models.efficientnet import build_efficientnet_lite
from pipeline.encoders.torch_module import TorchModuleEncoder
size, n, batch, repeats, threads = (int(a) for a in sys.argv[1:6])
torch.set_num_threads(threads)
X = read_split(default_root({}, {"data_dir": "data"}), "test")[0][:n, :, :, None]
enc = build_efficientnet_lite("lite0", image_size=size, batch_size=batch, progress=False)
paths = {f"trunk (folded BN, channels-last), batch {batch}": enc,
         "eager network + hook, batch 64 (before)": TorchModuleEncoder(enc.module, layer=enc.layer,
                                                                       transform=enc.transform_, batch_size=64,
                                                                       progress=False)}
times = {k: [] for k in paths}
for name, e in paths.items():
    e.transform(X[:64])  # warm-up (oneDNN primitive cache)
for _ in range(repeats):
    for name, e in paths.items():
        c, w = time.process_time(), time.perf_counter()
        e.transform(X)
        times[name].append((time.perf_counter() - w, time.process_time() - c))
print(json.dumps({name: {"images_per_s": n / statistics.median(w for w, _ in t),
                         "images_per_cpu_s": n / statistics.median(c for _, c in t),
                         "wall_s": [w for w, _ in t], "cpu_s": [c for _, c in t]} for name, t in times.items()}))
"""


def child(cmd: list[str], env: dict) -> tuple[dict, subprocess.CompletedProcess]:
    """Wall, CPU (user + system) and peak RSS of one child process, with the load average."""
    load = os.getloadavg()
    t = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024,
            "load_avg_before": [round(v, 2) for v in load],
            "load_avg_after": [round(v, 2) for v in os.getloadavg()]}, done


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image-size", type=int, default=None, help="encoder.image_size (default: 224, lite0's own)")
    p.add_argument("--threads", type=int, default=1, help="the run's threads= (torch's intra-op threads)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--images", type=int, default=256, help="images per throughput pass")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--throughput-sizes", type=int, nargs="*", default=[224, 112])
    p.add_argument("--skip-run", action="store_true", help="throughput only, no cold / warm run")
    p.add_argument("--work", type=Path, default=None, help="cache and outputs (default: a temporary folder)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides of the run (after --)")
    args = p.parse_args(argv)
    side = args.image_size or 224
    out = args.out or HERE.parent / "results" / f"pretrained_budget{'' if side == 224 else f'_{side}px'}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "OMP_WAIT_POLICY": "PASSIVE", "PIPELINE_THREADS": str(args.threads)}
    res: dict = {"machine": f"{os.cpu_count()} cpus", "threads": args.threads, "image_size": side,
                 "command": None, "throughput": {}}
    if out.exists():  # each invocation rewrites only the parts it measures
        previous = json.loads(out.read_text())
        keep = (["throughput"] if not args.throughput_sizes else []) + (["command", "cold", "warm"] if args.skip_run
                                                                       else [])
        res.update({k: previous[k] for k in keep if k in previous})

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(res, indent=1))
        tmp.replace(out)

    for size in args.throughput_sizes:
        m, done = child([sys.executable, "-c", THROUGHPUT, str(size), str(args.images), str(args.batch_size),
                         str(args.repeats), str(args.threads)], env)
        res["throughput"][f"{size}px"] = {**json.loads(done.stdout.strip().splitlines()[-1]), "images": args.images,
                                          "batch_size": args.batch_size, "threads": args.threads,
                                          "load_avg_before": m["load_avg_before"],
                                          "load_avg_after": m["load_avg_after"]}
        for name, r in res["throughput"][f"{size}px"].items():
            if isinstance(r, dict) and "images_per_s" in r:
                print(f"{size} px  {name:<42} {r['images_per_s']:6.1f} images/s  {r['images_per_cpu_s']:6.1f} "
                      f"images/CPU-s  (load {m['load_avg_before'][0]:.1f})", flush=True)
        save()
    if args.skip_run:
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        size = [f"encoder.image_size={args.image_size}"] if args.image_size else []
        cmd = [sys.executable, "-m", "pipeline", *RUN, *size, f"threads={args.threads}",
               f"paths.cache_dir={work / 'cache'}", f"paths.models_dir={work / 'models'}", *args.overrides]
        res["command"] = " ".join(["python", *cmd[1:]])
        m, _ = child(cmd + [f"hydra.run.dir={work / 'cold'}"], env)
        res["cold"] = m
        print(f"cold run: wall {m['wall_s']:.1f} s  cpu {m['cpu_s']:.1f} s  peak RSS {m['peak_rss_mib']:.0f} MiB  "
              f"(load {m['load_avg_before'][0]:.1f} -> {m['load_avg_after'][0]:.1f})", flush=True)
        save()
        warm = []
        for i in range(args.repeats):
            m, done = child(cmd + [f"hydra.run.dir={work / f'warm{i}'}"], env)
            m["recomputed"] = [ln for ln in done.stderr.splitlines() if "computed:" in ln][:3]
            warm.append(m)
            print(f"warm run: wall {m['wall_s']:.2f} s  cpu {m['cpu_s']:.2f} s  peak RSS {m['peak_rss_mib']:.0f} MiB "
                  f"(load {m['load_avg_before'][0]:.1f})", flush=True)
        res["warm"] = {"runs": warm, "median_wall_s": statistics.median(r["wall_s"] for r in warm),
                       "median_cpu_s": statistics.median(r["cpu_s"] for r in warm)}
        save()
        res["warm"]["slowest_imports_s"] = slowest_imports(cmd + [f"hydra.run.dir={work / 'imports'}"], env)
        print("slowest top-level imports of a warm run: "
              + ", ".join(f"{mod} {s:.2f} s" for mod, s in res["warm"]["slowest_imports_s"]), flush=True)
    save()
    print(f"results in {out}")


if __name__ == "__main__":
    main()
