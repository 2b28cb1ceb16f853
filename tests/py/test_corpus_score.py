"""Tests of the labelled corpus's scorer (scripts/gpu/corpus/score.py) without a GPU: its manifests
(the GPU corpus's and the stand-in corpus's are valid and shaped as issue 29 asks), how it reads
reports shaped like the collector's (docs/report-schema.md), how it scores, and a whole run with
a fake `gpushim` whose programs write the reports themselves (crashes, timeouts and odd reports
included)."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "scripts/gpu/corpus"
_spec = importlib.util.spec_from_file_location("corpus_score", CORPUS / "score.py")
score = importlib.util.module_from_spec(_spec)
sys.modules["corpus_score"] = score
_spec.loader.exec_module(score)

VALUES = {"python": sys.executable, "bin": "/tmp/bin", "standins": "/tmp/standins"}


# ---------------------------------------------------------------------------------------------
# Manifests


def write_manifest(d: Path, programs, builds=(), files=None) -> Path:
    for name, text in (files or {"prog.py": "x = 1\ny = 2  # @leak\n"}).items():
        (d / name).write_text(text)
    m = d / "corpus.json"
    m.write_text(json.dumps({"schema": score.SCHEMA, "builds": list(builds), "programs": list(programs)}))
    return m


def leak_entry(**kw):
    e = {"name": "l", "command": ["{python}", "{dir}/prog.py", "{variant}"], "variants": ["fast", "slow"]}
    e.update({"leak": True, "line": "prog.py@leak", "holder": "history"})
    e.update(kw)
    return e


def test_a_leak_expands_to_its_fast_and_slow_variants_with_the_marked_line(tmp_path):
    m = write_manifest(tmp_path, [leak_entry(lost={"fast": 3, "slow": 4})])
    _, progs, _ = score.load_manifest(m, VALUES)
    assert [p.name for p in progs] == ["l-fast", "l-slow"]
    assert [p.lost for p in progs] == [3, 4]
    p = progs[0]
    assert (p.line, p.line_no, p.line_file) == ("prog.py:2", 2, str(tmp_path / "prog.py"))
    assert p.command == [sys.executable, f"{tmp_path}/prog.py", "fast"]
    assert p.holder == "history"


@pytest.mark.parametrize(
    ("entry", "files", "message"),
    [
        (leak_entry(line="prog.py@nope"), None, "0 lines of prog.py are marked @nope"),
        (leak_entry(), {"prog.py": "a  # @leak\nb  # @leak\n"}, "2 lines of prog.py are marked @leak"),
        (leak_entry(line="gone.py@leak"), None, "cannot read gone.py"),
        (leak_entry(variants=["fast"]), None, 'variants ["fast", "slow"]'),
        (leak_entry(line=None), None, "a leak needs 'line'"),
        ({"name": "n", "command": ["x"], "leak": False, "holder": "h"}, None, "a negative has no line"),
        ({"name": "n", "command": ["x"], "leak": False, "lost": 2}, None, "a negative has no line"),
        ({"name": "n", "command": ["x"], "leak": "yes"}, None, "'leak' must be true or false"),
        ({"name": "n", "command": ["{nope}"], "leak": False}, None, "unknown placeholder {nope}"),
        ({"name": "n", "command": ["x"], "leak": False, "colour": 1}, None, "unknown fields colour"),
        ({"name": "n", "command": ["x"], "leak": False, "needs": ["b"]}, None, "needs unknown builds b"),
        (leak_entry(lost=-1), None, "'lost' must be a count"),
        ({"name": "bad name", "command": ["x"], "leak": False}, None, "needs a name"),
    ],
)
def test_a_bad_manifest_is_refused_with_what_is_wrong(tmp_path, entry, files, message):
    m = write_manifest(tmp_path, [entry], files=files)
    with pytest.raises(score.ManifestError, match=None) as e:
        score.load_manifest(m, VALUES)
    assert message in str(e.value)


def test_two_programs_of_one_name_are_refused(tmp_path):
    neg = {"name": "n", "command": ["x"], "leak": False}
    m = write_manifest(tmp_path, [neg, neg])
    with pytest.raises(score.ManifestError, match="program names used twice: n"):
        score.load_manifest(m, VALUES)


def test_a_placeholder_without_a_value_is_refused(tmp_path):
    m = write_manifest(tmp_path, [{"name": "n", "command": ["{standins}/x"], "leak": False}])
    with pytest.raises(score.ManifestError, match="give --standins"):
        score.load_manifest(m, {**VALUES, "standins": None})


def corpus(manifest: str):
    return score.load_manifest(CORPUS / manifest, VALUES)


def test_the_gpu_corpus_is_as_issue_29_asks():
    builds, progs, _ = corpus("corpus.json")
    leaks = [p for p in progs if p.leak]
    negatives = [p for p in progs if not p.leak]
    assert len(progs) >= 60
    assert len(negatives) >= 30 and len(negatives) >= len(leaks)
    # Every leak comes as a fast and a slow variant.
    bases = {p.base for p in leaks}
    assert {(b, v) for b in bases for v in ("fast", "slow")} == {(p.base, p.variant) for p in leaks}
    frameworks = {p.framework for p in progs}
    for fw in ("torch", "torch.compile", "torch-amp", "jax", "cupy", "numba", "cuda-python"):
        assert fw in frameworks
    for fw in ("cxx-static", "cxx-shared", "cxx-ext"):
        assert fw in frameworks
    allocators = {p.env.get("PYTORCH_CUDA_ALLOC_CONF") for p in progs}
    assert {"backend:cudaMallocAsync", "expandable_segments:True"} <= allocators
    # Truly lost allocations are labelled, and only on leaks.
    assert sum(p.lost for p in progs) > 0 and all(p.leak for p in progs if p.lost)
    assert all(p.sanitizer for p in progs if p.framework in ("cxx-static", "cxx-shared", "cxx-ext", "cuda-python"))
    # Each build is used, and each one compiles with nvcc.
    used = {n for p in progs for n in p.needs}
    assert used == {b.name for b in builds}
    assert all(b.command[0] == "nvcc" for b in builds)


def test_the_stand_in_corpus_has_the_same_shape():
    builds, progs, _ = corpus("standin/corpus.json")
    leaks = [p for p in progs if p.leak]
    assert len([p for p in progs if not p.leak]) >= len(leaks) > 0
    assert {p.variant for p in leaks} == {"fast", "slow"}
    assert any(p.lost for p in progs) and any(p.holder for p in progs)
    # It needs only a C compiler besides the stand-ins.
    assert all(b.command[0] == "cc" for b in builds)


def test_every_corpus_python_file_compiles():
    files = sorted(CORPUS.rglob("*.py"))
    assert len(files) > 30
    for f in files:
        compile(f.read_text(), str(f), "exec")


# ---------------------------------------------------------------------------------------------
# Reading reports


def frame(function, file=None, line=None, internal=False):
    return {"function": function, "file": file, "line": line, "module": "", "address": "0x1", "internal": internal}


def report(suspects=(), sites=(), lost=None, **extra):
    r = {"schema": "gpushim.report.v1", "reason": "exit", "sites": list(sites), "suspects": list(suspects), "notes": []}
    if lost is not None:
        r["reachability"] = {"status": "complete", "definitely_lost_count": lost}
    r.update(extra)
    return r


def suspect(site=1, headline=None, **extra):
    s = {"site": site, "score": 1.0, "reason": "+4.0 MiB per 1 ms"}
    if headline is not None:
        s["headline"] = headline
    s.update(extra)
    return s


def holders(*sites):
    """A holders file: (site id, [held-by texts]) per site."""
    return {
        "schema": "gpushim.holders.v1",
        "sites": [{"site": s, "holders": [{"how": "path", "text": t} for t in texts]} for s, texts in sites],
    }


@pytest.mark.parametrize(
    ("headline", "want"),
    [
        ("GPT.forward (gpt/model.py:105)", ("gpt/model.py", 105)),
        ("step (train.py:21) via Tensor.backward (autograd thread)", ("train.py", 21)),
        ("worker_gemm (src/file.cu:7) via cublasCreate_v2", ("src/file.cu", 7)),
        ("render(int) (native/x.cu:12)", ("native/x.cu", 12)),
        ("std::map<int, void*>::operator[](int const&) (x.cc:3)", ("x.cc", 3)),
        ("MulBackward0 (autograd thread)", None),
        ("libfoo.so+0x1234", None),
        ("", None),
        (None, None),
    ],
)
def test_the_place_of_a_headline(headline, want):
    assert score.place_of_headline(headline) == want


@pytest.mark.parametrize(
    ("got", "line", "want"),
    [
        ("programs/gpt/model.py", 105, True),
        ("gpt/model.py", 105, True),
        ("/abs/corpus/programs/gpt/model.py", 105, True),
        ("model.py", 105, True),
        ("gpt/model.py", 104, False),
        ("other/model.py", 105, False),
        ("gpt/train.py", 105, False),
        ("", 105, False),
    ],
)
def test_same_place_compares_the_line_and_the_ends_of_the_paths(got, line, want):
    assert score.same_place("/abs/corpus/programs/gpt/model.py", 105, got, line) is want


def program(leak=True, line_no=12, holder="history", lost=0, name="p"):
    return score.Program(
        name=name,
        base=name,
        variant="fast" if leak else None,
        framework="torch",
        command=["x"],
        env={},
        needs=[],
        leak=leak,
        line=f"progs/train.py:{line_no}" if leak else None,
        line_file="/c/progs/train.py" if leak else None,
        line_no=line_no if leak else None,
        holder=holder if leak else None,
        lost=lost,
        sanitizer=False,
        cost=1,
        timeout_s=None,
    )


def test_a_leak_whose_top_suspect_is_the_labelled_line_held_by_the_labelled_root_is_right():
    r = report([suspect(3, "step (progs/train.py:12)")], lost=0)
    h = holders((3, ["train.py global 'history' → list[*] → 40 objects (160.0 MiB)", "other"]))
    res = score.score_program(program(), r, h)
    assert (res["right"], res["detected"], res["headline_right"], res["holder_right"]) == (True, True, True, True)
    assert res["got"]["top_at"] == "progs/train.py:12"
    assert res["got"]["held_by"].startswith("train.py global 'history'")
    assert res["error"] is None


def test_only_the_top_suspect_counts():
    r = report([suspect(1, "x (progs/other.py:5)"), suspect(2, "step (progs/train.py:12)")])
    res = score.score_program(program(), r, None)
    assert (res["right"], res["detected"], res["headline_right"], res["holder_right"]) == (False, True, False, False)


def test_a_holder_name_counts_only_quoted_as_a_root():
    r = report([suspect(1, "step (progs/train.py:12)")])
    for text, want in [
        ("train.py global 'history' → list[*]", True),
        ("function 'main' (train.py:3) local 'history' in thread 'MainThread'", True),
        ("train.py global 'history_old' → list[*]", False),
        ("train.py global 'h' → history", False),
    ]:
        assert score.score_program(program(), r, holders((1, [text])))["holder_right"] is want, text


def test_the_held_by_line_of_a_union_of_one_lines_sites_is_its_first_member_with_holders():
    r = report([suspect(7, "step (progs/train.py:12)", line_sites=[5, 7])])
    h = holders((9, ["x.py global 'other'"]), (5, []), (7, ["train.py global 'history' → list[*]"]))
    assert score.score_program(program(), r, h)["got"]["held_by"] == "train.py global 'history' → list[*]"


def test_a_missed_leak_and_a_negative_with_a_suspect_are_wrong():
    missed = score.score_program(program(), report([], lost=0), holders())
    assert (missed["right"], missed["detected"], missed["holder_right"]) == (False, False, False)
    flagged = score.score_program(program(leak=False), report([suspect(1, "f (a.py:1)")], lost=0), None)
    assert (flagged["right"], flagged["detected"], flagged["headline_right"], flagged["holder_right"]) == (
        False,
        True,
        None,
        None,
    )
    clean = score.score_program(program(leak=False), report([], lost=0), None)
    assert (clean["right"], clean["detected"]) == (True, False)


def test_without_a_headline_the_sites_first_user_frame_names_the_suspect():
    frames = [frame("cudaMalloc", "/rt.c", 1, internal=True), frame("step", "/c/progs/train.py", 12)]
    r = report([suspect(4)], sites=[{"id": 4, "frames": frames}])
    res = score.score_program(program(), r, None)
    assert res["right"] and res["got"]["top"] == "step (/c/progs/train.py:12)"


def test_definitely_lost_counts_allocations_against_the_label():
    lost = score.score_program(program(lost=59), report([suspect(1, "f (progs/train.py:12)")], lost=59), None)
    assert (lost["lost_tp"], lost["lost_fp"], lost["lost_fn"]) == (59, 0, 0)
    short = score.score_program(program(lost=59), report([], lost=10), None)
    assert (short["lost_tp"], short["lost_fp"], short["lost_fn"]) == (10, 0, 49)
    false = score.score_program(program(leak=False), report([], lost=3), None)
    assert (false["lost_tp"], false["lost_fp"], false["lost_fn"], false["right"]) == (0, 3, 0, True)
    no_scan = score.score_program(program(lost=5), report([]), None)
    assert (no_scan["got"]["lost"], no_scan["lost_fn"]) == (None, 5)


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        {"suspects": "none"},
        {"suspects": [3]},
        {"suspects": [], "reachability": {"definitely_lost_count": "many"}},
        {"suspects": [{"site": 1, "headline": 5}], "sites": "x"},
    ],
)
def test_a_report_of_an_unexpected_shape_is_scored_wrong_not_a_crash(bad):
    res = score.score_program(program(lost=2), bad, {"sites": "odd"})
    assert res["error"].startswith("unexpected report shape")
    assert (res["right"], res["detected"], res["holder_right"], res["lost_fn"]) == (False, False, False, 2)
    neg = score.score_program(program(leak=False), bad, None)
    assert (neg["right"], neg["detected"]) == (False, True)


def test_an_odd_holders_file_only_loses_the_holder():
    r = report([suspect(1, "step (progs/train.py:12)")])
    for h in ({"sites": "x"}, {"sites": [1, {"site": 1, "holders": [3, {"text": None}]}]}, []):
        res = score.score_program(program(), r, h)
        assert (res["right"], res["holder_right"], res["error"]) == (True, False, None)


def test_an_error_is_wrong_in_every_measure():
    res = score.score_program(program(lost=4), None, None, error="timed out after 10 s")
    assert (res["right"], res["detected"], res["headline_right"], res["holder_right"]) == (False, False, False, False)
    assert res["lost_fn"] == 4
    neg = score.score_program(program(leak=False), None, None, error="exit status 1")
    assert (neg["right"], neg["detected"], neg["lost_fp"]) == (False, True, 0)


def test_totals():
    results = [
        score.score_program(program(name="a"), report([suspect(1, "s (progs/train.py:12)")], lost=0), None),
        score.score_program(program(name="b", holder=None), report([suspect(1, "s (x.py:1)")], lost=0), None),
        score.score_program(program(name="c", lost=10), report([], lost=8), None),
        score.score_program(program(leak=False, name="d"), report([], lost=2), None),
        score.score_program(program(leak=False, name="e"), report([suspect(1, "s (x.py:1)")]), None),
    ]
    t = score.totals(results)
    assert (t["programs"], t["leaks"], t["negatives"], t["errors"]) == (5, 3, 2, 0)
    assert (t["tp"], t["fp"], t["fn"], t["tn"]) == (2, 1, 1, 1)
    assert (t["precision"], t["recall"]) == (round(2 / 3, 4), round(2 / 3, 4))
    assert (t["right_count"], t["headline_count"], t["holder_count"], t["holder_programs"]) == (2, 1, 0, 2)
    assert (t["lost_tp"], t["lost_fp"], t["lost_fn"]) == (8, 2, 2)
    assert (t["lost_precision"], t["lost_recall"]) == (0.8, 0.8)
    assert t["by_variant"] == {"fast": {"programs": 3, "right": 1}, "negative": {"programs": 2, "right": 1}}
    empty = score.totals([score.score_program(program(leak=False), report([]), None)])
    assert (empty["precision"], empty["recall"], empty["lost_precision"], empty["holder"]) == (None, None, None, None)


def test_expect_min():
    assert score.parse_expect(["right=0.9,precision=0.95", "lost_precision=1"]) == {
        "right": 0.9,
        "precision": 0.95,
        "lost_precision": 1.0,
    }
    for bad in ["speed=1", "right", "right=high"]:
        with pytest.raises(ValueError, match="--expect-min"):
            score.parse_expect([bad])
    t = {"right": 0.8, "precision": None, "recall": 1.0}
    assert score.unmet(t, {"right": 0.8, "recall": 0.95}) == []
    assert score.unmet(t, {"right": 0.9, "precision": 0.0}) == ["right 0.80 < 0.9", "precision n/a < 0"]


def test_the_sanitizer_summary():
    text = "========= LEAK SUMMARY: 247463936 bytes leaked in 59 allocations\n========= ERROR SUMMARY: 59 errors\n"
    assert score.parse_sanitizer(text) == {"leaked_bytes": 247463936, "leaked_allocations": 59}
    assert score.parse_sanitizer("========= ERROR SUMMARY: 0 errors\n")["leaked_allocations"] == 0
    assert score.parse_sanitizer("Segmentation fault")["note"] == "no summary"


def test_the_final_report_is_the_programs_own(tmp_path):
    def put(name, ppid, allocs):
        (tmp_path / name).write_text(json.dumps({"ppid": ppid, "totals": {"alloc_count": allocs}}))

    put("gpushim-10.json", 1, 5)
    put("gpushim-11.json", 99, 1)
    put("gpushim-12.json", 11, 50)
    put("gpushim-11-snapshot-1.json", 99, 1000)
    (tmp_path / "gpushim-11.holders.json").write_text("{}")
    path, note = score.find_final_report(tmp_path, 99)
    assert path.name == "gpushim-11.json" and note == "3 final reports (child processes)"
    # Without a report of gpushim run's child: the one with the most allocations.
    assert score.find_final_report(tmp_path, 7)[0].name == "gpushim-12.json"
    (tmp_path / "gpushim-rank00001-13.1.json").write_text("not json")
    assert score.find_final_report(tmp_path, 7)[0].name == "gpushim-12.json"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert score.find_final_report(empty, 1) == (None, None)


def test_markdown_and_text_tables_have_a_row_per_program():
    results = [
        score.score_program(program(name="a|b"), report([suspect(1, "s (progs/train.py:12)")], lost=0), None),
        score.score_program(program(leak=False, name="n"), None, None, error="timed out after 5 s"),
    ]
    t = score.totals(results)
    md = score.markdown(results, t, {"manifest": "m.json", "gpushim_version": "0.1.0"})
    assert "| a\\|b | torch | leak progs/train.py:12 held by 'history' |" in md
    assert "| n | torch | negative | ERROR: timed out after 5 s | NO | - | 0 / - |" in md
    text = score.text_table(results, t)
    assert text.splitlines()[0].split() == ["program", "label", "got", "right", "holder", "lost"]
    assert "right              1/2  0.50" in text


# ---------------------------------------------------------------------------------------------
# A whole run with a fake gpushim

FAKE_GPUSHIM = """\
#!{python}
# A stand-in for `gpushim` in these tests: `run -o DIR -- CMD` runs CMD as its child with
# GPUSHIM_OUTPUT=DIR and passes its exit status on; `report` and `--version` print a line.
import os, subprocess, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("gpushim 9.9.9")
elif args[0] == "report":
    print("report of", args[1])
