"""Verifying a saved explainer before anything of it is used (docs/explain.md, "What is checked").

A bundle is a folder someone may send you, so nothing in it is trusted until it is checked:

1. **Its files.** ``SHA256SUMS`` is read in the formats ``sha256sum`` writes (``<hex>  <file>``,
   binary-mode ``<hex> *<file>``, ``--tag`` lines, upper-case hex, CRLF line ends, escaped
   names); every name it lists stays inside the folder (no absolute path, no ``..``, no symlink,
   no device or pipe); every file present is listed, every listed file present, each with its
   sha256. A ``SHA256SUMS`` cut short leaves files unlisted, which is refused.
2. **explainer.json.** Valid JSON; every field the reader uses present with its type and size;
   the digest of its own content (``content_sha256``, format version 2) unchanged, so an edit is
   refused even when ``SHA256SUMS`` was recomputed to match; it names every listed file.
3. **arrays.npz.** Only the arrays a bundle holds, each of its shape and dtype, finite, mixture
   weights summing to 1, covariances symmetric positive definite, percentile tables sorted;
   each array's sha256 equal to the one ``explainer.json`` records of it.
4. **The trees.** Each ``trees/<row>.json`` a valid tree with the name, feature names, leaf
   count, depth and digest (of its cuts and labels: its rules exactly) that ``explainer.json``
   records, and the printed rules and tests of ``explainer.json`` at leaves and nodes it has.

Any failure is one :class:`InvalidInputError` paragraph naming the file, the field and what is
wrong. These checks catch damage, edits and files mixed up between runs; they cannot tell who
wrote a bundle whose every file and digest was rewritten consistently (no bundle is executed:
there is no pickle in it, and it names no path outside itself except the encoder checkpoint,
which is read only after its recorded sha256 matches).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np

from pipeline.cluster_heads import PREDICTORS
from pipeline.validation import InvalidInputError

FORMAT = "pipeline-explainer"
SUMS = "SHA256SUMS"
FIX = ("Restore the original file, or save the explainer again from its run (ConceptExplainer.load(<run dir>)"
       ".save(<new folder>), or rerun the pipeline).")
#: the reference predictors a bundle may name: their classes' kinds (nearest_mean: versions 1 and 2)
ASSIGN = (*(cls.kind for cls in PREDICTORS), "nearest_mean")
#: arrays computed when a bundle is used, never read from one (an older version saved it)
DERIVED = ("ref_precisions_cholesky",)
_HEX = re.compile(r"[0-9a-fA-F]{64}")
_LINE = re.compile(r"(\\?)([0-9a-fA-F]{64}) ([ *])(.+)")
_TAG = re.compile(r"(\\?)SHA256 \((.+)\) = ([0-9a-fA-F]{64})")


def problem(folder, where: str, what: str, fix: str = FIX) -> InvalidInputError:
    """``the saved explainer <folder> is refused: <where>: <what>. <fix>``, one paragraph."""
    text = f"the saved explainer {folder} is refused: {where}: {what}. {fix}"
    return InvalidInputError(" ".join(text.split()))


# ------------------------------------------------------------------ digests (the writer records them)
def canonical(value) -> bytes:
    """``value`` as canonical JSON (sorted keys, no spaces): the bytes its digests are taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def content_digest(doc: dict) -> str:
    """sha256 of ``explainer.json``'s content, without its own ``content_sha256`` field."""
    return hashlib.sha256(canonical({k: v for k, v in doc.items() if k != "content_sha256"})).hexdigest()


def tree_digest(tree) -> str:
    """sha256 of a tree's canonical document: its cuts, labels and feature names (its rules exactly)."""
    return hashlib.sha256(canonical(tree.to_dict())).hexdigest()


def array_digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()


def array_record(arrays: dict) -> dict:
    """``{name: {"shape", "dtype", "sha256"}}`` of a bundle's arrays, as ``explainer.json`` records them."""
    out = {}
    for name, value in arrays.items():
        a = np.asarray(value)
        out[name] = {"shape": list(a.shape), "dtype": a.dtype.str, "sha256": array_digest(a)}
    return out


