"""Issue 37's checks: a finished run applied to new data (docs/explain.md, "Measured").

    python benchmarks/explain_checks.py self <run-dir> <the run's overrides...>   # own training inputs: identical?
    python benchmarks/explain_checks.py digits <mnist-run-dir> [--mnist-style]    # sklearn's 1,797 digits at 28 x 28
    python benchmarks/explain_checks.py unseen-emails <spam-run-dir> <the run's overrides...> [--rows N]
    python benchmarks/explain_checks.py copy <run-dir>                            # saved, copied, loaded elsewhere
    python benchmarks/explain_checks.py throughput <run-dir> <the run's overrides...> [--rows N]
    python benchmarks/explain_checks.py latents <run-dir> --npz <file with Z, y>  # latents from the encode stage

Each prints its numbers and the load average. The run's overrides (e.g. ``dataset=iris``, plus
``paths.cache_dir=...``) recompose its config so that its stages are read back from the cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def stages(overrides: list[str]):
    from pipeline.app.stores.cache import StageCache
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run_stages, to_plain

    cfg = to_plain(compose_config([*overrides, f"paths.output_dir={tempfile.mkdtemp()}"]))
    return run_stages(cfg, StageCache(Path(cfg["paths"]["cache_dir"])))[:2]


def load_avg() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def check_self(run_dir: str, overrides: list[str], latents: bool = False) -> None:
    from pipeline import ConceptExplainer

    done, fits = stages(overrides)
    ex = ConceptExplainer.load(run_dir, models_dir=_models(overrides))
    load = done["load"].artifact
    t = time.perf_counter()
    df = ex.explain(done["encode"].artifact.Z, latents=True) if latents else ex.explain(load.inputs)
    seconds = time.perf_counter() - t
    ref = done["cluster"].artifact.labels
    what = "the run's cached latents" if latents else "raw inputs"
    print(f"{len(df)} training inputs re-explained from {what} in {seconds:.1f} s ({load_avg()})")
    print(f"  reference: {int((df['reference'].to_numpy() == ref).sum())}/{len(df)} identical")
    for row, fit in fits.items():
        print(f"  {row}: {int((df[f'{row}.cluster'].to_numpy() == fit.predictions).sum())}/{len(df)} identical")


def _models(overrides: list[str]) -> str | None:
    found = [o.split("=", 1)[1] for o in overrides if o.startswith("paths.models_dir=")]
    return found[-1] if found else None


def _report(ex, df, y=None) -> None:
    from pipeline.app.explain_run import generalisation

    table = generalisation(ex, df, y)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep=""))
    print(f"  out of the training range: {int(df['out_of_range'].sum())}/{len(df)}")


def check_digits(run_dir: str, models_dir: str | None, mnist_style: bool = False) -> None:
    from PIL import Image
    from sklearn.datasets import load_digits

    from pipeline import ConceptExplainer

    d = load_digits()
    small = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)
    if mnist_style:  # as MNIST was made: the digit in a 20 x 20 box, centred in 28 x 28 (4 px margin)
        images = np.zeros((len(small), 28, 28), dtype=np.uint8)
        images[:, 4:24, 4:24] = np.stack([np.asarray(Image.fromarray(im).resize((20, 20), Image.BILINEAR))
                                          for im in small])
        images = images[..., None]
    else:
        images = np.stack([np.asarray(Image.fromarray(im).resize((28, 28), Image.BILINEAR)) for im in small])[..., None]
    ex = ConceptExplainer.load(run_dir, models_dir=models_dir)
    t = time.perf_counter()
    df = ex.explain(images)
    how = "20x20 centred in 28x28, MNIST style" if mnist_style else "28x28"
    print(f"sklearn digits: {len(df)} images 8x8 -> {how} (bilinear), explained in {time.perf_counter() - t:.1f} s "
          f"({load_avg()})")
    _report(ex, df, d.target)


def check_unseen_emails(run_dir: str, overrides: list[str], rows: int | None) -> None:
    from pipeline import ConceptExplainer
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.explain_run import load_data
    from pipeline.app.running.runner import to_plain

    done, _ = stages(overrides)
    seen = set((done["load"].artifact.meta or {}).get("ids") or [])
    full_overrides = [o for o in overrides if not o.startswith("dataset.n_samples=")]
    full = load_data(to_plain(compose_config([*full_overrides, f"paths.output_dir={tempfile.mkdtemp()}"])))
    ids = list((full.meta or {}).get("ids") or [])
    unseen = [i for i, k in enumerate(ids) if k not in seen]
    if rows is not None and rows < len(unseen):
        unseen = sorted(np.random.default_rng(0).choice(unseen, size=rows, replace=False).tolist())
    texts = [full.texts[i] for i in unseen]
    y = np.asarray(full.y)[unseen]
    ex = ConceptExplainer.load(run_dir)
    t = time.perf_counter()
    df = ex.explain(texts)
    print(f"e-mails the run did not see: {len(texts)} of {len(ids) - len(seen)} (the run saw {len(seen)}), explained "
          f"in {time.perf_counter() - t:.1f} s ({load_avg()})")
    _report(ex, df, y)


def check_latents(run_dir: str, npz: str) -> None:
    """Latents computed apart by the run's own encode stage (an ``.npz`` with ``Z`` and ``y``)."""
    from pipeline import ConceptExplainer

    with np.load(npz, allow_pickle=False) as data:
        Z, y = data["Z"], data["y"] if "y" in data.files else None
    ex = ConceptExplainer.load(run_dir)
    t = time.perf_counter()
    df = ex.explain(Z, latents=True)
    print(f"{len(df)} latents from {npz} explained in {time.perf_counter() - t:.1f} s ({load_avg()})")
    _report(ex, df, y)
    for row in ex.tree_names_:
        print(f"  {row}: rule as printed holds for {int((df[f'{row}.rule_holds'] == True).sum())}/{len(df)}"  # noqa: E712
              f"; median margin {float(np.median(df[f'{row}.margin'])):.3g} sd")


