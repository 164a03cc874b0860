"""The architecture's numbers (issue 23): import cycles counting every import, arrows that run
back up against the stated layer order, the package modules a plain iris run imports, and the
longest function, and the modules' sizes (how many, median and largest lines, the application's
share, the modules loose at the top of ``app/``).

Every import counts: top-of-file, inside functions, under ``try``/``if``, and
``importlib.import_module("<literal>")``. A module's imports of its own parent package are
left out (``pipeline.trees.cart`` importing ``pipeline.trees`` runs ``pipeline/trees/__init__``
first anyway, so it cannot close a loop the interpreter would notice); everything else counts.

    python benchmarks/architecture.py                     # this checkout -> benchmarks/results/architecture.{json,md}
    python benchmarks/architecture.py --src /tmp/before/src --label before --no-write

The layer order (top first) is :data:`LAYERS`; ``tests/test_layers.py`` asserts zero cycles
and zero arrows back up with the same functions, and import-linter's layers contract
(``.importlinter``) states the same order.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
OUT = HERE.parent / "results" / "architecture.json"

#: The dependency direction, top first: a module may import modules of its own layer or of
#: layers below it. Each entry is a tuple of module prefixes forming one layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pipeline.__main__", "pipeline.collect", "pipeline.explain"),
    ("pipeline.app", "pipeline.app.console", "pipeline.app.sweep_command", "pipeline.app.explain_run"),
    # the application's rooms, top first (import-linter's app-rooms contract in pyproject.toml)
    ("pipeline.app.running",),
    ("pipeline.app.explainer",),
    ("pipeline.app.stages",),
    ("pipeline.app.report",),
    ("pipeline.app.concept_sets",),
    ("pipeline.app.execution",),
    ("pipeline.app.startup",),
    ("pipeline.app.data",),
    ("pipeline.app.models",),
    ("pipeline.app.stores",),
    ("pipeline.app.configuration",),
    ("pipeline.study", "pipeline.concept_quality"),
    ("pipeline.counterfactuals",),
    ("pipeline.encoders",),
    ("pipeline.metrics", "pipeline.cluster_heads"),
    ("pipeline.clustering",),
    ("pipeline.trees",),
    ("pipeline.concepts",),
    ("pipeline.threads", "pipeline.progress"),
    ("pipeline.validation",),
    ("pipeline",),
)


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_modules(src: Path) -> dict[str, Path]:
    pkg = src / "pipeline"
    return {module_name(p, src): p for p in sorted(pkg.rglob("*.py"))
            if p.relative_to(pkg).parts[0] != "conf"}


def imports_of(tree: ast.AST, name: str, is_pkg: bool) -> list[tuple[int, str]]:
    """(line, module) of every import anywhere in ``tree``: ``import m``, ``from m import x``
    (both ``m`` and ``m.x``, as x may be a submodule), relative imports resolved, and
    ``importlib.import_module("literal")`` / ``__import__("literal")``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if fname in ("import_module", "__import__"):
                out.append((node.lineno, node.args[0].value))
    return out


def import_graph(src: Path) -> dict[str, set[str]]:
    """Every import between the package's modules (see the module docstring)."""
    names = package_modules(src)
    graph: dict[str, set[str]] = {n: set() for n in names}
    for name, path in names.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for _, mod in imports_of(tree, name, path.name == "__init__.py"):
            while mod and mod not in names:
                mod = mod.rpartition(".")[0]
            if mod and mod != name and not name.startswith(mod + "."):
                graph[name].add(mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each holds at least one
    cycle), sorted; an empty list means the graph has no cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


#: The package root's one name from the application layer, ``from pipeline import ConceptExplainer``
#: (docs/explain.md), is imported lazily inside ``pipeline/__init__``'s ``__getattr__``: the root
#: module is a door like the entry points (nothing imports it but its own submodules, which are
#: left out as parent-package imports), so it sits in their layer.
FACADE = "pipeline"


def layer_of(module: str) -> int:
    if module == FACADE:
        return 0
    best, depth = len(LAYERS) - 1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and p.count(".") > depth:
                best, depth = i, p.count(".")
    return best


