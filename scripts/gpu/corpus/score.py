#!/usr/bin/env python3
"""The labelled leak corpus's scorer (issue 29): runs every program of a manifest under
`gpushim run`, each in its own output directory, several at once, and scores each report
against the program's labels.

A manifest (`corpus.json` here for the GPU corpus, `standin/corpus.json` for the one the CPU
stand-ins can run) lists builds and programs; see README.md beside this file for its fields.
Labels name the allocating line by a marker comment in the source (`# @leak`, `// @leak`), so
that edits keep them right.

Scores, per program:
- **right**: a leak's top suspect is headed by the labelled `file:line`; a negative has no
  suspect;
- **detected**: a leak has any suspect (precision and recall count programs);
- **holder right**: the labelled holder's root name (`'history'`) is in the first `held by:`
  line the text report shows under the top suspect (the heap walk's companion file);
- **definitely lost**: allocations the report calls definitely lost against the labelled count
  of truly lost ones (true positives up to the label, the rest false positives, the shortfall
  false negatives).

A program that crashes, times out, has no report or a report of an unexpected shape is scored
wrong (in every measure it takes part in), with the reason; the scorer itself does not fail.

With --record, each program's event stream is kept as well (`GPUSHIM_RECORD`, with the frames
its return addresses were symbolized to) in corpus-streams.tar.gz; --replay DIR (that tarball
unpacked, DIR/<program>/) runs nothing and scores what this collector makes of the same events:
the verdict is worked on here, without the GPU, and the GPU run confirms it.

Usage: score.py [--manifest FILE] [--only NAME...] [--jobs N] [--timeout S] [--sanitizer]
                [--gpushim PATH] [--standins DIR] [--work DIR] [--out DIR] [--record]
                [--replay DIR] [--expect-min METRIC=VALUE,...] [--list] [--check]
Exit status: 0; 1 when an --expect-min bound is not met; 2 for a bad manifest or usage.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fnmatch
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

SCHEMA = "gpushim.corpus.v1"
RESULTS_SCHEMA = "gpushim.corpus-results.v1"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
#: The measures --expect-min can bound, in the order the totals show them.
METRICS = ("right", "precision", "recall", "headline", "holder", "lost_precision", "lost_recall")
#: Placeholders a manifest's commands may use.
PLACEHOLDERS = ("python", "dir", "bin", "variant", "standins", "repo")
#: The largest file the device machine hands back (16 MiB), less a margin.
TARBALL_LIMIT = 15 << 20
#: A final report's file name (not a snapshot, out-of-memory, interval or companion file).
FINAL_REPORT = re.compile(r"^gpushim-(?:rank\d+-)?(\d+)(?:\.\d+)?\.json$")
#: The place in a headline: `function (dir/file.py:42) via …`.
HEADLINE_PLACE = re.compile(r"\(([^()\s]+):(\d+)\)")
#: compute-sanitizer's leak summary.
SANITIZER_LEAKS = re.compile(r"LEAK SUMMARY:\s*(\d+)\s+bytes leaked in\s+(\d+)\s+allocations")
SANITIZER_ERRORS = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")


class ManifestError(Exception):
    """A manifest that cannot be used; the message names the program or field."""


@dataclass
class Build:
    name: str
    command: list[str]


@dataclass
class Program:
    """One program of the corpus: one variant of a manifest entry, with its labels."""

    name: str
    base: str
    variant: str | None
    framework: str
    command: list[str]
    env: dict[str, str]
    needs: list[str]
    leak: bool
    #: The labelled allocating line: `path/relative/to/the/manifest.py:42`, its absolute file.
    line: str | None
    line_file: str | None
    line_no: int | None
    holder: str | None
    lost: int
    sanitizer: bool
    cost: float
    timeout_s: float | None
    why: str = ""


# ---------------------------------------------------------------------------------------------
# The manifest


def substitute(text: str, values: dict[str, str], where: str) -> str:
    """`text` with each `{name}` of PLACEHOLDERS replaced; an unknown or unset one is an error."""

    def one(m: re.Match) -> str:
        key = m.group(1)
        if key not in PLACEHOLDERS:
            raise ManifestError(f"{where}: unknown placeholder {{{key}}} (known: {', '.join(PLACEHOLDERS)})")
        if values.get(key) is None:
            raise ManifestError(f"{where}: {{{key}}} has no value here (standins: give --standins DIR)")
        return values[key]

    return re.sub(r"\{([a-z_]+)\}", one, text)


def resolve_marker(base_dir: Path, spec: str, where: str) -> tuple[str, Path, int]:
    """`file@marker` → (`file:line`, the file's absolute path, line): the one line of the file
    that ends with the comment `# @marker` or `// @marker`."""
    if "@" not in spec:
        raise ManifestError(f"{where}: line {spec!r} is not FILE@MARKER")
    rel, marker = spec.rsplit("@", 1)
    path = (base_dir / rel).resolve()
    try:
        text = path.read_text()
    except OSError as e:
        raise ManifestError(f"{where}: cannot read {rel}: {e.strerror}") from None
    tag = re.compile(r"(#|//)\s*@" + re.escape(marker) + r"\s*$")
    found = [i + 1 for i, line in enumerate(text.splitlines()) if tag.search(line)]
    if len(found) != 1:
        raise ManifestError(f"{where}: {len(found)} lines of {rel} are marked @{marker}; want exactly one")
    return f"{rel}:{found[0]}", path, found[0]


def load_manifest(path: Path, values: dict[str, str | None]) -> tuple[list[Build], list[Program], dict]:
    """The builds and programs of the manifest at `path`, labels resolved, placeholders other
    than {variant} substituted. Raises ManifestError naming what is wrong."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ManifestError(f"{path}: {e}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ManifestError(f"{path}: not a corpus manifest (schema {SCHEMA!r})")
    base_dir = path.parent.resolve()
    vals = {**values, "dir": str(base_dir), "repo": str(REPO)}
    defaults = data.get("defaults", {})
    builds = []
    for b in data.get("builds", []):
        where = f"build {b.get('name')!r}"
        cmd = [substitute(str(a), vals, where) for a in b["command"]] if isinstance(b.get("command"), list) else None
        if not isinstance(b.get("name"), str) or not cmd:
            raise ManifestError(f"{where}: needs a name and a command (a list)")
        builds.append(Build(b["name"], cmd))
    build_names = {b.name for b in builds}
    if len(build_names) != len(builds):
        raise ManifestError(f"{path}: two builds have the same name")
    programs: list[Program] = []
    for entry in data.get("programs", []):
        programs.extend(expand_entry(entry, defaults, base_dir, vals, build_names))
    names = [p.name for p in programs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ManifestError(f"{path}: program names used twice: {', '.join(dup)}")
    return builds, programs, data


def expand_entry(entry: dict, defaults: dict, base_dir: Path, vals: dict, build_names: set[str]) -> list[Program]:
    """The programs of one manifest entry: one per variant (`name-fast`, `name-slow`), or one."""
    name = entry.get("name")
    where = f"program {name!r}"
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ManifestError(f"{where}: needs a name of letters, digits, '_', '.', '-'")
    known = {
        "name",
        "framework",
        "command",
        "variants",
        "env",
        "needs",
        "leak",
        "line",
        "holder",
        "lost",
        "sanitizer",
        "cost",
        "timeout_s",
        "why",
    }
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ManifestError(f"{where}: unknown fields {', '.join(unknown)}")
    if not isinstance(entry.get("leak"), bool):
        raise ManifestError(f"{where}: 'leak' must be true or false")
    leak = entry["leak"]
    if not isinstance(entry.get("command"), list) or not entry["command"]:
        raise ManifestError(f"{where}: 'command' must be a non-empty list")
    variants = entry.get("variants") or [None]
    if leak and defaults.get("leak_variants", True) and sorted(v for v in variants if v) != ["fast", "slow"]:
        raise ManifestError(f'{where}: a leak comes as variants ["fast", "slow"]')
    needs = entry.get("needs", [])
    missing = [n for n in needs if n not in build_names]
    if missing:
        raise ManifestError(f"{where}: needs unknown builds {', '.join(missing)}")
    line = entry.get("line")
    if leak and not line:
        raise ManifestError(f"{where}: a leak needs 'line' (FILE@MARKER)")
    if not leak and (line or entry.get("holder") or entry.get("lost")):
        raise ManifestError(f"{where}: a negative has no line, holder or lost allocations")
    place, line_file, line_no = resolve_marker(base_dir, line, where) if line else (None, None, None)
    holder = entry.get("holder")
    if holder is not None and (not isinstance(holder, str) or not holder):
        raise ManifestError(f"{where}: 'holder' must be a name or absent")
    env = {**defaults.get("env", {}), **entry.get("env", {})}
    out = []
    for v in variants:
        lost = entry.get("lost", 0)
        if isinstance(lost, dict):
            lost = lost.get(v)
        if not isinstance(lost, int) or isinstance(lost, bool) or lost < 0:
            raise ManifestError(f"{where}: 'lost' must be a count (0 or more), or one per variant")
        vv = {**vals, "variant": v}
        out.append(
            Program(
                name=f"{name}-{v}" if v else name,
                base=name,
                variant=v,
                framework=str(entry.get("framework", "")),
                command=[substitute(str(a), vv, where) for a in entry["command"]],
                env={k: substitute(str(x), vv, where) for k, x in env.items()},
                needs=list(needs),
                leak=leak,
                line=place,
                line_file=str(line_file) if line_file else None,
                line_no=line_no,
                holder=holder,
                lost=lost,
                sanitizer=bool(entry.get("sanitizer", False)),
                cost=float(entry.get("cost", 1)),
                timeout_s=entry.get("timeout_s", defaults.get("timeout_s")),
                why=str(entry.get("why", "")),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Reading a report


def place_of_headline(headline: str | None) -> tuple[str, int] | None:
    """(file, line) of the first `(file:line)` in a suspect's headline."""
    if not isinstance(headline, str):
        return None
    m = HEADLINE_PLACE.search(headline)
    return (m.group(1), int(m.group(2))) if m else None


def first_user_frame(site: dict) -> dict | None:
    """The site's first frame that is not internal (as the collector's words.rs picks it)."""
    frames = site.get("frames") or []
    for f in frames:
        if isinstance(f, dict) and not f.get("internal", False):
            return f
    return frames[0] if frames and isinstance(frames[0], dict) else None


def site_by_id(report: dict, site_id) -> dict | None:
    for s in report.get("sites") or []:
        if isinstance(s, dict) and s.get("id") == site_id:
            return s
    return None


def suspect_place(report: dict, suspect: dict) -> tuple[str | None, tuple[str, int] | None]:
    """A suspect's name and (file, line): its headline's place, else its site's first user
    frame's (reports without headlines)."""
    headline = suspect.get("headline")
    if headline is not None and not isinstance(headline, str):
        raise ValueError(f"headline is {headline!r}")
    place = place_of_headline(headline)
    if place is None and not headline:
        f = first_user_frame(site_by_id(report, suspect.get("site")) or {})
        if f and f.get("file") and isinstance(f.get("line"), int):
            place = (f["file"], f["line"])
            headline = f"{f.get('function', '??')} ({f['file']}:{f['line']})"
    return headline, place


def same_place(label_file: str, label_line: int, got_file: str, got_line: int) -> bool:
    """Whether a report's `got_file:got_line` is the labelled line: same line number, and the
    shorter path's components end the longer one's (reports shorten paths to their last two
    components)."""
    if label_line != got_line or not got_file:
        return False
    a = [p for p in Path(label_file).parts if p not in ("/", ".")]
    b = [p for p in Path(got_file).parts if p not in ("/", ".")]
    n = min(len(a), len(b))
    return n > 0 and a[-n:] == b[-n:]


def first_held_by(report: dict, suspect: dict, holders: dict | None) -> str | None:
    """The text of the first `held by:` line shown under `suspect`: its site's holder groups, or
    for a union of one line's sites (`line_sites`) its members' in the holders file's order,
    as `gpushim report` shows them."""
    if not isinstance(holders, dict):
        return None
    sites = [s for s in holders.get("sites") or [] if isinstance(s, dict)]
    line_sites = suspect.get("line_sites") or []
    if line_sites:
        members = [s for s in sites if s.get("site") in line_sites]
    else:
        members = [s for s in sites if s.get("site") == suspect.get("site")]
    for m in members:
        for h in m.get("holders") or []:
            if isinstance(h, dict) and isinstance(h.get("text"), str):
                return h["text"]
    return None


def holder_named(text: str | None, name: str) -> bool:
    """Whether a held-by line names the root `name` (quoted, as `global 'history'`)."""
    return bool(text) and (f"'{name}'" in text)


def lost_count(report: dict) -> tuple[int | None, str]:
    """(allocations the report calls definitely lost, the scan's status); None without a scan."""
    reach = report.get("reachability")
    if not isinstance(reach, dict):
        return None, "none"
    n = reach.get("definitely_lost_count", 0)
    if not isinstance(n, int):
        raise ValueError(f"reachability.definitely_lost_count is {n!r}")
    return n, str(reach.get("status", "?"))


# ---------------------------------------------------------------------------------------------
# Scoring


def label_text(p: Program) -> str:
    if not p.leak:
        return "negative"
    out = f"leak {p.line}"
    if p.holder:
        out += f" held by '{p.holder}'"
    if p.lost:
        out += f", {p.lost} lost"
    return out


def score_program(p: Program, report: dict | None, holders: dict | None, error: str | None = None) -> dict:
    """The scores of program `p` given its final report and holders file (None: none), or the
    reason it could not be judged (`error`): then it is wrong in every measure."""
    got: dict = {"suspects": None, "top": None, "top_at": None, "held_by": None, "lost": None, "reach": None}
    res: dict = {
        "name": p.name,
        "base": p.base,
        "variant": p.variant,
        "framework": p.framework,
        "label": {"leak": p.leak, "line": p.line, "holder": p.holder, "lost": p.lost},
        "label_text": label_text(p),
        "got": got,
        "error": error,
    }
    if error is None:
        try:
            if not isinstance(report, dict) or not isinstance(report.get("suspects"), list):
                raise ValueError("no suspects list")
            suspects = report["suspects"]
            got["suspects"] = len(suspects)
            if suspects:
                top = suspects[0]
                if not isinstance(top, dict):
                    raise ValueError("suspect is not an object")
                headline, place = suspect_place(report, top)
                got["top"] = headline
                got["top_at"] = f"{place[0]}:{place[1]}" if place else None
                got["held_by"] = first_held_by(report, top, holders)
                got["top_place"] = place
            got["lost"], got["reach"] = lost_count(report)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            error = f"unexpected report shape: {e}"
            res["error"] = error
    place = got.pop("top_place", None)
    if error is not None:
        detected = not p.leak  # wrong either way: a missed leak, a negative not cleared
        line_ok = False
        holder_ok = False if p.holder else None
        reported_lost = 0
    else:
        detected = got["suspects"] > 0
        line_ok = bool(
            p.leak and place and p.line_file and p.line_no and same_place(p.line_file, p.line_no, place[0], place[1])
        )
        holder_ok = holder_named(got["held_by"], p.holder) if (p.leak and p.holder) else None
        reported_lost = got["lost"] or 0
    res["detected"] = detected
    res["right"] = line_ok if p.leak else (error is None and not detected)
    res["headline_right"] = line_ok if p.leak else None
    res["holder_right"] = holder_ok
    res["lost_tp"] = min(reported_lost, p.lost)
    res["lost_fp"] = max(0, reported_lost - p.lost)
    res["lost_fn"] = max(0, p.lost - reported_lost)
    return res


def variant_group(r: dict) -> str:
    """A program's group by variant: a leak's `fast` or `slow`, or `negative`."""
    return (r["variant"] or "leak") if r["label"]["leak"] else "negative"


def groups_text(groups: dict) -> str:
    return ", ".join(f"{k} {g['right']}/{g['programs']}" for k, g in groups.items())


def ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def totals(results: list[dict]) -> dict:
    """The corpus's measures over the programs' scores."""
    leaks = [r for r in results if r["label"]["leak"]]
    negs = [r for r in results if not r["label"]["leak"]]
    tp = sum(1 for r in leaks if r["detected"])
    fn = len(leaks) - tp
    fp = sum(1 for r in negs if r["detected"])
    held = [r for r in results if r["holder_right"] is not None]
    lost_tp = sum(r["lost_tp"] for r in results)
    lost_fp = sum(r["lost_fp"] for r in results)
    lost_fn = sum(r["lost_fn"] for r in results)
    t = {
        "programs": len(results),
        "leaks": len(leaks),
        "negatives": len(negs),
        "errors": sum(1 for r in results if r["error"]),
        "right_count": sum(1 for r in results if r["right"]),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": len(negs) - fp,
        "headline_count": sum(1 for r in leaks if r["headline_right"]),
        "holder_count": sum(1 for r in held if r["holder_right"]),
        "holder_programs": len(held),
        "lost_tp": lost_tp,
        "lost_fp": lost_fp,
        "lost_fn": lost_fn,
    }
    t["right"] = ratio(t["right_count"], len(results))
    t["precision"] = ratio(tp, tp + fp)
    t["recall"] = ratio(tp, tp + fn)
    t["headline"] = ratio(t["headline_count"], len(leaks))
    t["holder"] = ratio(t["holder_count"], len(held))
    t["lost_precision"] = ratio(lost_tp, lost_tp + lost_fp)
    t["lost_recall"] = ratio(lost_tp, lost_tp + lost_fn)
    for key, of in (("by_framework", lambda r: r["framework"] or "?"), ("by_variant", variant_group)):
        groups: dict[str, dict] = {}
        for r in results:
            g = groups.setdefault(of(r), {"programs": 0, "right": 0})
            g["programs"] += 1
            g["right"] += 1 if r["right"] else 0
        t[key] = dict(sorted(groups.items()))
    return t


def parse_expect(specs: list[str]) -> dict[str, float]:
    """`right=0.9,precision=0.95` (repeatable) → {metric: bound}."""
    out = {}
    for spec in specs:
        for part in filter(None, (s.strip() for s in spec.split(","))):
            key, sep, val = part.partition("=")
            if not sep or key not in METRICS:
                raise ValueError(f"--expect-min {part!r}: want METRIC=VALUE, METRIC one of {', '.join(METRICS)}")
            try:
                out[key] = float(val)
            except ValueError:
                raise ValueError(f"--expect-min {part!r}: {val!r} is not a number") from None
    return out


def unmet(t: dict, bounds: dict[str, float]) -> list[str]:
    """The bounds the totals do not meet, in words (a measure with no programs to count does
    not meet one)."""
    out = []
    for k, v in bounds.items():
        got = t.get(k)
        if got is None or got < v:
            out.append(f"{k} {fmt_ratio(got)} < {v:g}")
    return out


# ---------------------------------------------------------------------------------------------
# Tables


def fmt_ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def got_text(r: dict) -> str:
    if r["error"]:
        return f"ERROR: {r['error']}"
    g = r["got"]
    if not g["suspects"]:
        out = "no suspect"
    else:
        out = f"{g['suspects']} suspect{'s' if g['suspects'] != 1 else ''}, top at {g['top_at'] or g['top'] or '?'}"
        if g["held_by"]:
            out += f" held by {short(g['held_by'], 60)}"
    if g["lost"]:
        out += f"; {g['lost']} lost"
    return out


def short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def yes(x: bool | None) -> str:
    return "-" if x is None else ("yes" if x else "NO")


def sanitizer_text(r: dict) -> str:
    s = r.get("sanitizer")
    if not s:
        return ""
    if s.get("leaked_allocations") is not None:
        return f"{s['leaked_allocations']} leaked"
    return s.get("note", "?")


def totals_lines(t: dict) -> list[str]:
    lines = [
        f"programs {t['programs']} ({t['leaks']} leaks, {t['negatives']} negatives); {t['errors']} could not be judged",
        f"right              {t['right_count']}/{t['programs']}  {fmt_ratio(t['right'])}",
        f"suspect precision  {fmt_ratio(t['precision'])}  (TP {t['tp']}, FP {t['fp']})",
        f"suspect recall     {fmt_ratio(t['recall'])}  (TP {t['tp']}, FN {t['fn']})",
        f"headline right     {t['headline_count']}/{t['leaks']}  {fmt_ratio(t['headline'])}",
        f"holder right       {t['holder_count']}/{t['holder_programs']}  {fmt_ratio(t['holder'])}",
        f"definitely lost    precision {fmt_ratio(t['lost_precision'])}, recall {fmt_ratio(t['lost_recall'])}"
        f"  (allocations: TP {t['lost_tp']}, FP {t['lost_fp']}, FN {t['lost_fn']})",
    ]
    lines.append(f"right by framework {groups_text(t['by_framework'])}")
    lines.append(f"right by variant   {groups_text(t['by_variant'])}")
    return lines


def text_table(results: list[dict], t: dict) -> str:
    rows = [("program", "label", "got", "right", "holder", "lost")]
    for r in results:
        lost = f"{r['label']['lost']}/{'-' if r['got']['lost'] is None else r['got']['lost']}"
        rows.append(
            (
                r["name"],
                short(r["label_text"], 48),
                short(got_text(r), 80),
                yes(r["right"]),
                yes(r["holder_right"]),
                lost,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join([*out, "", *totals_lines(t)]) + "\n"


def md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(results: list[dict], t: dict, meta: dict) -> str:
    out = [
        f"Corpus `{meta.get('manifest', '?')}`, {t['programs']} programs; gpushim {meta.get('gpushim_version', '?')}"
        + (f", commit {meta['commit']}" if meta.get("commit") else "")
        + (f", {meta['when']}" if meta.get("when") else "")
        + ".",
        "",
        "| measure | value | counts |",
        "|---|---|---|",
        f"| right | {fmt_ratio(t['right'])} | {t['right_count']} of {t['programs']} |",
        f"| suspect precision | {fmt_ratio(t['precision'])} | TP {t['tp']}, FP {t['fp']} |",
        f"| suspect recall | {fmt_ratio(t['recall'])} | TP {t['tp']}, FN {t['fn']} |",
        f"| headline right | {fmt_ratio(t['headline'])} | {t['headline_count']} of {t['leaks']} leaks |",
        f"| holder right | {fmt_ratio(t['holder'])} | {t['holder_count']} of {t['holder_programs']} "
        "with a Python holder |",
        f'| "definitely lost" precision | {fmt_ratio(t["lost_precision"])} | allocations: TP {t["lost_tp"]}, '
        f"FP {t['lost_fp']} |",
        f'| "definitely lost" recall | {fmt_ratio(t["lost_recall"])} | allocations: TP {t["lost_tp"]}, '
        f"FN {t['lost_fn']} |",
        f"| could not be judged | {t['errors']} | crashed, timed out, no report |",
        "",
        f"Right by framework: {groups_text(t['by_framework'])}. By variant: {groups_text(t['by_variant'])}.",
        "",
    ]
    sanitizer = any(r.get("sanitizer") for r in results)
    head = "| program | framework | label | got | right | holder | lost (label / ours) |"
    rule = "|---|---|---|---|---|---|---|"
    if sanitizer:
        head += " compute-sanitizer |"
        rule += "---|"
    out += [head, rule]
    for r in results:
        got_lost = "-" if r["got"]["lost"] is None else str(r["got"]["lost"])
        row = (
            f"| {md_cell(r['name'])} | {md_cell(r['framework'])} | {md_cell(r['label_text'])} | "
            f"{md_cell(got_text(r))} | {yes(r['right'])} | {yes(r['holder_right'])} | "
            f"{r['label']['lost']} / {got_lost} |"
        )
        if sanitizer:
            row += f" {md_cell(sanitizer_text(r))} |"
        out.append(row)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# Running


def find_final_report(run_dir: Path, ppid: int | None) -> tuple[Path | None, str | None]:
    """The program's final report in `run_dir`: the one whose `ppid` is `gpushim run`'s pid
    (the program it started), else the one with the most allocations; and a note when there
    were several."""
    found = []
    for p in sorted(run_dir.iterdir()):
        if FINAL_REPORT.match(p.name):
            try:
                r = json.loads(p.read_text())
            except (OSError, ValueError):
                found.append((p, None))
                continue
            found.append((p, r if isinstance(r, dict) else None))
    if not found:
        return None, None
    note = f"{len(found)} final reports (child processes)" if len(found) > 1 else None
    for p, r in found:
        if r is not None and ppid is not None and r.get("ppid") == ppid:
            return p, note

    def allocs(item):
        r = item[1]
        t = r.get("totals") if r else None
        return t.get("alloc_count", 0) if isinstance(t, dict) and isinstance(t.get("alloc_count"), int) else -1

    return max(found, key=allocs)[0], note


def holders_of(report: Path) -> Path:
    return report.with_name(report.name[: -len(".json")] + ".holders.json")


def read_json(path: Path) -> tuple[dict | None, str | None]:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        return None, f"cannot read {path.name}: {e.strerror}"
    except ValueError as e:
        return None, f"{path.name} is not JSON: {e}"
    if not isinstance(data, dict):
        return None, f"{path.name} is not a JSON object"
    return data, None


class Runner:
    """Runs builds and programs, each in its own directory under `work`."""

    def __init__(self, args, builds: list[Build], programs: list[Program]):
        self.args = args
        self.builds = {b.name: b for b in builds}
        self.programs = programs
        self.work = Path(args.work)
        self.bin = self.work / "bin"
        self.lock = threading.Lock()
        self.build_errors: dict[str, str] = {}
        self.done = 0
        self.t0 = time.monotonic()

    def time_left(self) -> float | None:
        """Seconds until the run's --deadline (None: no deadline)."""
        if self.args.deadline is None:
            return None
        return self.args.deadline - (time.monotonic() - self.t0)

    def log(self, text: str) -> None:
        with self.lock:
            print(text, flush=True)

    def run_process(
        self, cmd: list[str], cwd: Path, env: dict, timeout: float, out: Path
    ) -> tuple[int | None, float, int | None]:
        """Runs `cmd` with stdout and stderr to `out`.stdout/.stderr; (exit status, or None on
        timeout; seconds; its pid). On timeout it sends SIGTERM to the command (`gpushim run`
        passes it on and writes the report), then SIGKILL to its process group."""
        t0 = time.monotonic()
        with open(out.with_suffix(".stdout"), "wb") as so, open(out.with_suffix(".stderr"), "wb") as se:
            try:
                proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=so, stderr=se, start_new_session=True)
            except OSError as e:
                se.write(f"score.py: cannot run {cmd[0]}: {e}\n".encode())
                return 127, time.monotonic() - t0, None
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=20)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return rc, time.monotonic() - t0, proc.pid

    def build(self, b: Build) -> None:
        d = self.work / "builds"
        d.mkdir(parents=True, exist_ok=True)
        left = self.time_left()
        timeout = 600.0 if left is None else max(min(600.0, left), 1.0)
        rc, secs, _ = self.run_process(b.command, d, dict(os.environ), timeout, d / b.name)
        if rc != 0:
            err = (d / f"{b.name}.stderr").read_text(errors="replace").strip().splitlines()
            why = err[-1] if err else ""
            self.build_errors[b.name] = f"build {b.name} failed ({'timeout' if rc is None else f'exit {rc}'}): {why}"
            self.log(f"build {b.name}: FAILED in {secs:.1f} s: {why}")
        else:
            self.log(f"build {b.name}: ok in {secs:.1f} s")

    def env_for(self, p: Program, run_dir: Path) -> dict:
        env = dict(os.environ)
        env.update(p.env)
        env["GPUSHIM_OUTPUT"] = str(run_dir)
        if self.args.record:
            (run_dir / "stream").mkdir(exist_ok=True)
            env["GPUSHIM_RECORD"] = str(run_dir / "stream")
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def run_program(self, p: Program) -> dict:
        run_dir = self.work / "runs" / p.name
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        failed = [self.build_errors[n] for n in p.needs if n in self.build_errors]
        report = holders = None
        error = None
        elapsed = 0.0
        rc = None
        note = None
        left = self.time_left()
        cut = False
        if self.args.replay:
            rc, error = self.replay(p, run_dir)
            path, note = find_final_report(run_dir, None)
            if error is None and path is None:
                error = "no report"
            elif error is None:
                report, error = read_json(path)
                hp = holders_of(path)
                if error is None and hp.exists():
                    holders, _ = read_json(hp)
                if error is None:
                    self.text_report(path, run_dir)
        elif failed:
            error = failed[0]
        elif left is not None and left <= 0:
            error = f"not run: past the run's deadline ({self.args.deadline:.0f} s)"
        else:
            timeout = float(self.args.timeout or p.timeout_s or 300)
            if left is not None and left < timeout:
                timeout, cut = max(left, 1.0), True
            cmd = [str(self.args.gpushim), "run", "-o", str(run_dir), "--", *p.command]
            (run_dir / "command.txt").write_text(
                " ".join(f"{k}={v}" for k, v in p.env.items()) + (" " if p.env else "") + " ".join(cmd) + "\n"
            )
            rc, elapsed, pid = self.run_process(cmd, run_dir, self.env_for(p, run_dir), timeout, run_dir / "program")
            path, note = find_final_report(run_dir, pid)
            if rc is None:
                error = f"timed out after {timeout:.0f} s" + (" (the run's deadline)" if cut else "")
            elif rc != 0:
                tail = (run_dir / "program.stderr").read_text(errors="replace").strip().splitlines()
                error = f"exit status {rc}" + (f": {short(tail[-1], 120)}" if tail else "")
            elif path is None:
                error = "no report"
            else:
                report, error = read_json(path)
                hp = holders_of(path)
                if error is None and hp.exists():
                    holders, herr = read_json(hp)
                    if herr:
                        note = herr
                if error is None:
                    self.text_report(path, run_dir)
        res = score_program(p, report, holders, error)
        res["elapsed_s"] = round(elapsed, 2)
        res["exit_status"] = rc
        if note:
            res["note"] = note
        left = self.time_left()
        if self.args.sanitizer and p.sanitizer and not failed and (left is None or left > 0):
            res["sanitizer"] = self.run_sanitizer(p, run_dir)
        with self.lock:
            self.done += 1
            n = self.done
        verdict = "right" if res["right"] else "WRONG"
        self.log(f"[{n}/{len(self.programs)}] {p.name}: {verdict} ({got_text(res)}) {elapsed:.1f} s")
        return res

    def replay(self, p: Program, run_dir: Path) -> tuple[int | None, str | None]:
        """`gpushim collect` of `p`'s recorded streams (--replay DIR: `DIR/<name>/*.gpushim`) into
        `run_dir`: the reports the same events give with this collector."""
        streams = sorted((Path(self.args.replay) / p.name).glob("*.gpushim"))
        if not streams:
            return None, "no recorded stream"
        rc = 0
        for f in streams:
            out = subprocess.run(
                [str(self.args.gpushim), "collect", "--input", str(f), "--output", str(run_dir)],
                capture_output=True,
                timeout=600,
                check=False,
            )
            (run_dir / "program.stderr").write_bytes(out.stderr)
            rc = max(rc, out.returncode)
        return rc, None

    def text_report(self, path: Path, run_dir: Path) -> None:
        """`gpushim report` of the final report, beside it, for a person reading the logs."""
        try:
            with open(run_dir / "report.txt", "wb") as f:
                subprocess.run(
                    [str(self.args.gpushim), "report", str(path), "--top", "5"],
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    timeout=60,
                    check=False,
                )
        except (OSError, subprocess.TimeoutExpired):
            pass

    def run_sanitizer(self, p: Program, run_dir: Path) -> dict:
        """compute-sanitizer's memcheck leak check of `p` (without the shim): its leak count."""
        exe = shutil.which("compute-sanitizer")
        if not exe:
            return {"note": "no compute-sanitizer"}
        cmd = [exe, "--tool", "memcheck", "--leak-check", "full", *p.command]
        env = dict(os.environ)
        env.update(p.env)
        timeout = 3 * float(self.args.timeout or p.timeout_s or 300)
        left = self.time_left()
        if left is not None:
            timeout = max(min(timeout, left), 1.0)
        rc, secs, _ = self.run_process(cmd, run_dir, env, timeout, run_dir / "sanitizer")
        text = (run_dir / "sanitizer.stdout").read_text(errors="replace") + (run_dir / "sanitizer.stderr").read_text(
            errors="replace"
        )
        out = parse_sanitizer(text)
        out["exit_status"] = rc
        out["elapsed_s"] = round(secs, 2)
        if rc is None:
            out["note"] = "timed out"
        return out


def parse_sanitizer(text: str) -> dict:
    """compute-sanitizer's leak summary: leaked bytes and allocations (0 when it printed an
    error summary and no leak summary), or a note when it printed neither."""
    m = SANITIZER_LEAKS.search(text)
    if m:
        return {"leaked_bytes": int(m.group(1)), "leaked_allocations": int(m.group(2))}
    if SANITIZER_ERRORS.search(text):
        return {"leaked_bytes": 0, "leaked_allocations": 0}
    return {"leaked_bytes": None, "leaked_allocations": None, "note": "no summary"}


# ---------------------------------------------------------------------------------------------
# The whole run


def selected(programs: list[Program], only: list[str]) -> list[Program]:
    if not only:
        return programs
    out = [p for p in programs if any(fnmatch.fnmatchcase(p.name, o) or fnmatch.fnmatchcase(p.base, o) for o in only)]
    return out


def versions(data: dict, gpushim: Path) -> dict:
    """What ran: gpushim's version, the commit, Python, the distributions and commands the
    manifest names (`versions`)."""
    out: dict = {"python": platform.python_version()}
    try:
        v = subprocess.run([str(gpushim), "--version"], capture_output=True, text=True, timeout=30, check=False)
        out["gpushim_version"] = v.stdout.strip().split()[-1] if v.stdout.strip() else "?"
    except (OSError, subprocess.TimeoutExpired):
        out["gpushim_version"] = "?"
    try:
        c = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if c.returncode == 0:
            out["commit"] = c.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    want = data.get("versions", {})
    if want.get("dists"):
        from importlib import metadata

        dists = {}
        for d in want["dists"]:
            try:
                dists[d] = metadata.version(d)
            except metadata.PackageNotFoundError:
                dists[d] = None
        out["dists"] = dists
    cmds = {}
    for cmd in want.get("commands", []):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
            cmds[" ".join(cmd)] = (r.stdout + r.stderr).strip()[-400:]
        except (OSError, subprocess.TimeoutExpired) as e:
            cmds[" ".join(cmd)] = f"unavailable: {e}"
    if cmds:
        out["commands"] = cmds
    return out


def write_tarball(work: Path, dest: Path, results: list[dict]) -> str:
    """The logs (builds, each program's directory) as one tarball of at most TARBALL_LIMIT:
    everything; if too big, without the raw reports of programs scored right; then without any
    raw report (their text reports stay). Returns what was left out."""
    right = {r["name"] for r in results if r["right"]}

    def keep(level: int, path: Path) -> bool:
        rel = path.relative_to(work)
        if level == 0 or path.suffix not in (".json", ".html"):
            return True
        if level == 1:
            return not (len(rel.parts) > 2 and rel.parts[0] == "runs" and rel.parts[1] in right)
        return False

    notes = ["", "raw reports of programs scored right", "all raw reports (text reports kept)"]
    for level in range(3):
        with tarfile.open(dest, "w:gz", compresslevel=6) as tar:
            for path in sorted(work.rglob("*")):
                if (
                    path.is_file()
                    and not path.is_symlink()
                    and path.parent.name not in ("bin", "stream")
                    and keep(level, path)
                ):
                    tar.add(path, arcname=str(Path("corpus-logs") / path.relative_to(work)))
        if dest.stat().st_size <= TARBALL_LIMIT:
            return notes[level]
    return notes[2] + "; still over the limit"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--manifest", default=str(HERE / "corpus.json"), help="the corpus manifest (default: %(default)s)")
    ap.add_argument("--only", nargs="+", default=[], metavar="NAME", help="programs to run (names or globs)")
    ap.add_argument("--jobs", type=int, default=8, help="programs run at once (default 8)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per program (default: the manifest's)")
    ap.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds for the whole run: programs not started by then are not run, running ones are stopped\n"
        "(each is scored wrong, with the reason), and the results are written",
    )
    ap.add_argument("--sanitizer", action="store_true", help="also run compute-sanitizer's leak check where labelled")
    ap.add_argument(
        "--record",
        action="store_true",
        help="also record each program's event stream (GPUSHIM_RECORD) into corpus-streams.tar.gz",
    )
    ap.add_argument(
        "--replay",
        default=None,
        metavar="DIR",
        help="run nothing: score what this gpushim's collector makes of the streams recorded in DIR\n"
        "(DIR/<program>/*.gpushim, as corpus-streams.tar.gz unpacks under streams/)",
    )
    ap.add_argument("--gpushim", default=str(REPO / "target/release/gpushim"), help="the gpushim binary")
    ap.add_argument("--standins", default=None, help="the stand-in CUDA libraries' directory ({standins})")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs the programs ({python})")
    ap.add_argument(
        "--work", default=None, help="where programs run and keep their reports (default: a /tmp dir, removed after)"
    )
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "target/corpus-out"), help="results")
    ap.add_argument("--expect-min", action="append", default=[], metavar="METRIC=VALUE,...", help=", ".join(METRICS))
    ap.add_argument("--list", action="store_true", help="list the programs and their labels, run nothing")
    ap.add_argument("--check", action="store_true", help="check the manifest and the programs' syntax, run nothing")
    args = ap.parse_args(argv)
    try:
        bounds = parse_expect(args.expect_min)
    except ValueError as e:
        print(f"score.py: {e}", file=sys.stderr)
        return 2
    manifest = Path(args.manifest).resolve()
    # Made only for a run (not for --list or --check); one made here is removed after the run (its
    # files are in the tarball).
    own_work = not args.work
    work = Path(args.work or Path(tempfile.gettempdir()) / f"gpushim-corpus-{os.getpid()}-{time.time_ns()}")
    args.work = str(work.resolve())
    values = {"python": args.python, "bin": str(Path(args.work) / "bin"), "standins": args.standins}
    try:
        builds, programs, data = load_manifest(manifest, values)
    except ManifestError as e:
        print(f"score.py: {e}", file=sys.stderr)
        return 2
    programs = selected(programs, args.only)
    if not programs:
        print(f"score.py: no program matches {' '.join(args.only)}", file=sys.stderr)
        return 2
    if args.list or args.check:
        for p in programs:
            print(f"{p.name:32} {p.framework:14} {label_text(p)}")
        if args.check:
            return check_sources(manifest.parent, programs)
        return 0
    gpushim = Path(args.gpushim)
    if not gpushim.is_file() or not (gpushim.parent / "libgpushim.so").is_file():
        print(f"score.py: {gpushim} (and libgpushim.so beside it) not found: cargo build --release", file=sys.stderr)
        return 2
    args.gpushim = str(gpushim.resolve())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (work / "bin").mkdir(parents=True, exist_ok=True)
    print(f"score.py: {len(programs)} programs of {manifest.name}, {args.jobs} at once, in {work}", flush=True)
    t0 = time.monotonic()
    meta = {"manifest": str(manifest.relative_to(REPO)) if manifest.is_relative_to(REPO) else str(manifest)}
    meta.update(versions(data, gpushim))
    meta["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    needed = {n for p in programs for n in p.needs}
    runner = Runner(args, [b for b in builds if b.name in needed], programs)
    runner.t0 = t0  # the deadline counts from the start
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        if not args.replay:
            list(pool.map(runner.build, [b for b in builds if b.name in needed]))
        order = sorted(programs, key=lambda p: -p.cost)
        results_by_name = dict(zip([p.name for p in order], pool.map(runner.run_program, order), strict=True))
    results = [results_by_name[p.name] for p in programs]
    t = totals(results)
    meta["wall_s"] = round(time.monotonic() - t0, 1)
    meta["jobs"] = args.jobs
    table = text_table(results, t)
    print()
    print(table, end="")
    print(f"wall time {meta['wall_s']:.0f} s with {args.jobs} at once")
    (out / "table.txt").write_text(table)
    (out / "accuracy.md").write_text(markdown(results, t, meta))
    failed = unmet(t, bounds)
    doc = {"schema": RESULTS_SCHEMA, "meta": meta, "totals": t, "expect_min": bounds, "unmet": failed}
    doc["programs"] = results
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    left = write_tarball(work, out / "corpus-logs.tar.gz", results)
    if args.record:
        with tarfile.open(out / "corpus-streams.tar.gz", "w:gz", compresslevel=6) as tar:
            for f in sorted((work / "runs").glob("*/stream/*")):
                tar.add(f, arcname=f"streams/{f.parent.parent.name}/{f.name}")
    if own_work:
        shutil.rmtree(work, ignore_errors=True)
    print(f"results in {out}: table.txt, accuracy.md, results.json, corpus-logs.tar.gz", end="")
    print(f" (left out: {left})" if left else "")
    if failed:
        print(f"score.py: below --expect-min: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def check_sources(base: Path, programs: list[Program]) -> int:
    """Compiles every Python file under the manifest's directory (syntax only, nothing written)."""
    bad = 0
    for f in sorted(base.rglob("*.py")):
        try:
            compile(f.read_text(), str(f), "exec")
        except (SyntaxError, ValueError) as e:
            print(f"{f}: {e}", file=sys.stderr)
            bad += 1
    print(f"{len(programs)} programs; Python files compile: {'no' if bad else 'yes'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