# ------------------------------------------------------------------ 1. the files
def _unescape(name: str) -> str:
    """A name ``sha256sum`` escaped (its line starts with a backslash): ``\\\\``, ``\\n``, ``\\r``."""
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r", "\\": "\\"}.get(m.group(1), "\\" + m.group(1)), name)


def read_sums(folder: Path) -> dict[str, str]:
    """``{file: sha256 (lower case)}`` of ``SHA256SUMS``, in any format ``sha256sum`` writes."""
    path = folder / SUMS
    if not path.is_file() or path.is_symlink():
        raise InvalidInputError(f"{folder} has no {SUMS}: it is not a complete saved explainer (written by an "
                                "interrupted save?). Save it again from the run.")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise problem(folder, SUMS, f"it is not text (byte {exc.start} is not UTF-8)") from None
    listed: dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        m, tag = _LINE.fullmatch(line), _TAG.fullmatch(line)
        if m:
            escaped, digest, name = m.group(1), m.group(2), m.group(4)
        elif tag:
            escaped, name, digest = tag.groups()
        else:
            shown = line if len(line) <= 80 else line[:77] + "..."
            raise problem(folder, f"{SUMS}, line {number}",
                          f"{shown!r} is not a checksum line ('<64 hex digits>  <file>', as sha256sum writes): the "
                          "file is cut short or was edited")
        name = _unescape(name) if escaped else name
        digest = digest.lower()
        if listed.get(name, digest) != digest:
            raise problem(folder, f"{SUMS}, line {number}", f"{name} is listed twice with different checksums")
        listed[name] = digest
    return listed


