"""``python -m pipeline.explain <run-dir> dataset=<...>``: a finished run applied to new data.

Loads the run's saved explainer (:class:`pipeline.app.explainer.concept_explainer.ConceptExplainer`),
reads the data a ``dataset=`` option names through the pipeline's own ``load`` stage (cached
like any run's), and writes into ``<output>`` (default ``<run>/explanations/<dataset>-<time>/``):

* ``explanations.parquet``: one row per sample (columns: :meth:`ConceptExplainer.explain`);
* ``generalisation.csv``: per tree the agreement with the reference clustering and, when the
  new data have labels, the ARI against them, on the new data beside the run's training figures;
* ``report.html``: those tables and, per tree and rule, the samples it fired on (thumbnails
  for images, the first words of texts);

and prints a short table. See docs/explain.md.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.app.explainer.concept_explainer import ConceptExplainer
from pipeline.app.explainer.explain_options import OWN_KEYS, check_output, check_overrides, check_seed
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

SAMPLES_PER_RULE = 12


def _compose(overrides: list[str], out: Path) -> dict:
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import to_plain

    if not any(o.split("=", 1)[0].lstrip("+") == "dataset" for o in overrides):
        raise InvalidInputError("name the data to explain with a dataset option, e.g. `python -m pipeline.explain "
                                "<run-dir> dataset=files dataset.path=new.csv` or dataset=fashion_mnist "
                                "dataset.split=test (any dataset option of `python -m pipeline`).")
    from pipeline.app.configuration.config import CONFIG_DIR
    from pipeline.app.startup.checks import check_override_keys

    check_override_keys(overrides, CONFIG_DIR)  # a misspelt key: the nearest valid one, as `python -m pipeline` says
    try:
        cfg = compose_config([*overrides, f"paths.output_dir={out}"])
    except InvalidInputError:
        raise
    except Exception as exc:  # Hydra's composition errors: a misspelt option or key
        raise InvalidInputError(f"the options {overrides} do not compose: {exc}") from None
    plain = to_plain(cfg)
    from pipeline.app.configuration.option_keys import check_keys_read

    check_keys_read(plain, groups=("dataset",))  # e.g. dataset.image_size for a loader that does not read it
    return plain


def load_data(cfg: dict):
    """The ``load`` stage's artifact for ``cfg`` (cached under ``paths.cache_dir`` as in a run)."""
    from pipeline.app.stores.cache import StageCache
    from pipeline.app.stages.framework import RunContext, execute
    from pipeline.app.stages.load import load_stage

    cache = StageCache(Path(cfg["paths"]["cache_dir"]), enabled=cfg["cache"]["enabled"], force=set())
    return execute(load_stage(cfg), cfg, RunContext(cache, Path(cfg["paths"]["output_dir"])), {}).artifact


def generalisation(ex: ConceptExplainer, df: pd.DataFrame, y=None) -> pd.DataFrame:
    """Per tree (and the reference): rows, agreement with the reference clustering and ARI against
    the labels ``y`` on the new data, beside the run's training figures."""
    from pipeline import metrics

    ref = df["reference"].to_numpy()
    rows = []
    has_y = y is not None and len(y) == len(df)
    ref_train = ex.bundle_.doc["reference"].get("training") or {}
    r = {"explainer": "reference", "method": ex.bundle_.doc["reference"]["method"], "rows": len(df),
         "agreement (new)": np.nan, "agreement (training)": np.nan}
    if has_y:
        r.update({"ARI vs labels (new)": metrics.ari(y, ref), "ARI vs labels (training)": ref_train.get("ari", np.nan)})
    rows.append(r)
    for row in ex.tree_names_:
        pred = df[f"{row}.cluster"].to_numpy()
        train = ex.bundle_.doc["trees"][row].get("training") or {}
        r = {"explainer": row, "method": ex.bundle_.doc["trees"][row]["method"], "rows": len(df),
             "agreement (new)": metrics.reference_agreement(pred, ref) if (ref >= 0).any() else np.nan,
             "agreement (training)": train.get("agreement", np.nan)}
        if has_y:
            r.update({"ARI vs labels (new)": metrics.ari(y, pred), "ARI vs labels (training)": train.get("ari", np.nan)})
        rows.append(r)
    return pd.DataFrame(rows)


