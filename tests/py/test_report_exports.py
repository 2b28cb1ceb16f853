"""The report's exports on the bundled example (examples/leak.c, run as scripts/demo.sh runs it, on
the CUDA stand-ins): the HTML page opened offline in headless Chromium (driven by Playwright), and
the torch-snapshot pickle loaded with Python's pickle and checked against the keys of
torch.cuda.memory._snapshot().

Needs the workspace built (`cargo build --workspace` and `cargo test --no-run`, which
scripts/test.sh does first) for the gpushim binary and the stand-ins. The browser tests need
Chromium (Debian's `chromium`; .ci/run installs it): without one they are skipped with a message,
except under CI (the CI variable set), where its absence fails."""

import json
import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
if not TARGET.is_absolute():
    TARGET = ROOT / TARGET
BIN = TARGET / "debug" / "gpushim"


def standins() -> Path:
    """The newest stand-ins directory the tests' build script made."""
    dirs = sorted((TARGET / "debug" / "build").glob("gpushim-tests-*/out/standins"), key=lambda p: p.stat().st_mtime)
    if not dirs or not BIN.exists():
        pytest.fail(f"no gpushim build under {TARGET}: run `cargo build --workspace && cargo test --no-run` first")
    return dirs[-1]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The bundled example's final report (200 frames, as scripts/demo.sh runs it): (path, JSON)."""
    out = tmp_path_factory.mktemp("demo")
    s = standins()
    env = {**os.environ, "LD_LIBRARY_PATH": str(s)}
    env.pop("LD_PRELOAD", None)
    env.pop("GPUSHIM_HTML", None)
    # Run from its directory, so that the report (and the README's picture) names it `./leak_example`.
    run = subprocess.run(
        [BIN, "run", "--output", out, "--", "./leak_example", "200"], cwd=s, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    (path,) = out.glob("gpushim-*.json")
    return path, json.loads(path.read_text())


def export(report: Path, fmt: str, dest: Path) -> Path:
    run = subprocess.run([BIN, "report", report, "--format", fmt, "-o", dest], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return dest


# ---- torch-snapshot ----

# The keys of torch.cuda.memory._snapshot(), from the docstring of `_snapshot` in PyTorch's
# torch/cuda/memory.py (Snapshot, Segment, Block, Frame, TraceEntry); `device`, `requested_size`,
# `is_expandable` and `frames` per segment and `time_us` per trace entry are what its C++ side
# (torch/csrc/cuda/Module.cpp) adds, and `allocator_settings` the top level's third key.
SNAPSHOT_KEYS = {"segments", "device_traces", "allocator_settings"}
SEGMENT_KEYS = {
    "address",
    "total_size",
    "stream",
    "segment_type",
    "segment_pool_id",
    "allocated_size",
    "active_size",
    "blocks",
    "device",
    "requested_size",
    "is_expandable",
    "frames",
}
BLOCK_KEYS = {"size", "requested_size", "address", "state", "frames"}
FRAME_KEYS = {"filename", "line", "name"}
TRACE_KEYS = {"action", "addr", "frames", "size", "stream", "time_us"}
OOM_TRACE_KEYS = (TRACE_KEYS - {"addr"}) | {"device_free"}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom", "snapshot"}
STATES = {"active_allocated", "active_awaiting_free", "inactive", "unknown"}


def test_torch_snapshot_has_the_keys_of_torch(demo, tmp_path):
    path, report = demo
    with export(path, "torch-snapshot", tmp_path / "snap.pickle").open("rb") as f:
        snap = pickle.load(f)
    assert set(snap) == SNAPSHOT_KEYS
    segs = snap["segments"]
    # One segment per live device allocation: 200 frames of 1 MiB, the 32 MiB model, 1 other.
    live = [a for a in report["allocations"] if a["kind"] != "pinned_host"]
    assert len(segs) == len(live) == report["totals"]["live_count"]
    assert sum(s["total_size"] for s in segs) == report["kinds"]["device"]["live_bytes"]
    assert sum(s["total_size"] == 1 << 20 for s in segs) == 200
    for s in segs:
        assert set(s) == SEGMENT_KEYS, s.keys()
        assert s["segment_type"] == ("small" if s["total_size"] <= 2 << 20 else "large")
        assert isinstance(s["segment_pool_id"], tuple)
        assert sum(b["size"] for b in s["blocks"]) == s["total_size"]
        for b in s["blocks"]:
            assert set(b) == BLOCK_KEYS
            assert b["state"] in STATES
        for fr in s["frames"]:
            assert set(fr) == FRAME_KEYS
    # The leak's frames name the function that allocates (examples/leak.c).
    names = {fr["name"] for s in segs for fr in s["frames"]}
    assert {"render", "load_model", "main"} <= names
    traces = snap["device_traces"]
    assert len(traces) == 1
    assert [e["action"] for e in traces[0]] == ["segment_alloc"] * len(segs)
    for e in traces[0]:
        assert set(e) == (OOM_TRACE_KEYS if e["action"] == "oom" else TRACE_KEYS)
        assert e["action"] in ACTIONS
    assert [e["time_us"] for e in traces[0]] == sorted(e["time_us"] for e in traces[0])


# ---- the HTML page in a browser ----


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but chromium is not installed (.ci/run installs Debian's chromium)")
        pytest.skip("chromium not installed (Debian: apt-get install chromium): HTML report not tested in a browser")
    return exe


def top_suspect_function(report) -> str:
    site = next(s for s in report["sites"] if s["id"] == report["suspects"][0]["site"])
    return next(f["function"] for f in site["frames"] if not f["internal"])


def holders_beside(path: Path, report, dest: Path) -> Path:
    """A copy of the report at `dest` with a heap walk's companion file beside it that says who
    holds the top suspect's memory (the C example has no Python heap to walk)."""
    shutil.copy(path, dest)
    site = report["suspects"][0]["site"]
    line = {"how": "path", "path": ["leak.py global 'frames'", "list[*]"], "objects": 200, "bytes": 200 << 20}
    line["text"] = "leak.py global 'frames' \u2192 list[*] \u2192 200 objects (200.0 MiB)"
    empty = {"live_bytes": 0, "objects": 0, "object_bytes": 0, "in_use_bytes": 0, "cached_bytes": 0}
    holders = {
        "schema": "gpushim.holders.v1",
        "pid": report["pid"],
        "reason": "exit",
        "walk": {"status": "complete", "elapsed_s": 0.01, "objects_visited": 1, "objects_found": 200, "message": "m"},
        "sites": [{**empty, "site": site, "live_bytes": 200 << 20, "holders": [line], "top_objects": []}],
        "unattributed": {**empty, "holders": [], "top_objects": []},
    }
    dest.with_suffix(".holders.json").write_text(json.dumps(holders))
    return dest


def test_html_report_in_a_browser(demo, tmp_path):
    exe = chromium()
    from playwright.sync_api import sync_playwright

    path, report = demo
    plain = export(path, "html", tmp_path / "report.html")
    held = export(holders_beside(path, report, tmp_path / "gpushim-1.json"), "html", tmp_path / "held.html")
    assert plain.stat().st_size < 1 << 20
    pages = {plain.as_uri(), held.as_uri()}
    requests, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})

        def block(route):
            requests.append(route.request.url)
            route.abort()

        # Anything but the pages themselves is a network request the page must not make.
        page.route(lambda u: u not in pages, block)
        page.on("request", lambda r: r.url not in pages and requests.append(r.url))
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(plain.as_uri())
        page.wait_for_load_state("load")

        canvas = page.locator("#chart canvas").first.bounding_box()
        assert canvas and canvas["width"] > 0 and canvas["height"] > 0
        # The bytes axis ticks at round binary steps, labelled as such (not 476.8 MiB).
        splits = page.evaluate("() => window.gpushimChart.axes[1]._splits")
        assert len(splits) >= 2
        step = int(splits[1] - splits[0])
        assert step == splits[1] - splits[0] and step > 0 and step & (step - 1) == 0, splits
        # The legend shows values without a pointer over the chart, one line per series drawn.
        legend = page.locator(".u-legend").inner_text()
        assert "MiB" in legend, legend
        assert "GPU 0" in legend and legend.count("GPU 0") == 1, legend
        flame = page.locator("#flame svg").first.bounding_box()
        assert flame and flame["width"] > 0 and flame["height"] > 0
        func = top_suspect_function(report)
        assert func == "render"
        assert func in page.locator("#suspects").inner_text()

        # Clicking a frame narrower than the graph zooms: it then spans the whole width.
        frame = page.locator('#flame svg g.frame[name="load_model"]').first
        before = frame.bounding_box()["width"]
        assert 0 < before < flame["width"] * 0.9
        frame.click()
        page.wait_for_function(
            "w => [...document.querySelectorAll('#flame svg g.frame[name=load_model] rect')].some("
            "r => r.getBoundingClientRect().width > w)",
            arg=flame["width"] * 0.9,
        )
        # Reset: the leak's frame is back to most of the width (200 of 232 MiB).
        page.locator("#flame-reset").click()
        page.wait_for_function(
            "w => [...document.querySelectorAll('#flame svg g.frame[name=render] rect')].some("
            "r => r.getBoundingClientRect().width > w)",
            arg=flame["width"] * 0.8,
        )
        # The README's picture (docs/images/html-report.png is a copy of it).
        page.screenshot(path=str(TARGET / "html-report.png"), full_page=True)

        # Search highlights the matching frames and sums their bytes.
        page.fill("#flame-search", "leak.c")
        page.wait_for_function("() => document.getElementById('flame-details').textContent.includes('of 232.0 MiB')")

        # Weighted by bytes allocated, the site whose allocations were all freed appears.
        assert page.locator('#flame svg g.frame[name="frame_temp"]').count() == 0
        page.select_option("#flame-weight", "alloc_bytes")
        page.locator('#flame svg g.frame[name="frame_temp"]').first.wait_for()

        # The sites table sorts: live bytes descending first, ascending after a click on its header.
        first = page.locator("#sites-table tbody tr").first
        assert first.locator("td").nth(1).inner_text().startswith("render ")
        page.locator("#sites-table th[data-key=live_bytes]").click()
        assert first.locator("td").nth(3).inner_text() == "0 B"

        # The retention path from a holders file beside the report.
        page.goto(held.as_uri())
        page.wait_for_load_state("load")
        held_by = "leak.py global 'frames' \u2192 list[*] \u2192 200 objects (200.0 MiB)"
        assert held_by in page.locator("#suspects").inner_text()
        browser.close()
    assert errors == []
    assert requests == []
