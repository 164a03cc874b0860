"""The completeness table printed under the Table-2 row and shown in the report (Yeh et al. 2020:
how much the concepts explain, against random and principal directions)."""

from __future__ import annotations

from pipeline.app.stores.artifacts import CompletenessArtifact


def _cell(entry: dict | None, key: str, folds: bool = False) -> str:
    if entry is None:
        return "—"
    if key == "random":
        r = entry["random"]
        return f"{r['median']:.2f} ({r['low']:.2f}–{r['high']:.2f})" if r["n"] else "—"
    v = entry[key]
    text = f"{v:.2f}"
    if folds and entry.get("concepts_folds"):
        lo, hi = entry["concepts_folds"]
        text += f" [{lo:.2f}–{hi:.2f}]"
    return text


def completeness_text(art: CompletenessArtifact | None, max_concepts: int = 8) -> list[str]:
    """The lines printed under the Table-2 row (and shown in the report): the completeness table
    (indented lines are the table), what it means in one sentence, the tree baseline and the
    concepts' importance."""
    if art is None or not art.completeness:
        return []
    t = art.completeness
    if "error" in t:
        return ["", f"Concept completeness: not computed ({t['error']})"]
    M, d = t["n_concepts"], t["n_latents"]
    s = "s" if M != 1 else ""
    head = (f"head: {art.head}" if art.head else "no head")
    lines = ["", f"How much the {M} concept{s} explain (Yeh et al. 2020, Def. 3.1: the reference clustering's own rule, "
                 f"{head}, assigns latents rebuilt from the concept scores; 1 = as well as the latents, 0 = the largest "
                 f"cluster's share; {t['n_rows']:,} rows, {t['n_folds']} folds; random: median (range) of "
                 f"{t['n_random']} draws):"]
    rows = [("", "rebuilt by an affine map", "by a network", "linear-probe ratio")]
    aff, net, probe = t.get("affine"), t.get("network"), t.get("probe")
    rows.append((f"these {M} concept{s}", _cell(aff, "concepts", True), _cell(net, "concepts"), _cell(probe, "concepts")))
    rows.append((f"{M} random direction{s}", _cell(aff, "random"), _cell(net, "random"), _cell(probe, "random")))
    rows.append((f"top {M} principal direction{s}", _cell(aff, "principal"), _cell(net, "principal"),
                 _cell(probe, "principal")))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines += ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
              for r in rows]
    if aff is None:
        lines.append(f"The Yeh figures are unavailable: {art.no_head}; the linear-probe ratio (held-out accuracy of a "
                     "logistic probe on the concept scores against one on the latents, minus chance) stands alone.")
    if t.get("spans"):
        lines.append(f"With {M} concepts in a {d}-dimensional latent space, any {M} independent directions rebuild the "
                     "latents exactly, so these figures are 1 for every set and say nothing; the trees below compare "
                     "the concepts with random directions instead.")
    elif aff is not None:
        c, r = aff["concepts"], aff["random"]
        if c < r["median"]:
            lines.append(f"These {M} concepts explain the clusters less than {M} random directions do (completeness "
                         f"{c:.2f} against a median of {r['median']:.2f}): as a set they are a poor basis for "
                         "explaining this clustering.")
        elif c > r["high"]:
            lines.append(f"These {M} concepts explain the clusters better than every one of {r['n']} draws of {M} "
                         f"random directions ({c:.2f} against at most {r['high']:.2f}).")
        else:
            lines.append(f"These {M} concepts explain the clusters about as well as {M} random directions (completeness "
                         f"{c:.2f}; random {r['low']:.2f}–{r['high']:.2f}).")
        if c > 1:
            lines.append("A value above 1: the rebuilt latents agree with the reference more often than the latents "
                         "themselves do under the head, which happens where the head's rule and the reference labels "
                         "differ (a clustering fitted on a sample, or restarts).")
    if art.tree_baseline:
        b = art.tree_baseline
        r = b["random"]
        lines.append(f"A CART tree of {b['n_leaves']} leaves agrees with the reference at ARI {b['concepts']:.2f} on the "
                     f"concepts, {r['median']:.2f} (median; {r['low']:.2f}–{r['high']:.2f}) on {M} random directions "
                     f"and {b['principal']:.2f} on the top {M} principal directions.")
    for row, imp in (art.importance or {}).items():
        ranked = [(n, v) for n, v in sorted(imp.items(), key=lambda kv: -kv[1]) if round(v, 2) != 0]
        shown = ", ".join(f"{n} {v:.2f}" for n, v in ranked[:max_concepts])
        zero = [n for n in imp if n not in dict(ranked)]
        if len(ranked) > max_concepts:
            shown += f", … {len(imp) - max_concepts} more"
        elif zero:
            shown += (", " if shown else "") + (", ".join(f"{n} 0" for n in zero) if len(zero) <= 3
                                                 else f"the other {len(zero)} 0" if shown else f"all {len(zero)} 0")
        lines.append(f"Concept importance for {row} (drop in agreement with the reference when the concept is "
                     f"shuffled): {shown}")
    return lines
