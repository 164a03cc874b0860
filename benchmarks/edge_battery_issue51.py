"""Issue 51's cases of the edge battery (``benchmarks/edge_battery.py --section issue51``): the
saved explainer, inputs by name and their drift, settings before work starts, the explain
command's options, shard order. Runs against whichever ``pipeline`` is on the path (the code
before the change too: only public entry points are used), so the same cases give "before" and
"after" counts.

Each case expects one of ``refuse`` (a one-paragraph :class:`InvalidInputError`; for the command,
exit 1 with one ``error:`` paragraph and no traceback), ``warn`` (a warning logged, work done) or
``accept`` (valid input: it works and gives the right answer). The outcome is ``clear`` (refused
or warned as expected), ``handled`` (accepted and right), ``silent`` (accepted without a word
where it should have been refused or warned, or a wrong answer) or ``unclear`` (a raw exception,
a traceback, a false refusal). Each case's message is kept (first 300 characters).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


# ------------------------------------------------------------------ helpers
def _run(tmp: Path, *overrides: str) -> Path:
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    out = tmp / "run"
    run(compose_config([*overrides, f"paths.output_dir={out}", f"paths.cache_dir={tmp / 'cache'}",
                        f"paths.models_dir={tmp / 'models'}", "report.figures=false", "report.html=false",
                        "report.summary=false"]))
    return out


def resum(folder: Path) -> None:
    """SHA256SUMS recomputed over the folder's files, as someone covering an edit would."""
    files = sorted(p for p in folder.rglob("*") if (p.is_file() or p.is_symlink()) and p.name != "SHA256SUMS")
    (folder / "SHA256SUMS").write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  "
                                               f"{p.relative_to(folder).as_posix()}\n" for p in files))


def edit_json(folder: Path, fn) -> None:
    """``fn(doc)`` applied to explainer.json, SHA256SUMS recomputed."""
    doc = json.loads((folder / "explainer.json").read_text())
    fn(doc)
    (folder / "explainer.json").write_text(json.dumps(doc, indent=1))
    resum(folder)


