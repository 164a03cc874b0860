"""report.html: one self-contained page, rendered in headless Chromium without console errors."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_digits

from pipeline.app.report.html import feature_summary, render_report, tree_view
from pipeline.trees.tree import ExplanationTree

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|@import|url\(\s*["']?(?:https?:)?//""", re.I)


def digits_report() -> str:
    digits = load_digits()
    X, y = digits.data[:300], digits.target[:300]
    t = ExplanationTree(64, [f"pixel {j}" for j in range(64)])
    left, right = t.split(0, 36, 0.5, left_label=0)
    t.split_oblique(right, {21: 1.0, 42: -0.5, 10: 0.25, 3: 0.1, 60: 0.05}, 4.0, left_label=1, right_label=2)
    ref = t.predict(X)
    img_view = tree_view("mmdt", "mmdt", t, X, ref, y, [str(k) for k in range(10)], kind="image",
                         data=digits.images[:300], dataset="digits", ari=0.5)
    tab_view = tree_view("cart", "cart", t, X, ref, y, kind="tabular", data=X, data_feature_names=t.feature_names)
    txt_view = tree_view("tao", "tao", t, X, ref, kind="text", data=[f"document <{i}> & more" for i in range(300)])
    from pipeline.app.report.concept_run import concept_frame, concept_legend

    cav = [{"concept": "loop", "score": 0.91, "ci_low": 0.88, "ci_high": 0.94, "n_positives": 50, "n_negatives": 50,
            "tracks": 0.62, "tracks_fit": 0.64, "transfer": "tracking", "transfer_value": 0.62}]
    cf = pd.DataFrame({"method": ["tgt"], "from": [0], "to": [1], "k": [2], "correctness": [0.9], "coverage": [0.8],
                       "explanation": ["+1.0 loop"]})
    results = pd.DataFrame({"explainer": ["reference", "mmdt"], "ari": [1.0, 0.12345], "n_leaves": [3, 3]})
    return render_report("digits: concept trees", {"dataset": {"name": "digits"}, "explainer": {"mmdt": {}},
                                                   "seed": 0}, results, [img_view, tab_view, txt_view],
                         concept_table=concept_frame(cav), concept_legend=concept_legend(measured=True),
                         scatter_svg=img_view.svg, counterfactuals=cf, counterfactual_svgs=[img_view.svg])


def test_report_is_one_self_contained_page():
    page = digits_report()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and not EXTERNAL.search(page)
    assert page.count('<section class="tree"') == 3 and page.count("<svg") >= 5
    assert "data:image/png;base64," in page  # thumbnails inline
    assert "document &lt;7&gt; &amp; more" in page or "document &lt;" in page  # text snippets, escaped
    assert "difference (SD)" in page  # feature summaries for tables
    assert "0.91 [0.88–0.94]" in page and "ρ 0.62 (fit 0.64)" in page  # the concept table: accuracy, transfer
    assert "0.123" in page and "0.12345" not in page  # results to 3 decimals
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert "+ 2 more" not in page and any("pixel 60" in svg for svg in svgs)  # figures list every term too
    rules = re.findall(r'<ol class="rules">(.*?)</ol>', page)
    assert rules and all("more" not in r for r in rules) and "0.05·pixel 60" in rules[0]  # the rules list every term
    assert "MMDT on digits: 3 leaves, depth 2, ARI 0.500 vs ground truth" in page
    # the "examples per leaf" boxes carry the rules' numbers (1-3), not node ids (1, 3, 4): issue 36 item 7
    boxes = re.findall(r'<div class="rule">(rule \d+|leaf \d+):', page)
    assert boxes == ["rule 1", "rule 2", "rule 3"] * 3


def test_feature_summary_orders_by_standardised_difference():
    data = np.array([[0.0, 10.0], [0.0, 20.0], [1.0, 30.0], [1.0, 40.0]])
    df = feature_summary(data, np.array([2, 3]), ["a", "b"], top=2)
    assert list(df["feature"]) == ["a", "b"]
    assert df["difference (SD)"].tolist() == pytest.approx([1.0, 10 / np.std([10, 20, 30, 40])])


def find_browser() -> str | None:
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


def render(browser: str, page, tmp_path, *extra) -> tuple[str, list[str]]:
    """(DOM after load, console messages) of ``page`` opened from disk in headless Chromium."""
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    proc = subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *extra, "--dump-dom",
                           path.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


@pytest.fixture(scope="module")
def browser():
    found = find_browser()
    if found is None:
        pytest.skip("no Chromium found (looked for " + ", ".join(BROWSERS) + "); `make install` installs Debian's "
                    "chromium where apt-get is available, or run `apt-get install -y chromium`")
    return found


