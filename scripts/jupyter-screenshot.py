"""Writes docs/images/jupyter-diff.png: a real Jupyter kernel under gpushim (started from a kernel
spec made by ``gpushim kernel install``, on the CUDA stand-ins, as tests/pyapi.rs does) runs a
short notebook whose last cell leaks, and its cells with their outputs, exactly as the kernel
returned them, are drawn as a notebook page and photographed in headless Chromium.

Usage (scripts/screenshots.sh runs it): python scripts/jupyter-screenshot.py GPUSHIM STANDINS OUT.png
with GPUSHIM the built ``gpushim``, STANDINS the stand-ins' directory (target/debug/standins) and
the Python of target/py-tools (ipykernel, jupyter_client, playwright).
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CELLS = [
    "%load_ext gpushim",
    "import ctypes, os\ncudart = ctypes.CDLL(os.environ['CUDART'])\nhistory = []",
    "class Activations:\n"
    "    # A device buffer, as CuPy's and Numba's arrays describe theirs\n"
    "    def __init__(self, ptr):\n"
    "        self.__cuda_array_interface__ = {\n"
    "            'shape': (8 << 20,), 'typestr': '|u1', 'data': (ptr, False), 'version': 3}\n"
    "\n"
    "def forward():\n"
    "    p = ctypes.c_void_p()\n"
    "    assert cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(8 << 20)) == 0\n"
    "    return Activations(p.value)",
    "for step in range(3):\n    out = forward()\n    history.append(out)  # kept by mistake",
    "%gpushim diff",
]


def run_kernel(gpushim: str, standins: str, work: Path) -> list[tuple[int | None, str, str]]:
    """(execution count, source, output) of each cell, run in a kernel under gpushim."""
    prefix = work / "prefix"
    subprocess.run(
        [gpushim, "kernel", "install", "--name", "gpushim-shot", "--prefix", str(prefix), "--python", sys.executable],
        check=True,
        capture_output=True,
    )
    env = dict(os.environ)
    env.update(
        JUPYTER_PATH=str(prefix / "share/jupyter"),
        JUPYTER_RUNTIME_DIR=str(work / "runtime"),
        IPYTHONDIR=str(work / "ipython"),
        CUDART=str(Path(standins) / "libcudart.so.13"),
        LD_LIBRARY_PATH=standins,
        GPUSHIM_COLLECTOR=gpushim,
        GPUSHIM_OUTPUT=str(work),
        PYTHONPATH=str(ROOT / "python"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    os.environ.update(env)
    sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
    from jupyter_check import run_cells

    outs = run_cells("gpushim-shot", CELLS, timeout=120, cwd=str(work))
    return [(count, code, text) for code, (_, text, count) in zip(CELLS, outs, strict=True)]


def page(cells: list[tuple[int | None, str, str]]) -> str:
    rows = []
    for n, code, out in cells:
        rows.append(
            '<div class="cell"><div class="prompt">In [{}]:</div><pre class="code">{}</pre></div>'.format(
                n if n is not None else " ", html.escape(code)
            )
        )
        if out.strip():
            rows.append(f'<div class="cell"><div class="prompt"></div><pre class="out">{html.escape(out)}</pre></div>')
    return (
        "<!doctype html><meta charset=utf-8><style>"
        "body{font:13px/1.4 ui-monospace,DejaVu Sans Mono,monospace;margin:16px;background:#fff;color:#212121}"
        ".cell{display:flex;margin:4px 0}.prompt{width:70px;flex:none;color:#303f9f;text-align:right;"
        "padding:6px 8px 0 0}.code{flex:1;background:#f5f5f5;border:1px solid #e0e0e0;border-radius:2px;"
        "padding:6px;margin:0;white-space:pre-wrap}.out{flex:1;margin:0;padding:2px 6px;white-space:pre-wrap}"
        "</style>" + "".join(rows)
    )


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    gpushim, standins, out = sys.argv[1:]
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        print("jupyter-screenshot: chromium is not installed", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="gpushim-shot-") as tmp:
        work = Path(tmp)
        cells = run_kernel(gpushim, standins, work)
        if "left alive by notebook cells" not in cells[-1][2]:
            print(f"jupyter-screenshot: the diff cell said:\n{cells[-1][2]}", file=sys.stderr)
            return 1
        doc = work / "notebook.html"
        doc.write_text(page(cells))
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
            tab = browser.new_page(viewport={"width": 1000, "height": 600})
            tab.goto(doc.as_uri())
            tab.screenshot(path=out, full_page=True)
            browser.close()
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