def edit_arrays(folder: Path, fn) -> None:
    """``fn(arrays)`` applied to arrays.npz, SHA256SUMS recomputed."""
    with np.load(folder / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    fn(arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    (folder / "arrays.npz").write_bytes(buf.getvalue())
    resum(folder)


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _outcome(expect: str, fn) -> tuple[str, str]:
    """(clear | handled | silent | unclear, message) of calling ``fn`` (returns True when its answer is right)."""
    from pipeline.validation import InvalidInputError

    handler = _Warnings()
    logging.getLogger("pipeline").addHandler(handler)
    try:
        right = fn()
    except InvalidInputError as exc:
        text = str(exc)
        if expect == "refuse":
            return ("clear" if "\n" not in text else "unclear"), text[:300]
        return "unclear", f"refused: {text[:290]}"
    except Exception as exc:  # noqa: BLE001 - the battery records what happened
        return "unclear", f"{type(exc).__name__}: {str(exc)[:280]}"
    finally:
        logging.getLogger("pipeline").removeHandler(handler)
    said = [m for m in handler.messages if "package versions" not in m]
    if expect == "refuse":
        return "silent", "accepted" + (f" (warned: {said[0][:250]})" if said else "")
    if expect == "warn":
        return ("clear", said[0][:300]) if said else ("silent", "no warning")
    if right is False:
        return "silent", "accepted with a wrong answer"
    return ("handled", "ok") if not said else ("unclear", f"warned: {said[0][:290]}")


def _command(args: list[str], cwd: Path, expect: str = "refuse") -> tuple[str, str]:
    import pipeline

    env = {**os.environ, "PYTHONPATH": str(Path(pipeline.__file__).parents[1])}
    proc = subprocess.run([sys.executable, "-m", "pipeline.explain", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    err = proc.stderr.strip()
    if "Traceback" in err:
        return "unclear", err.splitlines()[-1][:300]
    if proc.returncode == 0:
        return ("silent", "accepted") if expect == "refuse" else ("handled", "ok")
    last = [ln for ln in err.splitlines() if ln.startswith("error:")]
    return ("clear" if expect == "refuse" and last else "unclear"), (last[0] if last else err[-300:])[:300]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ the cases
def bundle_cases(tmp: Path, iris: Path, other: Path, sub: Path) -> dict:
    """``other``: an iris k-means run (trees of the same width); ``sub``: an iris GMM run on 140 rows
    (arrays of the same names and shapes, other values)."""
    from sklearn.datasets import load_iris

    from pipeline import ConceptExplainer

    X = load_iris().data + np.random.default_rng(0).normal(0, 0.05, (150, 4))
    base = ConceptExplainer.load(iris)
    want = {t: base.predict(X, tree=t).tolist() for t in base.tree_names_}

    def loads_and_agrees(folder):
        ex = ConceptExplainer.load(folder)
        return all(ex.predict(X, tree=t).tolist() == want[t] for t in want)

    def sums(fn):
        def change(f):
            lines = (f / "SHA256SUMS").read_text().splitlines()
            (f / "SHA256SUMS").write_bytes(fn([(ln[:64], ln[66:]) for ln in lines]).encode())
        return change

    def cov(a):
        a["ref_covariances"][0] = -a["ref_covariances"][0]

    def link(f):
        (f / "trees" / "cart.json").unlink()
        os.symlink("/etc/passwd", f / "trees" / "cart.json")
        resum(f)

    cases = {
        "tree replaced by another run's tree of the same width, SHA256SUMS recomputed": (
            "refuse", lambda f: (shutil.copy(other / "explainer" / "trees" / "cart.json", f / "trees" / "cart.json"),
                                 resum(f))),
        "tree path ../../../etc/passwd in explainer.json": (
            "refuse", lambda f: edit_json(f, lambda d: d["trees"]["cart"].update(file="../../../etc/passwd"))),
        "tree path /etc/passwd (absolute) in explainer.json": (
            "refuse", lambda f: edit_json(f, lambda d: d["trees"]["cart"].update(file="/etc/passwd"))),
        "tree file a symlink to /etc/passwd": ("refuse", link),
        "SHA256SUMS in sha256sum's binary '*file' format": (
            "accept", sums(lambda rows: "".join(f"{d} *{n}\n" for d, n in rows))),
        "SHA256SUMS with upper-case hex": ("accept", sums(lambda rows: "".join(f"{d.upper()}  {n}\n" for d, n in rows))),
        "SHA256SUMS with CRLF line ends": ("accept", sums(lambda rows: "".join(f"{d}  {n}\r\n" for d, n in rows))),
        "SHA256SUMS in sha256sum --tag format": (
            "accept", sums(lambda rows: "".join(f"SHA256 ({n}) = {d}\n" for d, n in rows))),
        "SHA256SUMS cut in half (mid-line)": (
            "refuse", lambda f: (f / "SHA256SUMS").write_bytes((f / "SHA256SUMS").read_bytes()[:len(
                (f / "SHA256SUMS").read_bytes()) // 2])),
        "SHA256SUMS cut at a line end (files unlisted)": (
            "refuse", sums(lambda rows: "".join(f"{d}  {n}\n" for d, n in rows[:len(rows) // 2]))),
        "a file added, not listed": ("refuse", lambda f: (f / "notes.txt").write_text("x")),
        "explainer.json invalid JSON, SHA256SUMS recomputed": (
            "refuse", lambda f: ((f / "explainer.json").write_text((f / "explainer.json").read_text()[:-40]),
                                 resum(f))),
        "explainer.json features.names of the wrong length": (
            "refuse", lambda f: edit_json(f, lambda d: d["features"].update(names=d["features"]["names"][:2]))),
        "explainer.json features.names a string": (
            "refuse", lambda f: edit_json(f, lambda d: d["features"].update(names="petal"))),
        "explainer.json reference.assign missing": (
            "refuse", lambda f: edit_json(f, lambda d: d["reference"].pop("assign"))),
        "a rule's text edited, SHA256SUMS recomputed": (
            "refuse", lambda f: edit_json(f, lambda d: next(iter(d["trees"]["cart"]["rules"].values())).update(
                text="petal width (cm) <= 99 → cluster 0"))),
        "covariance not positive definite": ("refuse", lambda f: edit_arrays(f, cov)),
        "mixture weights summing to 2": ("refuse", lambda f: edit_arrays(f, lambda a: a.update(
            ref_weights=a["ref_weights"] * 2))),
        "array ref_means missing": ("refuse", lambda f: edit_arrays(f, lambda a: a.pop("ref_means"))),
        "NaN in ref_means": ("refuse", lambda f: edit_arrays(f, lambda a: a["ref_means"].__setitem__((0, 0), np.nan))),
        "feature_scale of the wrong shape": ("refuse", lambda f: edit_arrays(f, lambda a: a.update(
            feature_scale=np.ones((4, 2))))),
        "arrays.npz of another run (same shapes), SHA256SUMS recomputed": (
            "refuse", lambda f: (shutil.copy(sub / "explainer" / "arrays.npz", f / "arrays.npz"), resum(f))),
        "arrays.npz not a zip, SHA256SUMS recomputed": (
            "refuse", lambda f: ((f / "arrays.npz").write_bytes(b"not a zip"), resum(f))),
    }
    out = {}
    for i, (name, (expect, damage)) in enumerate(cases.items()):
        folder = tmp / f"bundle{i}"
        shutil.copytree(iris / "explainer", folder)
        damage(folder)
        out[name] = _outcome(expect, lambda: loads_and_agrees(folder))
    return out


def input_cases(tmp: Path, iris: Path, table: Path, digits: Path) -> dict:
    import pandas as pd
    from sklearn.datasets import load_digits, load_iris

    from pipeline import ConceptExplainer

    data = load_iris(as_frame=True).data
    names = list(data.columns)
    X = data.to_numpy()
    ex, tab, dig = ConceptExplainer.load(iris), ConceptExplainer.load(table), ConceptExplainer.load(digits)
    base = ex.predict(X, tree="cart")
    z = (X - X.mean(axis=0)) / X.std(axis=0)
    D, y = load_digits(return_X_y=True)
    cases = {
        "DataFrame whose column names match none of the run's": (
            "refuse", lambda: (ex.predict(data.set_axis(list("abcd"), axis=1), tree="cart") == base).all()),
        "DataFrame with one column renamed": (
            "refuse", lambda: (ex.predict(data.rename(columns={names[2]: "petal length"}), tree="cart") == base).all()),
        "DataFrame with an extra column": ("refuse", lambda: bool(len(ex.explain(data.assign(extra=0.0))))),
        "DataFrame with the run's columns reordered": (
            "accept", lambda: bool((ex.predict(data[names[::-1]], tree="cart") == base).all())),
        "z-scored rows given to a standardised-table run": ("warn", lambda: len(tab.explain(z)) > 0),
        "digits scaled by 1/16 given to the VaDE digits run": ("warn", lambda: len(dig.explain(D / 16)) > 0),
        "the run's own digits (no warning expected)": ("accept", lambda: len(dig.explain(D)) > 0),
        "one digit class only (no warning expected)": ("accept", lambda: len(dig.explain(D[y == 3])) > 0),
        "the table's own rows of one species (no warning expected)": ("accept", lambda: len(tab.explain(X[:50])) > 0),
    }
    return {name: _outcome(expect, fn) for name, (expect, fn) in cases.items()}


def setting_cases(tmp: Path) -> dict:
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    port = _closed_port()
    settings = {
        "dataset.chunk_rows=0": ("refuse", ["dataset.chunk_rows=0"]),
        "dataset.chunk_rows=-1": ("refuse", ["dataset.chunk_rows=-1"]),
        "compute=dask n_workers=0": ("refuse", ["compute=dask", "compute.n_workers=0"]),
        "compute=dask n_workers=-1": ("refuse", ["compute=dask", "compute.n_workers=-1"]),
        "compute=dask threads_per_worker=0": ("refuse", ["compute=dask", "compute.threads_per_worker=0"]),
        "compute=dask memory_limit=1KB": ("refuse", ["compute=dask", "compute.memory_limit=1KB"]),
        "compute=dask an unreachable loopback address": (
            "refuse", ["compute=dask", f"compute.address=tcp://127.0.0.1:{port}"]),
        "compute=dask n_workers=1000 (a cap, said)": ("warn", ["compute=dask", "compute.n_workers=1000"]),
    }
    out = {}
    for i, (name, (expect, args)) in enumerate(settings.items()):
        cfg = compose_config(["dataset=iris", *args, f"paths.output_dir={tmp / f'set{i}'}",
                              f"paths.cache_dir={tmp / 'cache-settings'}", "report.figures=false", "report.html=false",
                              "report.summary=false"])
        out[name] = _outcome(expect, lambda: run(cfg) is not None)
    return out


def command_cases(tmp: Path, iris: Path) -> dict:
    (tmp / "afile").write_text("x")
    base = [str(iris), "dataset=iris", f"paths.cache_dir={tmp / 'cache-cmd'}"]
    cases = {
        "explain explainer=[cart]": ["explainer=[cart]"], "explain clustering=kmeans": ["clustering=kmeans"],
        "explain seed=7": ["seed=7"], "explain latents=maybe": ["latents=maybe"],
        "explain output=<an existing file>": [f"output={tmp / 'afile'}"],
        "explain output=<a path under a file>": [f"output={tmp / 'afile' / 'sub'}"],
    }
    return {name: _command([*base, *extra] + ([f"output={tmp / f'cmd{i}'}"] if "output=" not in extra[0] else []),
                           tmp) for i, (name, extra) in enumerate(cases.items())}


def shard_cases(tmp: Path) -> dict:
    from pipeline.app.data.files import load_files

    rng = np.random.default_rng(0)

    def folder(name, shard_names, manifest=None):
        f = tmp / name
        f.mkdir()
        for i, s in enumerate(shard_names):
            np.save(f / f"{s}.npy", rng.normal(10.0 * i, 1.0, (40, 3)))
        if manifest:
            (f / "manifest.txt").write_text("\n".join(manifest) + "\n")
        return f

    def in_order(f, n):  # shard i's rows (mean 10 i) come i-th
        X = np.asarray(load_files(f).X)
        return bool(all(abs(X[40 * i:40 * (i + 1)].mean() - 10.0 * i) < 2 for i in range(n)))

    natural = folder("natural", ["a9", "a10"])
    many = folder("many", [f"part{i}" for i in range(1, 13)])
    listed = folder("listed", ["z", "y", "x"], manifest=["z.npy", "y.npy", "x.npy"])
    return {"shards a9.npy, a10.npy read a9 first": _outcome("accept", lambda: in_order(natural, 2)),
            "shards part1..part12 read in number order": _outcome("accept", lambda: in_order(many, 12)),
            "shards in the order a manifest.txt lists": _outcome("accept", lambda: in_order(listed, 3))}


def run_cases() -> dict:
    """Every issue-51 case: {section: {case: [outcome, message]}}, plus the counts."""
    tmp = Path(tempfile.mkdtemp(prefix="battery51-"))
    try:
        from sklearn.datasets import load_iris

        iris = _run(tmp / "iris", "dataset=iris")
        other = _run(tmp / "other", "dataset=iris", "clustering=kmeans")
        sub = _run(tmp / "sub", "dataset=iris", "dataset.n_samples=140")
        (tmp / "t").mkdir()
        load_iris(as_frame=True).data.to_csv(tmp / "t" / "iris.csv", index=False)
        table = _run(tmp / "table", "dataset=files", f"dataset.path={tmp / 't' / 'iris.csv'}")
        digits = _run(tmp / "digits", "dataset=digits", "threads=1")
        out = {"bundle": bundle_cases(tmp, iris, other, sub), "inputs": input_cases(tmp, iris, table, digits),
               "settings": setting_cases(tmp), "command": command_cases(tmp, iris), "shards": shard_cases(tmp)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    counts: dict = {}
    for cases in out.values():
        for outcome, _ in cases.values():
            counts[outcome] = counts.get(outcome, 0) + 1
    out["counts"] = counts
    return out


__all__ = ["edit_arrays", "edit_json", "resum", "run_cases"]