elif args[0] == "run":
    env = dict(os.environ, GPUSHIM_OUTPUT=args[2])
    sys.exit(subprocess.run(args[4:], env=env).returncode)
"""

FAKE_PROGRAM = """\
# Writes the report a mode asks for into $GPUSHIM_OUTPUT, as the collector would.
import json, os, sys, time
mode = sys.argv[1]
out = os.environ["GPUSHIM_OUTPUT"]
def write(doc, name=None):
    with open(os.path.join(out, name or f"gpushim-{os.getpid()}.json"), "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))
here = os.path.abspath(__file__)
line = next(i + 1 for i, text in enumerate(open(here)) if text.rstrip().endswith("# @leak"))
base = {"ppid": os.getppid(), "totals": {"alloc_count": 3}, "sites": [], "reachability": {"definitely_lost_count": 0}}
if mode == "leak":
    write({**base, "suspects": [{"site": 1, "headline": f"main ({here}:{line})"}]})
    write({"sites": [{"site": 1, "holders": [{"text": "prog.py global 'history' → list[*]"}]}]},
          f"gpushim-{os.getpid()}.holders.json")
elif mode == "clean":
    write({**base, "suspects": []})
elif mode == "crash":
    sys.exit(3)
elif mode == "hang":
    time.sleep(60)
elif mode == "garbage":
    write("{not json")
elif mode == "none":
    pass
"""


def fake_setup(tmp_path: Path) -> tuple[Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    g = bin_dir / "gpushim"
    g.write_text(FAKE_GPUSHIM.replace("{python}", sys.executable))
    g.chmod(0o755)
    (bin_dir / "libgpushim.so").write_text("")
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    entries = [
        {"name": "leaky", "command": ["{python}", "{dir}/prog.py", "leak"], "variants": ["fast", "slow"]},
        {"name": "clean", "command": ["{python}", "{dir}/prog.py", "clean"]},
        {"name": "crash", "command": ["{python}", "{dir}/prog.py", "crash"]},
        {"name": "hang", "command": ["{python}", "{dir}/prog.py", "hang"], "cost": 9},
        {"name": "garbage", "command": ["{python}", "{dir}/prog.py", "garbage"]},
        {"name": "none", "command": ["{python}", "{dir}/prog.py", "none"]},
        {"name": "unbuilt", "command": ["{bin}/unbuilt"], "needs": ["broken"]},
    ]
    for e in entries:
        e["leak"] = e["name"] == "leaky"
        if e["leak"]:
            e.update(line="prog.py@leak", holder="history")
    builds = [{"name": "broken", "command": ["sh", "-c", "echo cannot build >&2; exit 4"]}]
    prog = FAKE_PROGRAM.replace("mode = sys.argv[1]\n", "mode = sys.argv[1]  # @leak\n", 1)
    m = write_manifest(corpus_dir, entries, builds, files={"prog.py": prog})
    return g, m


def test_a_whole_run_scores_every_program_and_writes_its_results(tmp_path, capsys):
    g, m = fake_setup(tmp_path)
    out, work = tmp_path / "out", tmp_path / "work"
    args = ["--manifest", str(m), "--gpushim", str(g), "--out", str(out), "--work", str(work), "--jobs", "4"]
    rc = score.main([*args, "--timeout", "3", "--expect-min", "recall=1"])
    assert rc == 0, capsys.readouterr()
    doc = json.loads((out / "results.json").read_text())
    by = {r["name"]: r for r in doc["programs"]}
    assert list(by) == ["leaky-fast", "leaky-slow", "clean", "crash", "hang", "garbage", "none", "unbuilt"]
    assert by["leaky-fast"]["right"] and by["leaky-fast"]["holder_right"]
    assert by["clean"]["right"] and by["clean"]["error"] is None
    assert by["crash"]["error"] == "exit status 3"
    assert by["hang"]["error"] == "timed out after 3 s"
    assert by["garbage"]["error"].startswith("gpushim-") and "is not JSON" in by["garbage"]["error"]
    assert by["none"]["error"] == "no report"
    assert by["unbuilt"]["error"] == "build broken failed (exit 4): cannot build"
    assert doc["totals"]["errors"] == 5 and doc["totals"]["recall"] == 1.0
    assert doc["meta"]["gpushim_version"] == "9.9.9"
    for f in ("table.txt", "accuracy.md", "corpus-logs.tar.gz"):
        assert (out / f).is_file()
    assert (work / "runs/leaky-fast/report.txt").read_text().startswith("report of")
    printed = capsys.readouterr().out
    assert "leaky-fast" in printed and "right              3/8" in printed
    # A bound the run does not meet makes the exit status 1 (here: no lost allocation to count).
    rc = score.main([*args, "--only", "clean", "leaky", "--expect-min", "right=1,lost_precision=1", "--timeout", "3"])
    assert rc == 1
    assert [r["name"] for r in json.loads((out / "results.json").read_text())["programs"]] == [
        "leaky-fast",
        "leaky-slow",
        "clean",
    ]


def test_usage_errors_exit_2(tmp_path, capsys):
    g, m = fake_setup(tmp_path)
    base = ["--manifest", str(m), "--work", str(tmp_path / "w"), "--out", str(tmp_path / "o")]
    assert score.main([*base, "--gpushim", str(tmp_path / "nowhere")]) == 2
    assert score.main([*base, "--gpushim", str(g), "--only", "nothing*"]) == 2
    assert score.main([*base, "--expect-min", "speed=2"]) == 2
    assert score.main(["--manifest", str(tmp_path / "none.json")]) == 2
    assert score.main([*base, "--list"]) == 0
    assert "leaky-fast" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "w")


def test_past_the_deadline_programs_are_stopped_or_not_run_and_the_results_still_written(tmp_path):
    g, m = fake_setup(tmp_path)
    out = tmp_path / "out"
    args = ["--manifest", str(m), "--gpushim", str(g), "--out", str(out), "--work", str(tmp_path / "w")]
    assert score.main([*args, "--jobs", "1", "--deadline", "2", "--only", "hang", "clean"]) == 0
    by = {r["name"]: r for r in json.loads((out / "results.json").read_text())["programs"]}
    assert by["hang"]["error"].endswith("(the run's deadline)")
    assert by["clean"]["error"] == "not run: past the run's deadline (2 s)"
    assert "ERROR: not run" in (out / "accuracy.md").read_text()
