"""Does the default run give the same numbers on another CPU code path? (issue 36, item 2)

    .venv/bin/python benchmarks/code_paths.py [--configs native aten_avx2 ...] [--out NAME]
        [--quick] [extra Hydra overrides]

Runs ``python -m pipeline`` (the default run: VaDE on the 5,000 MNIST digits -> GMM -> concepts
-> trees, seed 0, one thread) once per configuration, each in its own process with one
environment variable forcing a CPU code path, in fresh ``paths.models_dir`` and
``paths.cache_dir`` directories so that VaDE is trained every time (about 3.5 min of a core
each). A machine of another vendor or generation takes another code path by itself (MKL
runs its AVX2 kernels on AMD processors, AVX-512 ones on Intel; ATen and oneDNN pick the widest
vector unit; numba compiles for the host CPU); forcing the path emulates that machine here.

Reports per configuration the base ARI, the trees' ARIs, a digest of VaDE's latents and of the
reference labels, and ``status.json``'s ``numerics.cpu_code_path`` (what the run pinned).
``--quick`` trains VaDE for 2 + 2 epochs (a probe of which variables change the bits).

Results are printed and saved to benchmarks/results/<out>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent

#: name -> the environment one run starts with (on top of the caller's)
CONFIGS = {
    "native": {},
    "aten_default": {"ATEN_CPU_CAPABILITY": "default"},
    "aten_avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten_avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "mkl_avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "mkl_avx512": {"MKL_ENABLE_INSTRUCTIONS": "AVX512"},
    "mkl_sse42": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "mkl_cbwr_avx2": {"MKL_CBWR": "AVX2"},
    "mkl_cbwr_compatible": {"MKL_CBWR": "COMPATIBLE"},
    "mkl_cbwr_compatible_avx2": {"MKL_CBWR": "COMPATIBLE", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "onednn_avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "no_mkldnn": {"TORCH_MKLDNN_ENABLED": "0"},
    "openblas_haswell": {"OPENBLAS_CORETYPE": "Haswell"},
    "numba_generic": {"NUMBA_CPU_NAME": "generic"},
    # a machine whose every library takes its AVX2 path (an AVX2-only CPU; MKL on AMD)
    "all_avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "all_default": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                    "ONEDNN_MAX_CPU_ISA": "SSE41"},
    # the pin switched off: each library's widest path on this machine
    "native_path": {"PIPELINE_CPU_CODE_PATH": "native"},
}

QUICK = ["encoder.params.pretrain_epochs=2", "encoder.params.epochs=2", "encoder.params.prior_n_init=2"]


def digest(cache: Path, stage: str, key: str) -> str:
    """sha256 (12 hex digits) of array ``key`` of the stage's cached artifact."""
    import numpy as np

    files = sorted((cache / stage).glob("*/arrays.npz"))
    if not files:
        return ""
    with np.load(files[0]) as z:
        return hashlib.sha256(np.ascontiguousarray(z[key]).tobytes()).hexdigest()[:12]


def one_run(name: str, env_extra: dict, overrides: list[str], work: Path) -> dict:
    out = work / name
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **env_extra}
    cmd = [sys.executable, "-m", "pipeline", f"paths.models_dir={out}/models", f"paths.cache_dir={out}/cache",
           f"hydra.run.dir={out}/run", "report.figures=false", "report.html=false", *overrides]
    cpu0, wall0 = os.times(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    cpu1 = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    run_dir = out / "run"
    df = pd.read_csv(run_dir / "results.csv").set_index("explainer")
    status = json.loads((run_dir / "status.json").read_text())
    row = {"config": name, "env": env_extra,
           "base_ari": float(df.loc["reference", "ari"]),
           "trees_ari": {r: float(df.loc[r, "ari"]) for r in df.index if r != "reference"},
           "latents": digest(out / "cache", "encode", "Z"),
           "reference": digest(out / "cache", "cluster", "labels"),
           "cpu_code_path": (status.get("numerics") or {}).get("cpu_code_path"),
           "child_cpu_s": round(cpu1.children_user + cpu1.children_system - cpu0.children_user - cpu0.children_system, 1),
           "wall_s": round(time.perf_counter() - wall0, 1), "load": os.getloadavg()[0]}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=["native", "aten_avx2", "aten_default", "mkl_avx2"],
                    choices=sorted(CONFIGS))
    ap.add_argument("--quick", action="store_true", help="VaDE for 2 + 2 epochs (a probe)")
    ap.add_argument("--out", default="code_paths")
    ap.add_argument("--work", default=None, help="work directory (default: a new temporary one)")
    args, overrides = ap.parse_known_args()
    overrides = (QUICK if args.quick else []) + overrides
    work = Path(args.work or tempfile.mkdtemp(prefix="code_paths_"))
    rows = []
    for name in args.configs:
        row = one_run(name, CONFIGS[name], overrides, work)
        print(json.dumps(row), flush=True)
        rows.append(row)
    table = pd.DataFrame([{k: v for k, v in r.items() if k not in ("env", "trees_ari")} |
                          {f"{k} ARI": v for k, v in r["trees_ari"].items()} for r in rows])
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.out}.json"
    path.write_text(json.dumps({"command": " ".join(sys.argv), "overrides": overrides, "cpu": cpu_name(),
                                "rows": rows}, indent=1))
    print(f"written to {path}")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


if __name__ == "__main__":
    main()
