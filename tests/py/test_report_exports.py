"""The report's exports on the bundled example (examples/leak.c, run as scripts/demo.sh runs it, on
the CUDA stand-ins): the HTML page opened offline in headless Chromium (driven by Playwright), and
the torch-snapshot pickle loaded with Python's pickle and checked against the keys of
torch.cuda.memory._snapshot().

Needs the workspace built (`cargo build --workspace` and `cargo test --no-run`, which
scripts/test.sh does first) for the gpushim binary and the stand-ins. The browser tests need
Chromium (Debian's `chromium`; .ci/run installs it): without one they are skipped with a message,
except under CI (the CI variable set), where its absence fails."""

import contextlib
import json
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import zlib
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


@pytest.fixture(scope="module")
def py_example(tmp_path_factory):
    """The Python example's final report (examples/leak.py, 200 frames, on the stand-in runtime), with
    its heap walk's holders file beside it: (path, JSON)."""
    out = tmp_path_factory.mktemp("py-example")
    env = {**os.environ, "LD_LIBRARY_PATH": str(standins()), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("LD_PRELOAD", None)
    env.pop("GPUSHIM_HTML", None)
    script = ROOT / "examples" / "leak.py"
    run = subprocess.run(
        [BIN, "run", "--output", out, "--", sys.executable, script, "200"], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    (path,) = out.glob("gpushim-*[0-9].json")
    assert path.with_suffix(".holders.json").exists(), list(out.iterdir())
    return path, json.loads(path.read_text())


def short(path: str) -> str:
    """A file as the reports name it: its directory and its name."""
    return "/".join(path.split("/")[-2:])


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


@contextlib.contextmanager
def opened(page_path: Path, width: int = 1280, height: int = 900):
    """The page at `page_path`, loaded in headless Chromium (skipped without it; a failure in
    CI), for the `with` block."""
    exe = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(page_path.as_uri())
        page.wait_for_load_state("load")
        try:
            yield page
        finally:
            browser.close()


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
        # The flame graph names a file as the rest of the report does, by its directory and its
        # name, in its frames' tooltips and in the line that the frame under the pointer shows.
        leak_c = next(f["file"] for s in report["sites"] for f in s["frames"] if f["function"] == func)
        assert leak_c.startswith("/") and short(leak_c) == "examples/leak.c", leak_c
        titles = page.evaluate(
            "() => [...document.querySelectorAll('#flame svg g.frame title')].map((t) => t.textContent)"
        )
        assert "render (examples/leak.c): 200.0 MiB" in titles, titles
        assert "main (examples/leak.c): 232.0 MiB" in titles, titles
        assert not any("(/" in t for t in titles), titles
        page.locator('#flame svg g.frame[name="render"]').first.hover()
        assert page.locator("#flame-details").inner_text() == "render (examples/leak.c): 200.0 MiB"
        # Each card's label agrees with its number: "1 suspect", "0 failed allocations".
        cards = [" ".join(c.split()) for c in page.locator("#totals .card").all_inner_texts()]
        n = len(report["suspects"])
        assert f"{n} suspect" + ("" if n == 1 else "s") in cards, cards
        assert "0 failed allocations" in cards, cards
        assert func in page.locator("#suspects").inner_text()
        # The definitely lost total comes first, as on stderr and in the text report, and the
        # scan's line under the cards; the score is written as the text writes it (1.00).
        scan = report["reachability"]
        lost = scan["definitely_lost_count"]
        assert lost > 0 and cards[0] == f"{lost * 1.0:.1f} MiB definitely lost {lost} allocations", cards
        assert page.locator("#scan").inner_text().startswith(f"reachability scan complete: {lost} lost, "), cards
        score = f"{report['suspects'][0]['score']:.2f}"
        assert f"score {score}" in page.locator("#suspects .suspect").first.inner_text()
        # An exit report has no red lines to speak of.
        assert "Red line" not in page.locator("#timeline").inner_text()
        # The word list holds the words the page shows, and only those.
        shown = set(page.evaluate("() => [...document.querySelectorAll('abbr.term')].map((a) => a.title)"))
        listed = page.evaluate("() => [...document.querySelectorAll('#glossary dd')].map((d) => d.textContent)")
        assert listed and set(listed) == shown, (sorted(listed), sorted(shown))

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
        # Search highlights the matching frames and sums their bytes; it finds a frame by its
        # file's full path too.
        page.fill("#flame-search", "leak.c")
        page.wait_for_function("() => document.getElementById('flame-details').textContent.includes('of 232.0 MiB')")
        page.fill("#flame-search", "/no/such/dir/")
        page.wait_for_function("() => document.getElementById('flame-details').textContent === ''")
        page.fill("#flame-search", leak_c)
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


# ---- the page's layout at two widths, checked by measure and by pixels ----


def png_rgb(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and rows (3 bytes a pixel) of an 8-bit RGB or RGBA PNG, as Chromium writes
    its screenshots (not interlaced)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    assert head is not None
    w, h, depth, color, _, _, interlace = head
    assert depth == 8 and color in (2, 6) and interlace == 0, head
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        rows.append(bytes(line) if bpp == 3 else bytes(v for k, v in enumerate(line) if k % 4 != 3))
    return w, h, rows


def pixels(page, box) -> list[tuple[int, int, int]]:
    """The pixels of the page inside `box` (a bounding box of the page not scrolled, so in the
    page's coordinates), row by row; the box may lie below the window."""
    w, _, rows = png_rgb(page.screenshot(clip=box, full_page=True))
    return [tuple(r[3 * x : 3 * x + 3]) for r in rows for x in range(w)]


def near(p, hex_color: str, tol: int = 40) -> bool:
    want = bytes.fromhex(hex_color.lstrip("#"))
    return all(abs(a - b) <= tol for a, b in zip(p, want, strict=True))


# The flame graph's box (its content, inside the border) and the union of its frames' rectangles.
FLAME_GEOMETRY = """() => {
  const box = document.getElementById("flame");
  const b = box.getBoundingClientRect();
  const left = b.left + box.clientLeft;
  const rects = [...box.querySelectorAll("svg g.frame rect")].map((r) => r.getBoundingClientRect());
  const root = box.querySelector('svg g.frame[name="all"] rect').getBoundingClientRect();
  return {box: [left, left + box.clientWidth], rects: [Math.min(...rects.map((r) => r.left)),
          Math.max(...rects.map((r) => r.right))], root: root.width, frames: rects.length,
          page: [document.documentElement.scrollWidth, document.documentElement.clientWidth]};
}"""
# The frames lie inside the box and the outermost one spans it.
FLAME_FITS = (
    "() => { const g = (" + FLAME_GEOMETRY + ")(); return g.rects[0] >= g.box[0] - 0.5 && g.rects[1] <= g.box[1] + 0.5"
    " && Math.abs(g.root - (g.box[1] - g.box[0])) <= 1; }"
)


def test_html_report_layout_and_pixels_at_1000_and_1920_px(demo, tmp_path):
    """The flame graph is laid out to its box when the page has loaded and after a resize, at
    1000 and 1920 px, with the vertical scroll bar a desktop browser shows; the flame graph and
    the chart's legend are drawn (checked by the screenshot's pixels). With PAGE_SCREENSHOTS
    set to a directory (scripts/screenshots.sh: docs/images), the page's screenshots are written
    there as report-1000.png and report-1920.png."""
    exe = chromium()
    from playwright.sync_api import sync_playwright

    path, _ = demo
    html = export(path, "html", tmp_path / "report.html")
    shots = Path(os.environ.get("PAGE_SCREENSHOTS") or tmp_path)
    errors = []
    with sync_playwright() as p:
        # Playwright hides scroll bars by default; a desktop browser's takes room from the page.
        browser = p.chromium.launch(
            executable_path=exe, args=["--no-sandbox"], ignore_default_args=["--hide-scrollbars"]
        )
        for width in (1000, 1920):
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            # At load, with no animation frame waited for: laid out, inside its box.
            g = page.evaluate(FLAME_GEOMETRY)
            print(width, "px:", g)
            left, right = g["box"]
            assert g["frames"] == 4, g  # all, main, render, load_model
            assert g["page"][0] <= g["page"][1], f"the page overflows sideways: {g}"
            assert left - 0.5 <= g["rects"][0] and g["rects"][1] <= right + 0.5, g
            assert abs(g["root"] - (right - left)) <= 1, g
            assert (right - left) >= (width - 60 if width < 1400 else 1390), g

            # The flame graph by its pixels: frames are drawn in warm colours over the whole box's
            # width (render's 200 of 232 MiB from the left, load_model's 32 to the right).
            box = page.locator("#flame svg").bounding_box()
            px = pixels(page, box)
            bw = round(box["width"])
            warm = [i for i, c in enumerate(px) if c[0] > 180 and c[0] - c[2] > 60]
            assert len(warm) > 0.6 * len(px), (len(warm), len(px))
            cols = {i % bw for i in warm}
            assert {0, 1, bw - 2, bw - 1} & cols and len(cols) > 0.98 * bw, (len(cols), bw)
            # The legend by its pixels: text, and each line's colour in its marker.
            px = pixels(page, page.locator(".u-legend").bounding_box())
            assert sum(max(c) < 100 for c in px) > 300, "legend text"
            for colour in ("#1f77b4", "#2ca02c"):  # device (GPU 0), #1 render
                assert sum(near(c, colour) for c in px) >= 10, colour

            # Every glossary word the page marks has its meaning as a tooltip (README's table).
            terms = page.evaluate(
                "() => [...document.querySelectorAll('abbr.term')].map((a) => [a.textContent, a.title])"
            )
            meaning = dict(terms)
            assert meaning["score"].startswith("0 to 1: the mean of the share of its allocations never freed")
            assert meaning["definitely lost"].startswith("no pointer to the allocation is left")
            assert meaning["user code (direct calls)"].startswith("the allocator or library whose frames")
            assert all(t for _, t in terms), terms
            page.screenshot(path=str(shots / f"report-{width}.png"), full_page=True)

            # Resized to the other width, the graph follows its box.
            other = 1920 if width == 1000 else 1000
            page.set_viewport_size({"width": other, "height": 900})
            page.wait_for_function(FLAME_FITS)
            g = page.evaluate(FLAME_GEOMETRY)
            assert g["page"][0] <= g["page"][1], g
            page.close()
        browser.close()
    assert errors == []


def test_html_chart_line_of_a_suspect_of_several_sites_is_their_sum(demo, tmp_path):
    """A suspect of several sites (one cause) is charted as the sum of its sites' series, as its
    card's live bytes are (a new user saw the legend give one site's 60.0 MiB beside a card of
    90.0 MiB)."""

    path, _ = demo
    r = json.loads(Path(path).read_text())
    top = r["suspects"][0]
    site = next(s for s in r["sites"] if s["id"] == top["site"])
    twin = {**site, "id": max(s["id"] for s in r["sites"]) + 1}
    r["sites"].append(twin)
    top["sites"] = [site["id"], twin["id"]]
    top["live_bytes"] = 2 * site["live_bytes"]
    both = tmp_path / "gpushim-2.json"
    both.write_text(json.dumps(r))
    page_path = export(both, "html", tmp_path / "both.html")
    with opened(page_path) as page:
        last = page.evaluate(
            "() => { const c = window.gpushimChart;"
            " const i = c.series.findIndex((s) => s.label.startsWith('#1 ')); const d = c.data[i];"
            " for (let k = d.length - 1; k >= 0; k--) if (d[k] != null) return d[k]; return null; }"
        )
    assert last == 2 * site["live_bytes"], (last, site["live_bytes"])


def test_html_legend_of_a_suspect_ends_with_its_cards_live_bytes(demo, tmp_path):
    """A site's series misses the site's last change once the collector thins it (it records one
    change in 2, 4, ... after 256 points): the chart's line of the suspect still ends with the
    live bytes at the report's end, and the legend gives the number of the suspect's card."""

    path, _ = demo
    r = json.loads(Path(path).read_text())
    top = r["suspects"][0]
    site = next(s for s in r["sites"] if s["id"] == top["site"])
    assert site["series"][-1][1] == site["live_bytes"] == top["live_bytes"] == 200 << 20
    # As thinned: the last change (the 200th buffer) is not among the series' points.
    site["series"].pop()
    assert site["series"][-1][1] == 199 << 20
    thinned = tmp_path / "gpushim-3.json"
    thinned.write_text(json.dumps(r))
    page_path = export(thinned, "html", tmp_path / "thinned.html")
    with opened(page_path) as page:
        legend = page.evaluate(
            "() => [...document.querySelectorAll('.u-legend tr.u-series')].map((r) =>"
            " [r.querySelector('.u-label').textContent, r.querySelector('.u-value').textContent])"
        )
        last = page.evaluate(
            "() => { const c = window.gpushimChart;"
            " const i = c.series.findIndex((s) => s.label.startsWith('#1 ')); return c.data[i][c.data[i].length - 1]; }"
        )
        end = page.evaluate("() => window.gpushimChart.data[0].at(-1)")
        card = page.locator("#suspects .suspect").first.inner_text()
    shown = next(v for label, v in legend if label.startswith("#1 "))
    on_card = re.search(r"\u2014 (\S+ \S+) live in ", card)
    assert on_card, card
    assert shown == on_card.group(1) == "200.0 MiB", (legend, card)
    assert last == top["live_bytes"]
    assert end == r["duration_s"], "the chart runs to the report's end"


def test_html_card_of_a_suspect_of_the_sites_of_one_line_has_every_sites_holders(demo, tmp_path):
    """A suspect across two sites of one line: its card gives the holder lines the text report
    gives, every member site's, each headed by its site."""

    path, _ = demo
    r = json.loads(Path(path).read_text())
    top = r["suspects"][0]
    site = next(s for s in r["sites"] if s["id"] == top["site"])
    twin = {**site, "id": max(s["id"] for s in r["sites"]) + 1, "live_bytes": 100 << 20, "live_count": 100}
    r["sites"].append(twin)
    top["line_sites"] = [site["id"], twin["id"]]
    top["live_bytes"] += twin["live_bytes"]
    both = tmp_path / "gpushim-4.json"
    both.write_text(json.dumps(r))

    def member(sid, name, objects):
        live = objects << 20
        text = f"leak.py global '{name}' \u2192 list[*] \u2192 {objects} objects ({objects}.0 MiB)"
        line = {"how": "path", "path": [f"leak.py global '{name}'", "list[*]"], "objects": objects, "bytes": live}
        return {
            "site": sid,
            "live_bytes": live,
            "objects": objects,
            "object_bytes": live,
            "in_use_bytes": live,
            "in_use_from": "objects",
            "cached_bytes": 0,
            "holders": [{**line, "text": text}],
            "top_objects": [],
        }

    empty = {"live_bytes": 0, "objects": 0, "object_bytes": 0, "in_use_bytes": 0, "cached_bytes": 0}
    holders = {
        "schema": "gpushim.holders.v1",
        "pid": r["pid"],
        "reason": "exit",
        "walk": {"status": "complete", "elapsed_s": 0.01, "objects_visited": 1, "objects_found": 300, "message": "m"},
        "sites": [member(site["id"], "frames", 200), member(twin["id"], "spare", 100)],
        "unattributed": {**empty, "holders": [], "top_objects": []},
    }
    both.with_suffix(".holders.json").write_text(json.dumps(holders))
    want = [
        f"site {site['id']}: Python objects hold all 200.0 MiB live (200 objects, 200.0 MiB)",
        "held by: leak.py global 'frames' \u2192 list[*] \u2192 200 objects (200.0 MiB)",
        f"site {twin['id']}: Python objects hold all 100.0 MiB live (100 objects, 100.0 MiB)",
        "held by: leak.py global 'spare' \u2192 list[*] \u2192 100 objects (100.0 MiB)",
    ]
    text = export(both, "text", tmp_path / "both.txt").read_text()
    for line in want:
        assert f"      {line}\n" in text, (line, text)
    page_path = export(both, "html", tmp_path / "both.html")
    with opened(page_path) as page:
        shown = page.locator("#suspects .suspect").first.locator(".holders li").all_inner_texts()
    assert shown == want


def glossary_words_used(glossary, text: str) -> set[str]:
    """The glossary's words that `text` uses: each word's phrases (its marks, its marks in the
    scan's line, and the word itself when it is one phrase, quotes dropped) found as whole words,
    any case, longest first (as the page marks them: "definitely lost" is not also "lost")."""
    phrases = []
    for t in glossary:
        own = [] if "," in t["word"] else [t["word"].strip('"')]
        phrases += [(p, t["word"]) for p in own + t["marks"] + t.get("scan_marks", [])]
    phrases.sort(key=lambda p: -len(p[0]))
    pattern = "|".join(
        ("(?<!\\w)" if re.match(r"\w", p) else "") + re.escape(p) + ("(?!\\w)" if re.search(r"\w$", p) else "")
        for p, _ in phrases
    )
    word_of = {p.lower(): w for p, w in phrases}
    return {word_of[m.group(0).lower()] for m in re.finditer(pattern, text, re.IGNORECASE)}


def test_html_word_list_holds_every_glossary_word_the_page_uses(demo, py_example, tmp_path):
    """The page's "Words on this page" lists every glossary word its text uses, for the C and the
    Python example, and the Python example's report with memory the heap walk found no object in."""
    exe = chromium()
    from playwright.sync_api import sync_playwright

    r = json.loads(py_example[0].read_text())
    r["memory_kinds"][0]["kinds"].append({"kind": "no_object", "bytes": 1 << 20})
    r["memory_kinds"][0]["traced_bytes"] += 1 << 20
    no_object = tmp_path / "gpushim-5.json"
    no_object.write_text(json.dumps(r))
    pages = {
        "c": export(demo[0], "html", tmp_path / "c.html"),
        "py": export(py_example[0], "html", tmp_path / "py.html"),
        "no object": export(no_object, "html", tmp_path / "no-object.html"),
    }
    used, listed = {}, {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for name, html in pages.items():
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            glossary = page.evaluate("() => JSON.parse(document.getElementById('data').textContent).glossary")
            text = page.evaluate(
                "() => [...document.getElementById('app').children].filter((e) => e.id !== 'glossary')"
                ".map((e) => e.innerText).join('\\n')"
            )
            used[name] = glossary_words_used(glossary, text)
            listed[name] = set(page.locator("#glossary dt").all_inner_texts())
        browser.close()
    for name in pages:
        assert used[name] <= listed[name], (name, sorted(used[name] - listed[name]))
    # The pages use the words the page places itself (peak, traced) and those of the scan's line
    # (lost, read) and of the memory by kind (no object found).
    assert {"peak", "lost", '"read"'} <= used["c"], used["c"]
    assert {"peak", "traced", '"read"', "holders, held by:"} <= used["py"], used["py"]
    assert "no object found, allocated, no tensor found" in used["no object"], used["no object"]
