"""Checking a tree document before it is trusted, and Graphviz (DOT) source for a tree.

``check_document`` turns every way a JSON tree can be wrong (truncated text, missing keys,
feature or child indices out of range, a child shared by two parents, a cycle) into one
``InvalidInputError`` saying what and where, instead of a late IndexError at predict time.
"""

from __future__ import annotations

import json
import math

from pipeline.validation import InvalidInputError

_HOW = "re-export the tree with ExplanationTree.to_json() or pass the trees/<row>.json file a run wrote."


def parse_json(text) -> dict:
    """``json.loads`` with a clear error for truncated or invalid text."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise InvalidInputError(f"from_json expects the JSON text (str), got {type(text).__name__}; "
                                "use ExplanationTree.from_dict for an already-parsed dict.")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"the tree JSON is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                                f"{exc.colno}; a truncated file?): {_HOW}") from None
    except RecursionError:  # a tree document is flat (a list of nodes): deep nesting is never one
        raise InvalidInputError("the tree JSON nests arrays or objects too deeply to be an explanation-tree "
                                f"document (its nodes form a flat list): {_HOW}") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"the tree JSON must be an object, got {type(data).__name__}: {_HOW}")
    return data


def _bad(where: str, what: str):
    return InvalidInputError(f"invalid explanation-tree document: {where} {what}; {_HOW}")


def _index(node: dict, key: str, n: int, bound: int, where: str) -> int:
    v = node.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < bound:
        raise _bad(where, f"has {key}={v!r}, which must be an integer in [0, {bound})")
    return v


_INT64 = (-2**63, 2**63 - 1)


def _number(v, where: str, what: str) -> float:
    try:
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    except OverflowError:  # an integer beyond float64's range
        ok = False
    if not ok:
        shown = repr(v) if len(repr(v)) < 40 else repr(v)[:30] + "..."
        raise _bad(where, f"has {what}={shown}, which must be a finite number")
    return float(v)


def _check_neighbours(node: dict, t: float, where: str) -> None:
    """The optional ``neighbours`` [lo, hi] of a cut (the training values nearest it; null for an
    empty side) and, on an oblique node, ``weight_digits``: lo <= threshold < hi on an axis cut."""
    if "neighbours" not in node:
        if "weight_digits" in node:
            raise _bad(where, "has weight_digits without neighbours")
        return
    near = node["neighbours"]
    if not isinstance(near, list) or len(near) != 2:
        raise _bad(where, f"has neighbours={near!r}; expected [largest value going left, smallest going right]")
    lo, hi = (None if v is None else _number(v, where, "a neighbour") for v in near)
    oblique = "weights" in node
    if oblique:
        digits = node.get("weight_digits")
        if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 17:
            raise _bad(where, f"has weight_digits={digits!r}, which must be an integer in [1, 17]")
    elif (lo is not None and lo > t) or (hi is not None and hi <= t):
        raise _bad(where, f"has neighbours {near!r} that do not lie on either side of its threshold {t!r}")
    if lo is not None and hi is not None and lo >= hi:
        raise _bad(where, f"has neighbours {near!r}; the left one must be smaller")


def check_document(data: dict, format_version: int) -> None:
    """Raise InvalidInputError unless ``data`` is a well-formed explanation-tree document."""
    if not isinstance(data, dict) or data.get("format") != "explanation-tree":
        raise InvalidInputError("not an explanation-tree document (missing 'format': 'explanation-tree').")
    version = data.get("version", 0)
    if not isinstance(version, int) or version > format_version:
        raise InvalidInputError(f"tree format version {version!r} is newer than this library supports "
                                f"({format_version}); upgrade the pipeline package.")
    d = data.get("n_features")
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise _bad("the document", f"has n_features={d!r}, which must be a positive integer")
    names = data.get("feature_names")
    if names is not None and (not isinstance(names, list) or len(names) != d):
        raise _bad("the document", f"has feature_names of length {len(names) if isinstance(names, list) else '?'} "
                                   f"for n_features={d}")
    nodes = data.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise _bad("the document", "has no 'nodes' list")
    parent: dict[int, int] = {}
    for n, node in enumerate(nodes):
        where = f"node {n}"
        if not isinstance(node, dict):
            raise _bad(where, f"is {type(node).__name__}, not an object")
        if "label" in node:
            label = node["label"]
            if isinstance(label, bool) or not isinstance(label, int) or not _INT64[0] <= label <= _INT64[1]:
                shown = repr(label) if len(repr(label)) < 40 else repr(label)[:30] + "..."
                raise _bad(where, f"has label={shown}, which must be an integer in int64's range "
                                  f"[{_INT64[0]}, {_INT64[1]}]")
            continue
        if "weights" in node:
            w = node["weights"]
            if not isinstance(w, list) or not w:
                raise _bad(where, "has an empty or malformed 'weights' list")
            for item in w:
                if not isinstance(item, list) or len(item) != 2:
                    raise _bad(where, f"has weight entry {item!r}; expected [feature, weight]")
                j = item[0]
                if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < d:
                    raise _bad(where, f"weights feature index {j!r} out of range [0, {d})")
                _number(item[1], where, "a weight")
        else:
            _index(node, "feature", n, d, where + " (feature index)")
        t = _number(node.get("threshold"), where, "threshold")
        _check_neighbours(node, t, where)
        for key in ("left", "right"):
            child = _index(node, key, n, len(nodes), where)
            if child == 0 or child in parent:
                raise _bad(where, f"points {key} to node {child}, which is the root or already has a parent "
                                  f"(node {parent.get(child, 'root')})")
            parent[child] = n
    # Every node must hang from the root (no detached pieces, hence no cycles).
    seen, stack = set(), [0]
    while stack:
        n = stack.pop()
        seen.add(n)
        if "label" not in nodes[n]:
            stack += [nodes[n]["left"], nodes[n]["right"]]
    if len(seen) != len(nodes):
        raise _bad(f"nodes {sorted(set(range(len(nodes))) - seen)[:5]}", "are not reachable from the root")


def dot_quote(text: str) -> str:
    """A DOT double-quoted string (backslashes and quotes escaped, newlines as ``\\n``)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(nodes: list[tuple[int, str, bool]], edges: list[tuple[int, int, str]], title: str | None = None) -> str:
    """DOT source: ``nodes`` are (id, label, is_leaf), ``edges`` (parent, child, label)."""
    lines = ["digraph explanation_tree {",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];',
             '  edge [fontname="Helvetica", fontsize=9];']
    if title:
        lines.append(f"  labelloc=t; label={dot_quote(title)};")
    for n, label, leaf in nodes:
        colour = "#e8f4e8" if leaf else "#eef2fa"
        lines.append(f"  n{n} [label={dot_quote(label)}, fillcolor=\"{colour}\"];")
    for a, b, label in edges:
        lines.append(f"  n{a} -> n{b} [label={dot_quote(label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