def test_console_check_catches_errors(browser, tmp_path):
    """The check itself works: a page with a script error is caught."""
    _, console = render(browser, "<!DOCTYPE html><p>x</p><script>nosuchfn()</script>", tmp_path)
    assert any("nosuchfn" in line for line in console)


def test_report_renders_in_headless_chromium(browser, tmp_path):
    dom, console = render(browser, digits_report(), tmp_path)
    assert console == []
    tree = dom[dom.index('<section class="tree" id="tree-mmdt"'):]
    assert "<svg" in tree[:tree.index("</section>")]
    assert re.search(r"<li>[^<]*→ cluster 1 · \d+ points · 100% pure · mostly", tree)


def test_a_runs_report_renders_in_headless_chromium(browser, tmp_path):
    """`python -m pipeline dataset=iris explainer=[mmdt,cart]` (composed): report.html beside the results."""
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    out = tmp_path / "run"
    run(compose_config([f"paths.output_dir={out}", f"paths.cache_dir={tmp_path / 'cache'}",
                        f"paths.models_dir={tmp_path / 'models'}", "dataset=iris", "explainer=[mmdt,cart]",
                        "encoder=identity", "concepts=none", "clustering=gmm", "report.summary=false"]))
    for name in ("report.html", "figures/mmdt.svg", "figures/mmdt.pdf", "figures/cart.png", "trees/mmdt.dot"):
        assert (out / name).stat().st_size > 0, name
    rules = (out / "trees" / "cart.rules.txt").read_text(encoding="utf-8")
    assert "% pure · mostly \"setosa\"" in rules
    dom, console = render(browser, (out / "report.html").read_text(encoding="utf-8"), tmp_path)
    assert console == []
    assert dom.count('<section class="tree"') == 2 and "MMDT on iris: 3 leaves" in dom and "<svg" in dom


@pytest.mark.slow
def test_a_discovered_concepts_report_renders_in_headless_chromium(browser, tmp_path):
    """`concepts=discovered` on digits pixels (NMF): its own page title, display names, the discovered
    concepts shown by their top examples with their association, exact percentile rules."""
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    out = tmp_path / "run"
    run(compose_config([f"paths.output_dir={out}", f"paths.cache_dir={tmp_path / 'cache'}",
                        f"paths.models_dir={tmp_path / 'models'}", "dataset=digits", "dataset.n_samples=300",
                        "encoder=identity", "clustering=gmm", "concepts=discovered", "concepts.params.n_concepts=6",
                        "explainer=[concept_mmdt,concept_cart]", "report.summary=false"]))
    for name in ("figures/concept_cart.column.pdf", "figures/concept_cart.wide.png"):
        assert (out / name).stat().st_size > 0, name
    dom, console = render(browser, (out / "report.html").read_text(encoding="utf-8"), tmp_path)
    assert console == []
    assert "<title>Concept trees (discovered concepts): digits</title>" in dom
    assert "Concept-CART on digits" in dom and "Concept-MMDT on digits" in dom
    section = dom[dom.index('<h2 id="discovered">'):]
    assert section.count('alt="example expressing') == 6 * 8  # 8 top examples per concept
    assert re.search(r"≈ \w+, AUC \.\d\d", section)  # "≈ 3, AUC .91"
    rules = re.findall(r'<ol class="rules">(.*?)</ol>', dom, re.S)
    assert rules and any(re.search(r"in (top|bottom) [\d.]+%", r) for r in rules)


def test_a_cav_report_shows_probabilities_and_boundaries(browser, tmp_path):
    """A concept run with calibrated CAVs: rules in P(concept), the CAV table's own boundary column."""
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    out = tmp_path / "run"
    run(compose_config([f"paths.output_dir={out}", f"paths.cache_dir={tmp_path / 'cache'}",
                        f"paths.models_dir={tmp_path / 'models'}", "dataset=digits", "dataset.n_samples=300",
                        "encoder=identity", "clustering=gmm", "concepts=mnist_geometric", "cav.params.n_repeats=2",
                        "cav.params.cv=2", "explainer=[concept_mmdt,concept_cart]", "report.summary=false",
                        "report.figures=false"]))
    dom, console = render(browser, (out / "report.html").read_text(encoding="utf-8"), tmp_path)
    assert console == []
    assert "<title>Concept trees (mnist_geometric): digits</title>" in dom and "Concepts and their tests" in dom
    assert "boundary P(c)" in (out / "concepts" / "cavs.csv").read_text()  # each CAV's own boundary
    rules = re.findall(r'<ol class="rules">(.*?)</ol>', dom, re.S)
    assert rules and all("P(" in r for r in rules)