def inside(folder: Path, name: str, where: str) -> Path:
    """``folder / name`` for a name a bundle gives; one that could lead outside the folder is refused."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise problem(folder, where, f"{name!r} is not a file name")
    pure = PurePosixPath(name)
    if pure.is_absolute() or re.match(r"[A-Za-z]:", name) or name.startswith("\\") or ".." in pure.parts \
            or "\\" in name:
        raise problem(folder, where, f"{name!r} points outside the bundle (an absolute path, a drive or '..'); a "
                      "saved explainer names only files inside its own folder, so it is refused. Never load a bundle "
                      "from a source you do not trust", fix="")
    path = folder / pure
    probe = folder
    for part in pure.parts:  # no symlink on the way: a link could lead out of the folder
        probe = probe / part
        if probe.is_symlink():
            raise problem(folder, where, f"{name} is a symbolic link (to {os.readlink(probe)}); a saved explainer "
                          "holds plain files only", fix="Copy the bundle with its files (cp -r, not cp -s) or save it "
                          "again from its run.")
    return path


def present_files(folder: Path) -> set[str]:
    """Every file in the bundle folder (posix names relative to it); links and special files refused."""
    out = set()
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in [*dirs, *files]:
            path = Path(root) / name
            rel = path.relative_to(folder).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise problem(folder, rel, f"a symbolic link (to {os.readlink(path)}); a saved explainer holds plain "
                              "files only", fix="Copy the bundle with its files (cp -r) or save it again from its run.")
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise problem(folder, rel, "not a regular file (a pipe, socket or device)")
            if stat.S_ISREG(mode):
                out.add(rel)
    return out


def verify_files(folder: Path) -> dict[str, str]:
    """Checks 1 (the module docstring); returns what ``SHA256SUMS`` lists."""
    from pipeline.app.stores.cache import file_digest

    listed = {}
    for name, digest in read_sums(folder).items():
        inside(folder, name, f"{SUMS} lists {name!r}")
        listed[PurePosixPath(name).as_posix()] = digest  # ./trees/a.json as sha256sum ./trees/* writes it
    for name in ("explainer.json", "arrays.npz"):
        if name not in listed:
            raise InvalidInputError(f"{folder / SUMS} does not list {name}; the bundle is incomplete or was edited. "
                                    "Save it again from the run.")
    present = present_files(folder) - {SUMS}
    for name in sorted(listed):
        if name not in present:
            raise InvalidInputError(f"the saved explainer {folder} lacks {name}, which {SUMS} lists; it was copied "
                                    "incompletely (or the file was renamed or removed). Copy the whole folder again.")
    extra = sorted(present - set(listed))
    if extra:
        shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        raise problem(folder, SUMS, f"it does not list {shown}, which the folder holds: files were added after "
                      f"saving, or {SUMS} is cut short (files left unchecked)", fix="Remove the added files, or "
                      "restore the whole SHA256SUMS, or save the explainer again from its run.")
    for name, digest in sorted(listed.items()):
        found = file_digest(folder / name)
        if found != digest:
            raise InvalidInputError(
                f"the saved explainer {folder} was modified or damaged after it was saved: {name} has sha256 "
                f"{found[:12]}... but {SUMS} records {digest[:12]}.... Explanations from it could be silently wrong, "
                "so it is refused. Restore the original file, or save the explainer again from its run "
                "(ConceptExplainer.load(<run dir>).save(<folder>)).")
    return listed


# ------------------------------------------------------------------ 2. explainer.json
class _Doc:
    """Typed reads of explainer.json's fields, each failure naming the field."""

    def __init__(self, folder: Path, doc: dict):
        self.folder, self.doc = folder, doc

    def bad(self, key: str, what: str) -> InvalidInputError:
        return problem(self.folder, f"explainer.json, field {key}", what)

    def get(self, key: str, types, optional: bool = False):
        node = self.doc
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                if optional:
                    return None
                raise self.bad(key, "is missing")
            node = node[part]
        if node is None and optional:
            return None
        names = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
                 bool: "true or false"}
        ok = isinstance(node, types) and not (isinstance(node, bool) and bool not in _tuple(types))
        if not ok:
            want = " or ".join(names.get(t, t.__name__) for t in _tuple(types))
            raise self.bad(key, f"is {_short(node)} ({type(node).__name__}), not {want}")
        return node

    def names(self, key: str, n: int | None = None, optional: bool = False) -> list | None:
        value = self.get(key, list, optional)
        if value is None:
            return None
        if not all(isinstance(v, str) for v in value):
            raise self.bad(key, "must be a list of strings")
        if n is not None and len(value) != n:
            raise self.bad(key, f"lists {len(value)} names where {n} are needed")
        return value

    def count(self, key: str, low: int = 0, optional: bool = False) -> int | None:
        value = self.get(key, int, optional)
        if value is not None and value < low:
            raise self.bad(key, f"is {value}; it must be at least {low}")
        return value


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _short(value) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list, str, int, float, bool, type(None))) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_doc(folder: Path, newest: int) -> dict:
    """``explainer.json`` parsed, its content digest and the fields the reader uses checked."""
    try:
        doc = json.loads((folder / "explainer.json").read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise problem(folder, "explainer.json", f"it is not text (byte {exc.start} is not UTF-8)") from None
    except json.JSONDecodeError as exc:
        raise problem(folder, "explainer.json", f"not valid JSON ({exc.msg}: line {exc.lineno}, column "
                      f"{exc.colno}; cut short or edited)") from None
    except RecursionError:
        raise problem(folder, "explainer.json", "nested too deeply to be a saved explainer") from None
    if not isinstance(doc, dict):
        raise problem(folder, "explainer.json", f"holds {type(doc).__name__}, not an object")
    if doc.get("format") != FORMAT or isinstance(doc.get("version"), bool) or not isinstance(doc.get("version"), int):
        raise InvalidInputError(f"{folder / 'explainer.json'} is not a saved explainer (format "
                                f"{doc.get('format')!r}, version {doc.get('version')!r}).")
    if doc["version"] > newest:
        raise InvalidInputError(f"the explainer in {folder} has format version {doc['version']}, newer than this "
                                f"version of the package reads ({newest}); upgrade the package.")
    sealed = doc["version"] >= 2 or "content_sha256" in doc
    recorded = doc.get("content_sha256")
    if sealed and (not isinstance(recorded, str) or not _HEX.fullmatch(recorded)):
        raise problem(folder, "explainer.json, field content_sha256", f"is {_short(recorded)}, not the digest of its "
                      "content that every saved explainer of format version 2 records")
    edited = sealed and content_digest(doc) != recorded.lower()
    try:  # the fields first: a field that is wrong is named, even in a document edited after saving
        check_fields(_Doc(folder, doc))
        named_files(folder, doc)
    except InvalidInputError as exc:
        if not edited:
            raise
        raise InvalidInputError(f"{exc} (explainer.json was edited after saving: its content no longer has the "
                                "digest it was saved with, field content_sha256.)") from None
    if edited:
        raise problem(folder, "explainer.json, field content_sha256",
                      "the content no longer has the digest it was saved with: a field was edited after saving "
                      f"(and {SUMS} recomputed to match, or the edit would have been caught there)")
    return doc


def check_fields(d: _Doc) -> None:
    """Every field the reader uses: present, of its type and of sizes that agree."""
    d.get("run", dict)
    spec = d.get("input", dict)
    kind = d.get("input.kind", str)
    if kind != "text":
        shape = d.get("input.shape", list)
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape):
            raise d.bad("input.shape", f"is {_short(shape)}; it must list positive integers")
        try:
            np.dtype(d.get("input.dtype", str))
        except TypeError:
            raise d.bad("input.dtype", f"{spec['dtype']!r} is not a numpy dtype") from None
        width = int(np.prod(shape)) if shape else 1
        names = d.names("input.feature_names", optional=True)
        if names is not None and len(names) != width:
            raise d.bad("input.feature_names", f"lists {len(names)} names for inputs of {width} values")
        record = d.get("input.standardized", dict, optional=True)
        if record is not None:
            for key in ("mean", "sd", "scaled"):
                values = d.get(f"input.standardized.{key}", list)
                if len(values) != width:
                    raise d.bad(f"input.standardized.{key}", f"has {len(values)} values for {width} columns")
            for j, (sd, scaled) in enumerate(zip(record["sd"], record["scaled"])):
                if scaled and not (isinstance(sd, (int, float)) and math.isfinite(sd) and sd > 0):
                    raise d.bad(f"input.standardized.sd[{j}]", f"is {_short(sd)}; a scaled column's spread must be a "
                                "positive number")
    d.get("encoder", dict)
    d.get("encoder.name", str)
    d.get("encoder.config", dict)
    m = d.count("encoder.width", 1)
    d.names("encoder.latent_names", m)
    for key in ("encoder.checkpoint", "encoder.copied", "encoder.checkpoint_portable", "encoder.model_used"):
        d.get(key, str, optional=True)
    sha = d.get("encoder.checkpoint_sha256", str, optional=True)
    if sha is not None and not _HEX.fullmatch(sha):
        raise d.bad("encoder.checkpoint_sha256", f"is {_short(sha)}, not a sha256 (64 hex digits)")
    if d.get("encoder.checkpoint", str, optional=True) and sha is None:
        raise d.bad("encoder.checkpoint_sha256", "is missing: the checkpoint could not be checked before it is read")
    d.get("reference", dict)
    d.get("reference.method", str)
    d.count("reference.n_clusters", 0)
    assign = d.get("reference.assign", str)
    if assign not in ASSIGN:
        raise d.bad("reference.assign", f"is {assign!r}; it must be one of {', '.join(ASSIGN)}")
    params = d.get("reference.params", dict, optional=True) or {}
    unknown = sorted(set(params) - {"spread"})
    if unknown:
        raise d.bad("reference.params", f"holds {', '.join(unknown)}; a saved predictor's numbers are only spread")
    spread = d.get("reference.params.spread", (int, float), optional=True)
    if spread is not None and not (math.isfinite(spread) and spread > 0):
        raise d.bad("reference.params.spread", f"is {_short(spread)}, not a positive number")
    n = len(d.names("features.names"))
    if n < 1:
        raise d.bad("features.names", "is empty; the trees cut on at least one coordinate")
    space = d.get("features.space", str)
    if space not in ("concepts", "latents"):
        raise d.bad("features.space", f"is {space!r}; it must be concepts or latents")
    if space == "latents" and n != m:
        raise d.bad("features.names", f"lists {n} coordinates, but trees on the latents cut on the encoder's {m}")
    units = d.get("features.display_units", list, optional=True)
    if units is not None and (len(units) != n or not all(u is None or isinstance(u, dict) for u in units)):
        raise d.bad("features.display_units", f"must hold one entry (an object or null) per coordinate ({n})")
    trees = d.get("trees", dict)
    for row in trees:
        key = f"trees.{row}"
        d.get(key, dict)
        d.get(f"{key}.method", str)
        d.get(f"{key}.file", str)
        d.count(f"{key}.n_leaves", 1)
        d.count(f"{key}.depth", 0)
        rules = d.get(f"{key}.rules", dict)
        for leaf, rule in rules.items():
            if not (isinstance(rule, dict) and isinstance(rule.get("text"), str)):
                raise d.bad(f"{key}.rules.{leaf}", f"is {_short(rule)}, not a rule with its text")
        tests = d.get(f"{key}.printed_tests", dict, optional=True) or {}
        for node, test in tests.items():
            _check_test(d, f"{key}.printed_tests.{node}", test)
        d.get(f"{key}.training", dict, optional=True)
    record = d.get("arrays", dict, optional=True) or {}
    for name, info in record.items():
        ok = (isinstance(info, dict) and isinstance(info.get("shape"), list) and isinstance(info.get("dtype"), str)
              and isinstance(info.get("sha256"), str))
        if not ok:
            raise d.bad(f"arrays.{name}", f"is {_short(info)}, not a record of shape, dtype and sha256")


