"""A run's ``report.html``: one self-contained page (no scripts, external styles or fonts).

Pure functions: :func:`tree_view` turns a fitted tree and its data into a :class:`TreeView`
(inline SVG figure, simplified annotated rules, per-leaf galleries) and
:func:`render_report` turns the run's pieces into the HTML string. The app's writer saves it.

Sections: configuration summary, results table, each tree (SVG + rules + per-leaf gallery:
image thumbnails as inline base64 PNG, text snippets, or feature summaries for tables), the
CAV table with confidence intervals and significance, the concept scatter, and the
counterfactual table and charts when the run has them.
"""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import yaml

from pipeline.app.report.tables import format_cell
from pipeline.trees.tree import ExplanationTree

if TYPE_CHECKING:  # matplotlib only when a figure is drawn (a warm run reuses cached views)
    from matplotlib.figure import Figure

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 auto;max-width:72em;
padding:1em 2em;color:#1d2330;line-height:1.45}
h1{font-size:1.5em;margin-bottom:.2em}h2{border-bottom:1px solid #ccd3e0;padding-bottom:.2em;margin-top:1.8em}
h3{margin-bottom:.3em}.sub{color:#5a6375;margin-top:0}.warn{color:#8a4b00;font-weight:600}
table{border-collapse:collapse;font-size:.88em;margin:.5em 0}
th,td{border:1px solid #d7dce6;padding:.25em .55em;text-align:right}th{background:#eef2fa}
td:first-child,th:first-child{text-align:left}tr:nth-child(even) td{background:#fafbfd}
.fig svg{max-width:100%;height:auto}.tbl{overflow-x:auto;max-width:100%}.fig{overflow-x:auto;margin:.5em 0}
ol.rules{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.85em}ol.rules li{margin:.15em 0}
details{margin:.5em 0}summary{cursor:pointer;color:#34558b}
.leaf{border:1px solid #e1e5ee;border-radius:6px;padding:.4em .7em;margin:.5em 0}
.leaf .rule{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.82em}
.thumbs img{width:56px;height:56px;image-rendering:pixelated;margin:2px;border:1px solid #ddd}
.snip{font-size:.85em;color:#333;margin:.2em 0}.check{font-size:.82em;color:#1a5f2a;margin:.2em 0}.yes{color:#1a7f37;font-weight:600}.no{color:#8a8f99}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;font-size:.8em}
"""


@dataclass
class LeafView:
    """One leaf of a tree in the report: its rule and example inputs."""

    leaf: int
    rule: str
    number: int | None = None  # the rule's number in the tree's numbered rule list (1-based)
    thumbnails: list[bytes] = field(default_factory=list)  # PNG bytes
    snippets: list[str] = field(default_factory=list)
    features: pd.DataFrame | None = None  # feature summary (tabular data)
    measured: pd.DataFrame | None = None  # per example (column): measured values beside concept coordinates
    check: str = ""  # the rule's measured check (share of the leaf agreeing by the measurement)


@dataclass
class TreeView:
    """One explainer's tree in the report."""

    row: str
    title: str
    svg: str
    rules: list[str]
    raw_rules: list[str]
    leaves: list[LeafView] = field(default_factory=list)
    note: str = ""  # what the printed thresholds mean (units, exactness)


@dataclass
class ConceptView:
    """One discovered concept in the report: its name, association and the examples expressing it most."""

    name: str
    caption: str
    thumbnails: list[bytes] = field(default_factory=list)
    snippets: list[str] = field(default_factory=list)
    features: pd.DataFrame | None = None


def concept_views(discovery: list[dict], top_examples, kind: str | None, data=None,
                  data_feature_names=None) -> list[ConceptView]:
    """Views of discovered concepts: thumbnails (images), snippets (text) or the features that set the
    top examples apart (tables), each captioned ``≈ label, AUC .93``."""
    out = []
    for row, rows in zip(discovery, np.asarray(top_examples, dtype=int)):
        caption = row.get("association") or "no class association"
        caption += f" · importance {row.get('importance', float('nan')):.0%}"
        view = ConceptView(str(row["concept"]), caption)
        if data is not None and kind == "image":
            view.thumbnails = [thumbnail_png(data[i]) for i in rows]
        elif data is not None and kind == "text":
            view.snippets = [" ".join(str(data[i]).split())[:160] for i in rows[:3]]
        elif data is not None and kind is not None:
            view.features = feature_summary(data, rows, data_feature_names)
        out.append(view)
    return out


def svg_of(fig: Figure) -> str:
    """The ``<svg>`` element of ``fig`` (text kept as text), ready to inline in HTML."""
    from pipeline.app.report.figures import figure_bytes

    return inline_svg(figure_bytes(fig, "svg"))


def inline_svg(svg: bytes) -> str:
    """The ``<svg>`` element of an SVG file's bytes, ready to inline in HTML."""
    text = svg.decode("utf-8")
    text = text[text.index("<svg"):]
    head, rest = text.split(">", 1)  # shown 1.3x the print size on screen (the viewBox keeps the drawing)
    head = re.sub(r'(width|height)="([\d.]+)pt"', lambda m: f'{m[1]}="{float(m[2]) * 1.3:.1f}pt"', head)
    return head + ">" + rest


def png_data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def thumbnail_png(image) -> bytes:
    """A small PNG of one image (H x W, H x W x 1 or H x W x 3; uint8 or float in [0, 1])."""
    import matplotlib.image

    img = np.asarray(image)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim == 3 and img.shape[0] in (1, 3) and img.shape[-1] not in (1, 3):  # channels first
        img = np.moveaxis(img, 0, -1)
        img = img[..., 0] if img.shape[-1] == 1 else img
    buf = io.BytesIO()
    matplotlib.image.imsave(buf, img, format="png", cmap="gray_r" if img.ndim == 2 else None,
                            metadata={"Software": None})
    return buf.getvalue()


def feature_summary(data, rows: np.ndarray, names, top: int = 5) -> pd.DataFrame:
    """The ``top`` features whose leaf mean differs most from the overall mean (in overall SDs)."""
    data = np.asarray(data, dtype=float)
    names = list(names) if names is not None else [f"x[{j}]" for j in range(data.shape[1])]
    mean, sd = data.mean(axis=0), data.std(axis=0)
    leaf_mean = data[rows].mean(axis=0) if len(rows) else np.full(data.shape[1], np.nan)
    z = np.where(sd > 0, (leaf_mean - mean) / np.where(sd > 0, sd, 1), 0.0)
    order = np.argsort(-np.abs(np.nan_to_num(z)), kind="stable")[:top]
    return pd.DataFrame({"feature": [names[j] for j in order], "leaf mean": leaf_mean[order],
                         "overall mean": mean[order], "difference (SD)": z[order]})


def tree_view(row: str, method: str, tree: ExplanationTree, X, reference=None, y=None, class_names=None, *,
              kind: str | None = None, data=None, data_feature_names=None, dataset: str | None = None,
              ari: float | None = None, n_examples: int = 8, random_state: int = 0, units=None,
              reading=None, measured: dict | None = None, checks: dict | None = None) -> TreeView:
    """Everything the report shows for one tree.

    Parameters
    ----------
    row, method : str
        The explainer row name and its method (for the title).
    tree : ExplanationTree
    X : array-like of shape (n_samples, tree.n_features)
        The coordinates the tree was fitted on (features, latents or concept scores).
    reference, y : array-like of shape (n_samples,), optional
        Reference clustering and ground truth (leaf purity and majority class).
    kind : {"image", "text", "tabular"}, optional
        What ``data`` holds; decides the per-leaf gallery.
    data : array-like or list of str, optional
        The inputs in the same row order (images, texts or a feature table).
    reading : pipeline.trees.tree.Reading, optional
        ``tree.read(X, reference, y, class_names, units)``, when already computed.
    measured, checks : dict, optional
        A run's measured concepts (``{"values", "measures"}`` per concept column) and the rules' checks
        against them (:func:`pipeline.app.report.run_report.rule_checks`): each leaf's examples are
        captioned with their measured values beside their concept coordinates, and the rule with its check.
    """
    from pipeline.app.report.concept_plots import leaf_examples
    from pipeline.app.report.figures import plot_tree, tree_title

    title = tree_title(row, method, tree, dataset, ari)
    reading = reading or tree.read(X, reference, y, class_names, units)
    fig = plot_tree(tree, reading=reading)  # the section heading carries the title
    rules = tree.rules(reading=reading)
    picks = leaf_examples(tree, X, n_examples, random_state) if data is not None else {}
    leaf_of = tree.apply(X) if kind not in (None, "image", "text") and data is not None else None
    leaves = []
    for number, rule in enumerate(rules, 1):
        view = LeafView(rule.leaf, rule.format(), number)
        rows = picks.get(rule.leaf, np.array([], dtype=int))
        if measured is not None:
            from pipeline.app.report.concept_run import check_text

            view.check = check_text((checks or {}).get(int(rule.leaf), []), measured, tree.feature_names)
            cut = [iv.feature for iv in rule.intervals if iv.weights is None and measured["measures"][iv.feature]]
            view.measured = measured_table(rows, cut, X, measured, tree.feature_names, units) if rows.size else None
        if kind == "image":
            view.thumbnails = [thumbnail_png(data[i]) for i in rows]
        elif kind == "text":
            view.snippets = [" ".join(str(data[i]).split())[:160] for i in rows[:3]]
        elif kind is not None and data is not None:
            members = np.flatnonzero(leaf_of == rule.leaf)
            view.features = feature_summary(data, members, data_feature_names)
        leaves.append(view)
    # encoded here, not queued behind the figure files' encodings: the page waits for it (0.07 s)
    svg = svg_of(fig)
    return TreeView(row, title, svg, [r.format() for r in rules], [r.format(simplified=False) for r in rules], leaves)


def measured_table(rows, features: list[int], X, measured: dict, names, units=None) -> pd.DataFrame | None:
    """Under a leaf's examples: per concept the rule cuts, each example's measured value and where
    its concept coordinate puts it in the rules' units (P, or percentile of the coordinate), one
    column per example (``#1``, ``#2`` ... in the order of the thumbnails)."""
    table = {}
    for f in features:
        spec = measured["measures"][f]
        name = names[f] if names is not None else spec["name"]
        unit = f" ({spec['unit']})" if spec.get("unit") else ""
        u = units[f] if units is not None else None
        coords = np.asarray(X[np.asarray(rows), f], dtype=np.float64)
        values = measured["values"][np.asarray(rows), f]
        if spec["split"] == "presence":
            table[f"{name}: measured{unit}"] = [f"{v:.3g}" for v in values]
        else:  # beside its percentile among the run's measurements, what the rule's check compares
            from pipeline.concepts.measured_maths import percentile_ranks

            ranks = percentile_ranks(measured["values"][:, f])[np.asarray(rows)]
            table[f"{name}: measured{unit} (percentile)"] = [
                f"{v:.3g} ({r:.0f})" if r == r else f"{v:.3g}" for v, r in zip(values, ranks)]
        if u is not None and getattr(u, "kind", None) == "probability":
            table[f"{name}: P(concept)"] = [f"{float(p):.2f}" for p in u(coords)]
        elif u is not None and getattr(u, "kind", None) == "percentile":
            table[f"{name}: coordinate percentile"] = [f"{float(p):.0f}" for p in u(coords)]
        else:
            table[f"{name}: coordinate ⟨c, z⟩"] = [f"{v:.3g}" for v in coords]
    if not table:
        return None
    frame = pd.DataFrame(table, index=[f"#{i + 1}" for i in range(len(rows))]).T
    frame.insert(0, "", frame.index)
    return frame.reset_index(drop=True)


# ----------------------------------------------------------------------------- rendering
def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _num(v, column=None) -> str:
    if isinstance(v, (bool, np.bool_)):
        return '<span class="yes">yes</span>' if v else '<span class="no">no</span>'
    if isinstance(v, (float, np.floating)):
        return format_cell(float(v), column)
    return _e(v)


# The results columns shown first (the rest are one click away).
RESULT_COLUMNS = ["run", "explainer", "method", "ari", "stability", "ami", "ref_ari", "misassignment", "q", "n_leaves", "depth",
                  "fit_seconds", "error"]
_COUNTS = {"n_leaves", "depth", "n_noise", "n_runs", "k", "from", "to", "samples", "K", "CAVs", "independent CAVs", "positives",
           "negatives", "size", "leaf", "cluster"}  # count columns: shown as integers even when read as floats


def table_html(df: pd.DataFrame) -> str:
    """A plain HTML table in a scrolling box (floats to 3 decimals, counts as integers, NaN empty,
    booleans as yes/no)."""
    head = "".join(f"<th>{_e(c)}</th>" for c in df.columns)
    counts = [c in _COUNTS for c in df.columns]

    def cell(v, count, column):
        if count and isinstance(v, (float, np.floating)) and np.isfinite(v) and float(v).is_integer():
            return str(int(v))
        return _num(v, column)

    body = "".join("<tr>" + "".join(f"<td>{cell(v, c, col)}</td>" for v, c, col in zip(row, counts, df.columns))
                   + "</tr>" for row in df.itertuples(index=False))
    return f'<div class="tbl"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _concept_html(view: ConceptView) -> str:
    return _examples_html(f"<b>{_e(view.name)}</b> · {_e(view.caption)}", view, f"example expressing {view.name}")


def _examples_html(head: str, view, alt: str) -> str:
    """A box: ``head`` (HTML), then the view's thumbnails, text snippets or feature table; with
    captions (measured values), each example with its caption."""
    parts = [f'<div class="leaf"><div class="rule">{head}</div>']
    check = getattr(view, "check", "")
    if check:
        parts.append(f'<div class="check">{_e(check)}</div>')
    if view.thumbnails:
        imgs = "".join(f'<img alt="{_e(alt)} #{i + 1}" title="#{i + 1}" src="{png_data_uri(t)}">'
                       for i, t in enumerate(view.thumbnails))
        parts.append(f'<div class="thumbs">{imgs}</div>')
    parts += [f'<p class="snip">#{i + 1} “{_e(s)}”</p>' if getattr(view, "measured", None) is not None
              else f'<p class="snip">“{_e(s)}”</p>' for i, s in enumerate(view.snippets)]
    if getattr(view, "measured", None) is not None:
        shown = max(len(view.thumbnails), len(view.snippets))
        parts.append(table_html(view.measured.iloc[:, :shown + 1]))
    if view.features is not None:
        parts.append(table_html(view.features))
    parts.append("</div>")
    return "".join(parts)


def _config_summary(config: dict) -> str:
    def name(key):
        v = config.get(key)
        return v.get("name", "") if isinstance(v, dict) else ("" if v is None else v)

    items = [("dataset", name("dataset")), ("encoder", name("encoder")), ("clustering", name("clustering")),
             ("concepts", name("concepts")), ("explainers", ", ".join(config.get("explainer") or {})),
             ("counterfactuals", name("counterfactuals")), ("seed", config.get("seed", ""))]
    dl = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in items if v not in ("", None, "none"))
    if isinstance(config.get("paths"), dict):  # not the page's own folder: a rerun restored elsewhere shows its config too
        config = {**config, "paths": {k: v for k, v in config["paths"].items() if k != "output_dir"}}
    full = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return f"<table>{dl}</table><details><summary>full configuration</summary><pre>{_e(full)}</pre></details>"


def _leaf_html(view: LeafView) -> str:
    name = f"rule {view.number}" if view.number is not None else f"leaf {view.leaf}"  # as the rule list numbers it
    return _examples_html(f"{name}: {_e(view.rule)}", view, f"example of {name}")


def _tree_html(view: TreeView) -> str:
    rules = "".join(f"<li>{_e(r)}</li>" for r in view.rules)
    raw = "".join(f"<li>{_e(r)}</li>" for r in view.raw_rules)
    out = [f'<section class="tree" id="tree-{_e(view.row)}"><h3>{_e(view.title)}</h3>',
           f'<div class="fig">{view.svg}</div>', f'<ol class="rules">{rules}</ol>']
    if view.note:
        out.append(f'<p class="sub">{_e(view.note)}</p>')
    if view.raw_rules != view.rules:  # some path tests a feature more than once
        out.append(f'<details><summary>rules as the raw path conditions</summary><ol class="rules">{raw}</ol>'
                   "</details>")
    if any(v.thumbnails or v.snippets or v.features is not None for v in view.leaves):
        out.append("<details open><summary>examples per leaf</summary>"
                   + "".join(_leaf_html(v) for v in view.leaves) + "</details>")
    out.append("</section>")
    return "".join(out)


def render_report(title: str, config: dict, results: pd.DataFrame, trees: list[TreeView], *,
                  subtitle: str = "", concept_table: pd.DataFrame | None = None, scatter_svg: str | None = None,
                  counterfactuals: pd.DataFrame | None = None,
                  counterfactual_svgs: list[str] = (), notes: list[str] = (), max_counterfactuals: int = 20,
                  concept_legend: list[str] = (), tcav_table: pd.DataFrame | None = None, tcav_caption: str = "",
                  discovered: list[ConceptView] = (), discovery_method: str | None = None,
                  concept_notes: list[str] = (), completeness: list[str] = (),
                  stability: tuple[str | None, bool] = (None, False)) -> str:
    """The whole page as one HTML string (UTF-8, no external resources); ``concept_table``,
    ``concept_legend`` and ``tcav_table``: :func:`pipeline.app.report.concept_run.concept_frame`,
    :func:`~pipeline.app.report.concept_run.concept_legend` and
    :func:`~pipeline.app.report.concept_run.tcav_frame`; ``completeness``: the lines of
    :func:`pipeline.app.report.completeness_table.completeness_text`; ``stability``: the sentence of
    :func:`pipeline.app.report.stability.stability_text` and whether it is a warning."""
    body = [f"<h1>{_e(title)}</h1>"]
    if subtitle:
        body.append(f'<p class="sub">{_e(subtitle)}</p>')
    body += [f"<p>{_e(n)}</p>" for n in notes]
    main = [c for c in RESULT_COLUMNS if c in results.columns] or list(results.columns)
    hidden = [c for c in results.columns if c not in main]
    body += ["<h2>Configuration</h2>", _config_summary(config), "<h2>Results</h2>", table_html(results[main])]
    if hidden:
        body.append(f"<details><summary>all columns ({', '.join(map(str, hidden))})</summary>"
                    f"{table_html(results)}</details>")
    body += ['<p class="sub">ari/ami: agreement of each explanation with the ground truth; ref_ari/ref_ami: with '
             "the reference clustering; misassignment: share of points the tree puts outside their reference cluster; "
             "q: explainability-to-noise ratio (mean-based trees).</p>"]
    if stability[0]:
        warn = ' class="warn"' if stability[1] else ""
        body.append(f'<p id="stability"{warn}>' + ("warning: " if stability[1] else "") + f"{_e(stability[0])}</p>")
    body.append("<h2>Trees</h2>")
    body += [_tree_html(v) for v in trees] or ["<p>no tree was fitted.</p>"]
    if concept_table is not None:
        body += ['<h2 id="concepts">Concepts and their tests</h2>', table_html(concept_table)]
        body += ['<p class="sub">' + "<br>".join(_e(line.strip()) for line in concept_legend) + "</p>"]
    if tcav_table is not None:
        body += ['<h3 id="tcav">TCAV scores through the clustering</h3>', f'<p class="sub">{_e(tcav_caption)}</p>',
                 table_html(tcav_table)]
    if concept_notes:
        body += ["<p>" + "<br>".join(_e(n) for n in concept_notes) + "</p>"]
    if [c for c in completeness if c]:
        body += ['<h2 id="completeness">How much the concepts explain</h2>']
        block: list[str] = []  # indented lines: a table, kept as laid out
        for c in [*completeness, ""]:
            if c.startswith("  "):
                block.append(c)
                continue
            if block:
                body.append(f"<pre>{_e(chr(10).join(block))}</pre>")
                block = []
            if c:
                body.append(('<p class="warn">' if c.startswith(("Warning", "These")) and "less" in c else "<p>")
                            + f"{_e(c)}</p>")
    if discovered:
        how = {"nmf": "non-negative matrix factorisation", "ica": "independent component analysis (FastICA)"}
        body += ['<h2 id="discovered">Discovered concepts</h2>',
                 f'<p class="sub">concepts found in the representation by {_e(how.get(discovery_method, "factorisation"))}'
                 "; each is named from the data, not the labels, and shown by the examples expressing it most (a "
                 "contact sheet for images); ≈ gives the class its coordinate separates best (ROC AUC).</p>"]
        body += [_concept_html(v) for v in discovered]
    if scatter_svg:
        body += ["<h2>Clusters in concept space</h2>", f'<div class="fig">{scatter_svg}</div>']
    if counterfactuals is not None and len(counterfactuals):
        shown = counterfactuals.head(max_counterfactuals)
        more = len(counterfactuals) - len(shown)
        body += ["<h2>Counterfactual explanations</h2>",
                 '<p class="sub">translations between pairs of reference clusters, best-explained first; '
                 "correctness: share of the source cluster's points that land near a target point when translated; "
                 "coverage: share of the target's points that some translated source point lands near (Plumb et al., "
                 "2020)."
                 + (f" {more} more pairs in counterfactuals.csv." if more > 0 else "") + "</p>", table_html(shown)]
        body += [f'<div class="fig">{s}</div>' for s in counterfactual_svgs]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")