def _output_dir(run_dir: Path, dataset: str, given: str | None) -> Path:
    if given:
        return check_output(given)
    base = (run_dir if (run_dir / "results.csv").exists() else run_dir.parent) / "explanations"
    stamp = _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out, k = base / f"{dataset}-{stamp}", 1
    while out.exists():
        out, k = base / f"{dataset}-{stamp}_{k}", k + 1
    return out


def console_table(ex: ConceptExplainer, df: pd.DataFrame, show: int = 10) -> str:
    """The short table: the first ``show`` rows (row, reference, each tree's cluster/leaf/margin, the
    out-of-range flag), then per tree the rules that fired and on how many samples."""
    cols = ["row", "reference"] + [c for t in ex.tree_names_ for c in (f"{t}.cluster", f"{t}.leaf", f"{t}.margin")]
    cols.append("out_of_range")
    head = df[cols].head(show).to_string(index=False, float_format=lambda v: f"{v:.3g}")
    lines = [f"{len(df)} samples explained by {ex!r}", head]
    if len(df) > show:
        lines.append(f"... ({len(df) - show} more rows in explanations.parquet)")
    for t in ex.tree_names_:
        counts = df.groupby(f"{t}.rule", sort=False).size().sort_values(ascending=False)
        lines += ["", f"{t}: rules that fired (samples)"] + [f"  {n:6d}  {rule}" for rule, n in counts.items()]
    first = df.iloc[0] if len(df) else None
    if first is not None and ex.tree_names_:
        t = ex.tree_names_[0]
        change = first[f"{t}.change"] or "none reaches another cluster"
        lines += ["", f"row {first['row']}, {t}: {first[f'{t}.rule']}; nearest other cluster "
                      f"{first[f'{t}.to_cluster']} by {change}"]
    for t in ex.tree_names_:
        off = int((df[f"{t}.rule_holds"] == False).sum())  # noqa: E712 - None (not checked) is not False
        if off:
            lines.append(f"{t}: {off} samples lie between a printed threshold and the tree's exact cut "
                         f"({t}.rule_holds false): the tree routes them by the cut")
    if int(df["out_of_range"].sum()):
        lines.append(f"{int(df['out_of_range'].sum())} of {len(df)} samples have values outside the training range "
                     "(out_of_range; their explanations extrapolate)")
    return "\n".join(lines)


def _sample_html(kind: str, data, i: int) -> str:
    if kind == "image" and data is not None:
        from pipeline.app.report.html import png_data_uri, thumbnail_png

        return f'<img src="{png_data_uri(thumbnail_png(np.asarray(data[i])))}" title="row {i}">'
    if kind == "text" and data is not None:
        text = " ".join(str(data[i]).split()[:25])
        return f"<li>{html.escape(text)}…</li>"
    return ""


def report_html(ex: ConceptExplainer, df: pd.DataFrame, table: pd.DataFrame, kind: str, data, title: str) -> str:
    """A self-contained page: the generalisation table, then per tree every rule that fired with
    its sample count and its first samples (thumbnails or text openings; row ids otherwise)."""
    from pipeline.app.report.html import table_html

    parts = [f"<h1>{html.escape(title)}</h1>", "<h2>Rules on the new data</h2>",
             "<p>Per tree: agreement with the reference clustering and, with labels, ARI against them, on the new "
             "data beside the run's training figures.</p>", table_html(table)]
    rows_of = df["row"].to_numpy()
    for t in ex.tree_names_:
        parts.append(f"<h2>{html.escape(t)} ({html.escape(ex.bundle_.doc['trees'][t]['method'])})</h2>")
        for rule, idx in df.groupby(f"{t}.rule", sort=False).indices.items():
            parts.append(f"<h3>{html.escape(rule)} — {len(idx)} samples</h3>")
            shown = [_sample_html(kind, data, int(i)) for i in idx[:SAMPLES_PER_RULE]]
            if any(shown):
                wrap = ("<ul>{}</ul>" if kind == "text" else "<div>{}</div>").format("".join(shown))
                parts.append(wrap)
            ids = ", ".join(str(v) for v in rows_of[idx[:50]])
            parts.append(f"<p>rows {html.escape(ids)}{' …' if len(idx) > 50 else ''}</p>")
    style = "body{font-family:sans-serif;max-width:70em;margin:2em auto}img{width:48px;margin:1px}"
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>" \
           f"<style>{style}</style></head><body>{''.join(parts)}</body></html>"


