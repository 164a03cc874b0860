"""Cold vs warm (cached) pipeline runs of the default config (digits -> GMM -> MMDT + CART).

    python benchmarks/pipeline_cache.py [--repeats 3]

Each cold run uses a fresh cache directory; each warm run reuses the last cold run's cache.
Timings are in-process (``run(cfg)``, no interpreter start-up), medians over ``--repeats``;
the ratio compares the two inside one process on the same data.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run


def timed_run(cache: Path, out: Path, overrides: list[str]) -> float:
    cfg = compose_config([f"paths.cache_dir={cache}", f"paths.output_dir={out}", "report.summary=false",
                          "report.figures=false", *overrides])
    start = time.perf_counter()
    run(cfg)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cold = [timed_run(tmp / f"cache{i}", tmp / f"cold{i}", args.overrides) for i in range(args.repeats)]
        warm = [timed_run(tmp / f"cache{args.repeats - 1}", tmp / f"warm{i}", args.overrides)
                for i in range(args.repeats)]
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"default pipeline ({' '.join(args.overrides) or 'no overrides'}), {args.repeats} repeats")
    print(f"cold (empty cache): median {c:.2f} s  {[round(x, 2) for x in cold]}")
    print(f"warm (all stages cached): median {w:.2f} s  {[round(x, 2) for x in warm]}")
    print(f"cold / warm: {c / w:.1f}x")


if __name__ == "__main__":
    main()