def _check_test(d: _Doc, key: str, test) -> None:
    if not isinstance(test, dict) or test.get("kind") not in ("raw", "units", "oblique"):
        raise d.bad(key, f"is {_short(test)}, not a printed test (kind raw, units or oblique)")
    t = test.get("threshold")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise d.bad(f"{key}.threshold", f"is {_short(t)}, not a finite number")
    if test["kind"] == "oblique":
        terms = test.get("terms")
        if not isinstance(terms, list) or not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], int)
                                                  and isinstance(x[1], (int, float)) for x in terms):
            raise d.bad(f"{key}.terms", f"is {_short(terms)}, not a list of [feature, weight] pairs")
    elif isinstance(test.get("feature"), bool) or not isinstance(test.get("feature"), int):
        raise d.bad(f"{key}.feature", f"is {_short(test.get('feature'))}, not a feature index")


def named_files(folder: Path, doc: dict) -> set[str]:
    """The files ``explainer.json`` names (each inside the bundle), with explainer.json and arrays.npz."""
    out = {"explainer.json", "arrays.npz"}
    for row, info in doc["trees"].items():
        inside(folder, info["file"], f"explainer.json, field trees.{row}.file")
        out.add(PurePosixPath(info["file"]).as_posix())
    copied = doc["encoder"].get("copied")
    if copied:
        inside(folder, copied, "explainer.json, field encoder.copied")
        out.add(PurePosixPath(copied).as_posix())
        out.add(PurePosixPath(copied).with_suffix(".json").as_posix())  # its sidecar, when the checkpoint had one
    return out


