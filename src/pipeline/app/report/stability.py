"""The reference clustering's stability in words (issue 50, item 3): which of the clusters the
rules end in the restarts found again, and whether that warrants a warning. Said under the
console's results table (:mod:`pipeline.app.report.summary`) and in report.html alike."""

from __future__ import annotations


def listed(labels) -> str:
    """``[1, 2, 3]`` as "1, 2 and 3"."""
    labels = [str(c) for c in labels]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def _found_by(groups, n: int, method: str | None = None) -> str:
    """``[(k, clusters)]`` as "clusters 3 and 5 were found by all 3, 0 by 2 [of the GMM's 3 restarts]"."""
    out = []
    for i, (k, these) in enumerate(groups):
        head = (f"cluster{'s' * (len(these) > 1)} {listed(these)} {'were' if len(these) > 1 else 'was'} found by "
                if i == 0 else f"{listed(these)} by ")
        out.append(head + (f"all {n}" if k == n else str(k)))
    return ", ".join(out) + (f" of the {method}'s {n} restarts" if method else "")


def stability_text(stability: dict | None, method: str = "GMM") -> tuple[str | None, bool]:
    """What differs between the reference clustering's restarts, for the explanation: by how many
    restarts each kept cluster (each cluster the rules end in) was found (a cluster of that restart
    with a Jaccard index of at least :data:`pipeline.clustering.FOUND_AGAIN` with it), and what the
    ``stability`` figure of the results table is (mean ARI of the kept restart with the others).

    Returns ``(sentence, warn)``: ``warn`` when some kept cluster was found by no more than half of
    the restarts (the kept one counted), so that another seed's restarts may well end elsewhere and
    the rules ending in it describe another group. On the four documented runs and 11 seeds
    (benchmarks/restart_seeds.py) it warned exactly where other seeds kept another partition.
    (None, False) without restarts to compare."""
    from pipeline.clustering import FOUND_AGAIN

    stability = stability or {}
    jaccard, clusters, kept = stability.get("cluster_jaccard"), stability.get("clusters"), stability.get("kept_ari")
    if not jaccard or not clusters or kept is None:
        return None, False
    n = len(jaccard[0]) + 1  # restarts, the kept one included
    found = {c: 1 + sum(float(v) >= FOUND_AGAIN for v in row) for c, row in zip(clusters, jaccard)}
    groups = [(k, these) for k in range(n, 0, -1) if (these := [c for c in clusters if found[c] == k])]
    how = (f"a restart finds a cluster when one of its clusters has a Jaccard index of at least {FOUND_AGAIN} with "
           f"it; stability {kept:.2f}: mean ARI of the kept restart with the others")
    few = [(k, these) for k, these in groups if k <= n / 2]
    if not few:
        text = (f"All {len(clusters)} clusters were found by each of the {method}'s {n} restarts" if len(groups) == 1
                else _found_by(groups, n, method))
        text = text[0].upper() + text[1:]
        return f"{text} ({how}): each cluster the rules end in was found by most restarts.", False
    lost = [c for _, these in few for c in these]
    text = _found_by(few, n, method) + (" (the kept one)" if few == [(1, lost)] else "")
    text += (f", so with another seed the rules ending in {'it' if len(lost) == 1 else 'them'} may describe "
             f"{'another group' if len(lost) == 1 else 'other groups'}")
    rest = [g for g in groups if g[0] > n / 2]
    text += (f"; {_found_by(rest, n)}" if rest else "") + f" ({how})."
    return (text + " More restarts (clustering.params.n_init=10) or another clustering make the kept partition "
            "depend less on the seed (docs/pipeline.md)."), True