def back_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a lower layer into a higher one (against the stated direction)."""
    return sorted((a, b) for a, targets in graph.items() for b in targets
                  if b != "pipeline" and layer_of(b) < layer_of(a))


#: the compiled kernels (their rewrite for speed belongs to another issue), reported apart
KERNELS = ("pipeline.trees._kernels", "pipeline.trees._clique_kernels", "pipeline.trees._graph_kernels",
           "pipeline.trees._row_kernels", "pipeline.trees._apply_kernels", "pipeline.trees._bin_kernels",
           "pipeline.trees._imm_kernels", "pipeline.trees._spex_sweeps")


def longest_function(src: Path, skip: tuple[str, ...] = ()) -> tuple[int, str]:
    """(lines, where) of the longest function or method of the package (modules in ``skip`` left out)."""
    best = (0, "")
    for name, path in package_modules(src).items():
        if name in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > best[0]:
                    best = (n, f"{name}.{node.name} ({path.relative_to(src)}:{node.lineno})")
    return best


def module_sizes(src: Path) -> dict:
    """Lines of the package's modules (``__init__`` files left out): how many, the median, the
    largest; the application's share of the lines and the modules loose at the top of ``app/``."""
    import statistics

    sizes = {name: len(path.read_text().splitlines()) for name, path in package_modules(src).items()
             if path.name != "__init__.py"}
    largest = max(sizes, key=sizes.get)
    app = sum(n for name, n in sizes.items() if name.startswith("pipeline.app."))
    loose = sorted(p.stem for p in (src / "pipeline" / "app").glob("*.py") if p.name != "__init__.py")
    return {"module_files": len(sizes), "module_lines_median": statistics.median(sizes.values()),
            "module_lines_largest": sizes[largest], "largest_module": largest,
            "app_share_of_lines": round(app / sum(sizes.values()), 3),
            "app_top_level_modules": len(loose), "app_top_level": loose}


def markdown(result: dict) -> str:
    """The numbers as a Markdown table (before / after when both were measured)."""
    cols = [k for k in ("before", "after") if k in result]
    rows = [("package modules (import graph)", "modules"), ("module files (no `__init__`)", "module_files"),
            ("median module lines", "module_lines_median"), ("largest module lines", "module_lines_largest"),
            ("largest module", "largest_module"), ("app/ share of the lines", "app_share_of_lines"),
            ("modules loose at the top of app/", "app_top_level_modules"), ("import edges", "import_edges"),
            ("import cycles", "import_cycles"), ("arrows back up the layers", "arrows_back_up"),
            ("longest function (lines)", "longest_function_lines"),
            ("longest function outside the kernels", "longest_function_outside_kernels_lines"),
            ("package modules an iris run imports", "iris_run_package_modules")]
    head = "| | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols) + "\n"
    body = "".join(f"| {label} | " + " | ".join(str(result[c].get(key, "")) for c in cols) + " |\n"
                   for label, key in rows)
    load = ", ".join(f"{v:.2f}" for v in result["load_average"])
    note = ("\nArrows back up are counted against this checkout's `LAYERS`. Code from before the application's "
            "rooms has its modules loose at the top of `app/`, which fall in the application's top layer there: its "
            "count is the imports from `app/`'s sub-packages into those loose modules.\n" if "before" in result else "")
    return ("# Architecture numbers\n\n`python benchmarks/architecture.py` (load average " + load + ")\n\n"
            + head + body + note)


def iris_run_modules(src: Path) -> list[str]:
    """The ``pipeline`` modules in ``sys.modules`` at the end of ``python -m pipeline dataset=iris``."""
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp) / "modules.json"
        code = (
            "import atexit, json, runpy, sys\n"
            f"atexit.register(lambda: open({str(listing)!r}, 'w').write(json.dumps(sorted(m for m in sys.modules "
            "if m == 'pipeline' or m.startswith('pipeline.')))))\n"
            f"sys.argv = ['pipeline', 'dataset=iris', 'paths.output_dir={tmp}/out', 'paths.cache_dir={tmp}/cache', "
            f"'hydra.run.dir={tmp}/hydra']\n"
            "runpy.run_module('pipeline', run_name='__main__', alter_sys=True)\n"
        )
        env = {**os.environ, "PYTHONPATH": str(src)}
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp)
        if proc.returncode or not listing.exists():
            raise SystemExit(f"iris run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        return json.loads(listing.read_text())


def measure(src: Path, run: bool = True) -> dict:
    graph = import_graph(src)
    found = cycles(graph)
    back = back_arrows(graph)
    length, where = longest_function(src)
    out = {
        "modules": len(graph),
        "import_edges": sum(len(v) for v in graph.values()),
        "import_cycles": len(found),
        "cycles": found,
        "arrows_back_up": len(back),
        "back_arrows": [f"{a} -> {b}" for a, b in back],
        "longest_function_lines": length,
        "longest_function": where,
    }
    length, where = longest_function(src, skip=KERNELS)
    out.update(longest_function_outside_kernels_lines=length, longest_function_outside_kernels=where)
    out.update(module_sizes(src))
    if run:
        mods = iris_run_modules(src)
        out["iris_run_package_modules"] = len(mods)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    parser.add_argument("--before", type=Path, default=None,
                        help="a src/ folder of the code before (e.g. git archive 310c72b src | tar -x -C /tmp/before)")
    parser.add_argument("--no-run", action="store_true", help="skip the iris run")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    result = {"load_average": os.getloadavg(), "layers": [list(x) for x in LAYERS]}
    if args.before is not None:
        result["before"] = measure(args.before.resolve(), run=not args.no_run)
    result["after"] = measure(args.src.resolve(), run=not args.no_run)
    text = json.dumps(result, indent=1)
    print(text)
    if not args.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text + "\n")
        OUT.with_suffix(".md").write_text(markdown(result))


if __name__ == "__main__":
    main()