def check_listed(folder: Path, doc: dict, listed) -> None:
    """Every file ``SHA256SUMS`` lists is one ``explainer.json`` names, and every file it names is there."""
    named = named_files(folder, doc)
    sidecar = {PurePosixPath(doc["encoder"]["copied"]).with_suffix(".json").as_posix()} \
        if doc["encoder"].get("copied") else set()
    missing = sorted(named - set(listed) - sidecar)
    if missing:
        raise problem(folder, "explainer.json", f"it names {', '.join(missing)}, which the bundle does not hold "
                      f"(not in {SUMS}): renamed or removed after saving", fix="Copy the whole folder again, or save "
                      "the explainer again from its run.")
    unknown = sorted(set(listed) - named)
    if unknown:
        raise problem(folder, SUMS, f"it lists {', '.join(unknown[:5])}, which explainer.json does not name: a file "
                      "added to the bundle is no part of it", fix="Remove it and its line, or save the explainer "
                      "again from its run.")


# ------------------------------------------------------------------ 3. arrays.npz
def read_arrays(folder: Path, doc: dict) -> dict:
    """``arrays.npz`` read without pickle, each array checked (:func:`check_arrays`)."""
    try:
        with np.load(folder / "arrays.npz", allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, NotImplementedError) as exc:
        what = str(exc).split("\n")[0][:160]
        raise problem(folder, "arrays.npz", f"not a readable .npz of plain arrays ({type(exc).__name__}: {what})") \
            from None
    if doc.get("arrays") is None:  # format version 1 saved a used explainer's derived arrays: never trusted
        for name in DERIVED:
            arrays.pop(name, None)  # (recomputed from the covariances)
    check_arrays(folder, doc, arrays)
    return arrays