def explain_run(run_dir, overrides: list[str], output: str | None = None, show: int = 10,
                latents: bool = False, positional: bool = False) -> tuple[Path, pd.DataFrame]:
    """The command's work (see the module docstring); returns (output folder, explanations).
    ``positional``: a table's columns are taken in order, not found by the run's column names."""
    from pipeline.app.startup.settings_checks import check_dataset_settings

    check_overrides(overrides)  # the command reads the data's options only (app/explainer/explain_options.py)
    run_dir = Path(run_dir).expanduser()
    models = [o.split("=", 1)[1] for o in overrides if o.startswith("paths.models_dir=")]
    ex = ConceptExplainer.load(run_dir, models_dir=models[-1] if models else None)
    probe = _compose(overrides, Path("/nonexistent"))
    check_seed(overrides, probe)
    check_dataset_settings(probe["dataset"])
    out = _output_dir(run_dir, probe["dataset"]["name"], output)
    cfg = {**probe, "paths": {**probe["paths"], "output_dir": str(out)}}
    load = load_data(cfg)
    df = ex.explain(_inputs(load, latents), latents=latents, positional=positional)
    table = generalisation(ex, df, load.y)
    kind = "text" if load.kind == "text" else ("image" if (load.images is not None or load.kind == "image") else load.kind)
    data = load.texts if kind == "text" else (load.images if load.images is not None else load.X)
    title = f"{ex.bundle_.doc['run']['dataset']} run applied to {load.name} ({len(df)} samples)"
    _write(out, {"explanations.parquet": _parquet(df), "generalisation.csv": table.to_csv(index=False),
                 "report.html": report_html(ex, df, table, kind, data, title),
                 "explain.json": json.dumps({"run": str(run_dir.resolve()), "overrides": overrides,
                                             "dataset": load.name, "rows": len(df)}, indent=1)})
    print(console_table(ex, df, show))
    print("")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep=""))
    print(f"explanations written to {out / 'explanations.parquet'}")
    print(f"report: {out / 'report.html'}")
    return out, df


def _inputs(load, latents: bool):
    """What the explainer reads of the loaded data: a table as a DataFrame of its columns (found by
    name), in its own units (a table the load stage standardised is z-scored with the run's means
    and spreads, not the new rows' own); the latents with ``latents``."""
    if latents:
        return np.asarray(load.X, dtype=np.float64)
    if load.kind == "text":
        return load.inputs
    inputs = load.raw if getattr(load, "raw", None) is not None else load.inputs
    names = load.feature_names
    if load.kind in ("table", "tabular") and names is not None and len(names) == np.shape(inputs)[1]:
        return pd.DataFrame(np.asarray(inputs), columns=[str(n) for n in names])
    return inputs


def _parquet(df: pd.DataFrame) -> bytes:
    import io

    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def _write(out: Path, files: dict) -> None:
    """The output folder with ``files`` (name -> text or bytes), complete or absent: written into a
    temporary sibling folder renamed into place (an empty ``out`` the user made is replaced)."""
    import os
    import shutil
    import uuid

    from pipeline.app.stores.writing import atomic_write

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.mkdir()
        for name, content in files.items():
            atomic_write(tmp / name, content)
        if out.is_dir():
            out.rmdir()  # empty (check_output): replaced by the complete folder
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


__all__ = ["OWN_KEYS", "console_table", "explain_run", "generalisation", "load_data", "report_html"]
