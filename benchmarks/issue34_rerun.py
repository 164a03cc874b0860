"""Issue 48's Check: issue 34's documented runs again, with a fresh stage cache (no stale entry can print an
old table), each run's console output into benchmarks/results/issue34_check/issue48/<name>.txt.

    python benchmarks/issue34_rerun.py                 # every run (~40 min on 2 cores: EfficientNet on 23,000 images)
    python benchmarks/issue34_rerun.py spam wine       # some

The commands are those of benchmarks/results/issue34_check/COMMANDS.txt, plus the discovered concepts of the
documented ``dataset=digits concepts=discovered`` run and today's default run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "issue34_check" / "issue48"
RUNS = {
    "default_mnist": [],
    "spam": ["dataset=spam_assassin", "dataset.n_samples=600", "encoder=sbert", "clustering=gmm",
             "concepts=email_topics", "explainer=[concept_mmdt,concept_cart]"],
    "wine": ["dataset=files", "dataset.path={wine}", "dataset.labels=cultivar", "explainer=[mmdt,cart]"],
    "fmnist679": ["dataset=fashion_mnist", "dataset.classes=[6,7,9]", "encoder=efficientnet_lite0", "clustering=gmm",
                  "concepts=fashion_attributes", "explainer=[concept_mmdt,concept_cart]"],
    "disc679": ["dataset=fashion_mnist", "dataset.classes=[6,7,9]", "encoder=efficientnet_lite0", "clustering=gmm",
                "concepts=discovered", "explainer=[concept_mmdt,concept_cart]"],
    "fmnist5": ["dataset=fashion_mnist", "dataset.classes=[1,3,4,6,8]", "dataset.n_samples=5000",
                "encoder=efficientnet_lite0", "clustering=gmm", "concepts=fashion_attributes",
                "explainer=[concept_mmdt,concept_cart]"],
    "discspam": ["dataset=spam_assassin", "dataset.n_samples=600", "encoder=sbert", "clustering=gmm",
                 "concepts=discovered", "explainer=[concept_mmdt,concept_cart]"],
    "smalltext": ["dataset=files", "dataset.path=examples/small_text/texts.csv", "dataset.text_column=text",
                  "dataset.labels=topic", "encoder=sbert", "concepts=examples",
                  "concepts.path=examples/small_text/concepts", "explainer=[concept_mmdt,concept_cart]"],
    "discdigits": ["dataset=digits", "concepts=discovered", "concepts.params.n_concepts=5"],
    "digits": ["dataset=digits"],  # issue 48's check: the completeness table of `dataset=digits` (measured digits)
}


def main(names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wine = Path(tmp) / "wine.csv"
        from sklearn.datasets import load_wine

        load_wine(as_frame=True).frame.rename(columns={"target": "cultivar"}).to_csv(wine, index=False)
        cache = Path(tmp) / "cache"  # fresh: nothing stale
        for name in names:
            args = [a.format(wine=wine) for a in RUNS[name]]
            cmd = [sys.executable, "-m", "pipeline", f"paths.cache_dir={cache}", f"paths.models_dir={ROOT / 'models'}",
                   f"paths.log_dir={Path(tmp) / 'logs'}", "offline=true", "report.figures=false", *args]
            t = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ,
                                                                                     "PIPELINE_THREADS": "2"})
            took = time.perf_counter() - t
            text = (f"# python -m pipeline {' '.join(args)}\n# {took:.0f} s, load {os.getloadavg()[0]:.1f}, exit "
                    f"{proc.returncode}, fresh cache\n\n{proc.stdout}")
            if proc.returncode:
                text += "\n" + proc.stderr[-4000:]
            (OUT / f"{name}.txt").write_text(text)
            print(f"{name}: exit {proc.returncode}, {took:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(RUNS))