def _spec(doc: dict, arrays: dict) -> dict:
    """``{name: (shape with None for any size, integer dtype?)}`` of the arrays a bundle may hold."""
    d, m = len(doc["features"]["names"]), int(doc["encoder"]["width"])
    k = arrays["ref_weights"].shape[0] if "ref_weights" in arrays and arrays["ref_weights"].ndim == 1 else None
    p = int(np.prod(doc["input"].get("shape") or [0]))
    return {"feature_min": ((d,), False), "feature_max": ((d,), False), "feature_scale": ((d,), False),
            "feature_mean": ((d,), False), "cavs": ((d, m), False), "ref_weights": ((None,), False),
            "ref_means": ((k, m), False), "ref_covariances": ((k, m, m), False), "ref_centers": ((None, m), False),
            "ref_center_labels": ((None,), True), "ref_rows": ((None, m), False), "ref_labels": ((None,), True),
            "ref_head_labels": ((k,), True), "percentile_values": ((None, d), False),
            "input_bounds": ((2, p), False), "input_rms": ((3,), False), "latent_bounds": ((2, m), False),
            "latent_rms": ((3,), False)}


def _required(doc: dict) -> set[str]:
    need = {"feature_min", "feature_max", "feature_scale"}
    if doc["features"]["space"] == "concepts":
        need.add("cavs")
    assign = doc["reference"]["assign"]
    if assign == "mixture":
        need |= {"ref_weights", "ref_means", "ref_covariances"}
    if assign == "nearest_center":
        need.add("ref_centers")
    if assign == "nearest_row":
        need |= {"ref_rows", "ref_labels"}
    return need


def check_arrays(folder: Path, doc: dict, arrays: dict) -> None:
    """Names, shapes, dtypes, finiteness and the mixture's validity; digests against explainer.json's record."""
    def bad(name, what):
        return problem(folder, f"arrays.npz, array {name}", what)

    spec = _spec(doc, arrays)
    unknown = sorted(set(arrays) - set(spec))
    if unknown:
        raise problem(folder, "arrays.npz", f"holds arrays no saved explainer holds ({', '.join(unknown)})")
    missing = sorted(_required(doc) - set(arrays))
    if missing:
        raise problem(folder, "arrays.npz", f"lacks the array(s) {', '.join(missing)}, which "
                      f"{'this reference clustering' if missing[0].startswith('ref_') else 'every bundle'} needs")
    if "cavs" in arrays and doc["features"]["space"] != "concepts":
        raise bad("cavs", "is present, but explainer.json says the trees cut on the latents (features.space)")
    for name, a in arrays.items():
        shape, integer = spec[name]
        if a.dtype.kind not in ("iu" if integer else "f"):
            raise bad(name, f"has dtype {a.dtype}, not {'integers' if integer else 'floating point numbers'}")
        if a.ndim != len(shape) or any(want is not None and got != want for got, want in zip(a.shape, shape)):
            want = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
            raise bad(name, f"has shape {a.shape}, where {want} is needed")
        if not integer and not np.isfinite(a).all():
            raise bad(name, f"holds {int((~np.isfinite(a)).sum())} NaN or infinite values")
    if (arrays["feature_min"] > arrays["feature_max"]).any():
        raise bad("feature_min", "exceeds feature_max for some coordinate")
    if (arrays["feature_scale"] <= 0).any():
        raise bad("feature_scale", "holds a spread <= 0")
    if "ref_weights" in arrays:
        _check_mixture(folder, arrays)
    if ("ref_centers" in arrays) != ("ref_center_labels" in arrays) and doc["reference"]["assign"] == "nearest_mean":
        raise bad("ref_center_labels", "and ref_centers come together (the clusters the nearest means stand for)")
    if "ref_center_labels" in arrays:
        labels = arrays["ref_center_labels"]
        if len(labels) != len(arrays["ref_centers"]) or (labels < 0).any():
            raise bad("ref_center_labels", "must hold one cluster number >= 0 per row of ref_centers")
    if ("ref_rows" in arrays) != ("ref_labels" in arrays):
        raise bad("ref_labels", "and ref_rows come together (the rows the clustering was fitted on and their labels)")
    if "ref_labels" in arrays:
        labels = arrays["ref_labels"]
        if len(labels) != len(arrays["ref_rows"]) or (labels < -1).any():
            raise bad("ref_labels", "must hold one cluster number >= 0 (or -1, noise) per row of ref_rows")
    if "ref_head_labels" in arrays and (arrays["ref_head_labels"] < 0).any():
        raise bad("ref_head_labels", "must hold the encoder head's number (>= 0) of each cluster")
    if "percentile_values" in arrays:
        values = arrays["percentile_values"]
        if len(values) < 2 or (np.diff(values, axis=0) < 0).any():
            raise bad("percentile_values", "must hold at least 2 sorted values per coordinate (each column ascending)")
    for name in ("input_bounds", "latent_bounds"):
        if name in arrays and (arrays[name][0] > arrays[name][1]).any():
            raise bad(name, "has a lower bound above its upper bound")
    for name in ("input_rms", "latent_rms"):
        if name in arrays and ((arrays[name] < 0).any() or (np.diff(arrays[name]) < 0).any()):
            raise bad(name, "must hold 3 ascending quantiles >= 0")
    record = doc.get("arrays")
    if record is not None:
        if set(record) != set(arrays):
            extra, gone = sorted(set(arrays) - set(record)), sorted(set(record) - set(arrays))
            raise problem(folder, "arrays.npz", f"holds {', '.join(extra) or 'no'} array(s) explainer.json does not "
                          f"record and lacks {', '.join(gone) or 'none'} of those it records (field arrays)")
        for name, a in arrays.items():
            if array_digest(a) != str(record[name]["sha256"]).lower():
                raise bad(name, "differs from the array explainer.json records (field arrays."
                          f"{name}.sha256): arrays.npz was replaced or edited after saving")