def check_copy(run_dir: str, copy_weights: bool = False, overrides: list[str] = ()) -> None:
    from pipeline import ConceptExplainer

    ex = ConceptExplainer.load(run_dir, models_dir=_models(list(overrides)))
    tmp = Path(tempfile.mkdtemp())
    saved = ex.save(tmp / "saved", copy_weights=copy_weights)
    moved = tmp / "another" / "folder"
    shutil.copytree(saved, moved)
    width = int(ex.bundle_.doc["encoder"]["width"])
    Z = np.random.default_rng(0).normal(size=(500, width)).astype(np.float32)  # latents: no encoder needed
    np.save(tmp / "Z.npy", Z)
    here = {t: ex.predict(Z, tree=t, latents=True).tolist() for t in ex.tree_names_}
    here["reference"] = ex.predict(Z, latents=True).tolist()
    code = ("import json, numpy as np; from pipeline import ConceptExplainer; "
            f"ex = ConceptExplainer.load({str(moved)!r}); Z = np.load({str(tmp / 'Z.npy')!r}); "
            "out = {t: ex.predict(Z, tree=t, latents=True).tolist() for t in ex.tree_names_}; "
            "out['reference'] = ex.predict(Z, latents=True).tolist(); print(json.dumps(out))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    import json

    there = json.loads(proc.stdout) if proc.returncode == 0 else {}
    print(f"saved to {saved}, copied to {moved}, loaded in a fresh process (rc={proc.returncode}){proc.stderr[-300:]}")
    for name, labels in here.items():
        same = sum(a == b for a, b in zip(labels, there.get(name, [])))
        print(f"  {name}: {same}/{len(labels)} of 500 random latents assigned alike in both processes")
    if copy_weights:  # raw inputs in the fresh process, through the checkpoint copied into the bundle
        done, _ = stages(list(overrides))
        inputs = np.asarray(done["load"].artifact.inputs[:200])
        np.save(tmp / "inputs.npy", inputs)
        mine = ex.explain(inputs)
        code = ("import json, numpy as np; from pipeline import ConceptExplainer; "
                f"ex = ConceptExplainer.load({str(moved)!r}); df = ex.explain(np.load({str(tmp / 'inputs.npy')!r})); "
                "print(df.drop(columns=[c for c in df.columns if c.endswith('rule_holds')]).to_json())")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        import pandas as pd

        theirs = pd.read_json(__import__("io").StringIO(proc.stdout)) if proc.returncode == 0 else None
        same = theirs is not None and all((mine[c].to_numpy() == theirs[c].to_numpy()).all()
                                          for c in mine.columns if c.endswith((".cluster", ".leaf")) or c == "reference")
        print(f"  copy_weights=True: 200 raw inputs explained in a fresh process from the copied bundle "
              f"(checkpoint {ex.bundle_.doc['encoder']['checkpoint']} not used: weights/ inside); clusters and "
              f"leaves identical: {same} (rc={proc.returncode}{proc.stderr[-300:]})")
    files = [p for p in moved.rglob("*") if p.is_file()]
    print(f"  files: {sorted(p.relative_to(moved).as_posix() for p in files)}; "
          f"{sum(p.stat().st_size for p in files) / 1024:.1f} KiB")


def check_throughput(run_dir: str, overrides: list[str], rows: int, raw_rows: int = 2000) -> None:
    from pipeline import ConceptExplainer

    done, _ = stages(overrides)
    ex = ConceptExplainer.load(run_dir, models_dir=_models(overrides))
    Z = np.asarray(done["encode"].artifact.Z)
    big = Z[np.random.default_rng(0).integers(0, len(Z), size=rows)]
    ex.explain(big[:100], latents=True)  # warm-up
    t = time.perf_counter()
    ex.explain(big, latents=True)
    s = time.perf_counter() - t
    print(f"embeddings: {rows} rows in {s:.2f} s = {rows / s:,.0f} rows/s (explain, latents=True; {load_avg()})")
    inputs = done["load"].artifact.inputs
    n = min(len(inputs), raw_rows)
    if n == 0:
        return
    part = inputs[:n]
    ex.explain(part[:16])  # the encoder loaded
    t = time.perf_counter()
    ex.explain(part)
    s = time.perf_counter() - t
    print(f"raw inputs ({done['load'].artifact.kind}, encoder {ex.bundle_.doc['encoder']['name']}): {n} in {s:.2f} s = "
          f"{n / s:,.1f} rows/s ({load_avg()})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=["self", "digits", "unseen-emails", "copy", "throughput", "latents"])
    parser.add_argument("--npz", default=None, help="latents: an .npz with Z (and y)")
    parser.add_argument("run_dir")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--latents", action="store_true", help="self: from the run's cached latents")
    parser.add_argument("--copy-weights", action="store_true", help="copy: save the encoder checkpoint too")
    parser.add_argument("--mnist-style", action="store_true", help="digits: 20 x 20 centred in 28 x 28")
    parser.add_argument("--raw-rows", type=int, default=2000, help="throughput: raw inputs timed (0: none)")
    args, args.overrides = parser.parse_known_args(argv)  # the rest: the run's overrides
    if args.check == "self":
        check_self(args.run_dir, args.overrides, args.latents)
    elif args.check == "digits":
        check_digits(args.run_dir, _models(args.overrides), args.mnist_style)
    elif args.check == "unseen-emails":
        check_unseen_emails(args.run_dir, args.overrides, args.rows)
    elif args.check == "latents":
        check_latents(args.run_dir, args.npz)
    elif args.check == "copy":
        check_copy(args.run_dir, args.copy_weights, args.overrides)
    else:
        check_throughput(args.run_dir, args.overrides, args.rows or 100_000, args.raw_rows)


if __name__ == "__main__":
    main()