def _check_mixture(folder: Path, arrays: dict) -> None:
    def bad(name, what):
        return problem(folder, f"arrays.npz, array {name}", what)

    w, cov = arrays["ref_weights"], arrays.get("ref_covariances")
    if len(w) < 1 or (w < 0).any() or abs(float(w.sum()) - 1.0) > 1e-6:
        raise bad("ref_weights", f"must be {len(w)} mixture weights >= 0 summing to 1 (they sum to {w.sum():.9g})")
    for name in ("ref_means", "ref_covariances"):
        if name not in arrays:
            raise bad(name, "is missing beside ref_weights (a mixture needs weights, means and covariances)")
    for c, S in enumerate(cov):
        if not np.allclose(S, S.T, rtol=1e-7, atol=1e-12 * max(float(np.abs(S).max()), 1e-300)):
            raise bad(f"ref_covariances[{c}]", "is not symmetric, so it is no covariance matrix")
        try:
            np.linalg.cholesky(S)
        except np.linalg.LinAlgError:
            low = float(np.linalg.eigvalsh(S).min())
            raise bad(f"ref_covariances[{c}]", f"is not positive definite (smallest eigenvalue {low:.3g}): the "
                      "mixture cannot assign new points") from None


# ------------------------------------------------------------------ 4. the trees
def read_trees(folder: Path, doc: dict) -> dict:
    """Every tree of ``explainer.json``, checked against what it records (:func:`check_tree`)."""
    from pipeline.trees.tree import ExplanationTree

    trees = {}
    for row, info in doc["trees"].items():
        path = inside(folder, info["file"], f"explainer.json, field trees.{row}.file")
        try:
            tree = ExplanationTree.from_json(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise problem(folder, info["file"], f"not text (byte {exc.start} is not UTF-8)") from None
        except InvalidInputError as exc:
            raise problem(folder, info["file"], str(exc).split(": re-export")[0].split("; re-export")[0]) from None
        check_tree(folder, doc, row, tree)
        trees[row] = tree
    return trees


def check_tree(folder: Path, doc: dict, row: str, tree) -> None:
    """The tree of ``trees.<row>`` agrees with every record explainer.json keeps of it."""
    info, names = doc["trees"][row], doc["features"]["names"]
    file = info["file"]

    def bad(field, what):
        return problem(folder, f"{file} (explainer.json, trees.{row}.{field})", what)

    if "name" in info and info["name"] != row:
        raise bad("name", f"records the tree {info['name']!r} under the name {row!r}")
    if tree.n_features != len(names):
        raise bad("file", f"the tree cuts on {tree.n_features} coordinates, but features.names lists {len(names)}: "
                  "the file holds another run's tree")
    if tree.feature_names is not None and list(tree.feature_names) != list(names):
        raise bad("file", f"the tree's feature names {_short(list(tree.feature_names))} are not features.names "
                  f"{_short(list(names))}: the file holds another run's tree")
    if "feature_names" in info and info["feature_names"] != (None if tree.feature_names is None
                                                             else list(tree.feature_names)):
        raise bad("feature_names", f"records {_short(info['feature_names'])}, the file has "
                  f"{_short(tree.feature_names)}")
    if tree.n_leaves != info["n_leaves"] or tree.depth != info["depth"]:
        raise bad("n_leaves", f"records {info['n_leaves']} leaves and depth {info['depth']}, the file holds a tree "
                  f"of {tree.n_leaves} leaves and depth {tree.depth}: it was replaced after saving")
    if "sha256" in info and tree_digest(tree) != str(info["sha256"]).lower():
        raise bad("sha256", "the tree's cuts and labels (its rules exactly) differ from those explainer.json records: "
                  "the file was replaced by another tree after saving")
    leaves = {str(int(v)) for v in tree.leaves}
    rules = set(info["rules"])
    if rules and rules != leaves:
        raise bad("rules", f"gives rules for leaves {sorted(rules, key=int)[:8]}, but the tree's leaves are "
                  f"{sorted(leaves, key=int)[:8]}: rules and tree are not the same tree's")
    for leaf, rule in info["rules"].items():
        said = rule["text"].rsplit(" → ", 1)[-1] if " → " in rule["text"] else None
        if said is not None and said != tree.leaf_name(tree.label[int(leaf)]):
            raise bad(f"rules.{leaf}", f"the rule ends '→ {said}', but the tree's leaf {leaf} reads "
                      f"'{tree.leaf_name(tree.label[int(leaf)])}': rules and tree are not the same tree's")
    feature, near = tree.feature, tree.neighbours()
    for node, test in (info.get("printed_tests") or {}).items():
        n = int(node) if str(node).isdigit() else -1
        if not 0 <= n < tree.n_nodes or tree.is_leaf(n):
            raise bad(f"printed_tests.{node}", "names a node that is no cut of the tree")
        if test["kind"] == "oblique":
            ok = tree.is_oblique(n) and {j for j, _ in test["terms"]} <= set(tree.weights(n))
        else:
            ok = not tree.is_oblique(n) and int(feature[n]) == test["feature"]
        if not ok:
            raise bad(f"printed_tests.{node}", "the printed test is not on the coordinate the tree cuts there: "
                      "rules and tree are not the same tree's")
        lo, hi = (near.get(n) or (None, None))[:2]
        if test["kind"] == "raw" and lo is not None and hi is not None and not lo <= test["threshold"] < hi:
            raise bad(f"printed_tests.{node}", f"the printed threshold {test['threshold']:g} does not lie between the "
                      f"training values nearest the tree's cut ({lo:g}, {hi:g}): rules and tree are not the same "
                      "tree's")


def verify_bundle(folder: Path, newest: int) -> tuple[dict, dict, dict]:
    """(explainer.json, arrays, trees) of the bundle folder, every check of the module docstring passed."""
    listed = verify_files(folder)
    doc = read_doc(folder, newest)
    check_listed(folder, doc, listed)
    arrays = read_arrays(folder, doc)
    trees = read_trees(folder, doc)
    return doc, arrays, trees


__all__ = ["array_record", "content_digest", "inside", "problem", "read_sums", "tree_digest", "verify_bundle",
           "verify_files"]
