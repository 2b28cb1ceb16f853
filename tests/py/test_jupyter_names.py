"""python/gpushim/_jupyter.py: a place in a notebook cell is named one way, `In [4] line 2`, in
the diff's lines and in the collector's text shown in the notebook (`%gpushim report`,
`%gpushim diff`). The real kernel is tested in tests/pyapi.rs."""

from __future__ import annotations

import json
from types import SimpleNamespace

from gpushim import _jupyter

CELL = "/tmp/ipykernel_4711/2849048635.py"
OTHER = "/tmp/ipykernel_4711/1111.py"


def kernel(cells: dict) -> SimpleNamespace:
    return SimpleNamespace(compile=SimpleNamespace(_filename_map=cells))


def test_a_cell_is_named_by_its_execution_count():
    cells = {CELL: 4}
    assert _jupyter._cell_name(CELL, 2, cells) == "In [4] line 2"
    # A cell file IPython no longer maps is named by its file; another file is no cell's.
    assert _jupyter._cell_name(OTHER, 3, cells) == f"{OTHER} line 3"
    assert _jupyter._cell_name("/home/u/ws4/train.py", 66, cells) is None


def test_the_collectors_text_names_cells_as_the_diff_does():
    text = (
        "  +8.0 MiB  live 0 B -> 8.0 MiB in 0 -> 1; new site 3: <module> (ipykernel_4711/2849048635.py:2)\n"
        "    step (ws4/train.py:66)\n"
        "    f (ipykernel_4711/1111.py:7)\n"
    )
    got = _jupyter._name_cells(text, kernel({CELL: 4}))
    assert "<module> (In [4] line 2)" in got
    assert "step (ws4/train.py:66)" in got
    # A cell file the kernel does not know stays as the collector wrote it.
    assert "f (ipykernel_4711/1111.py:7)" in got
    assert _jupyter._name_cells(text, None) == text


def test_the_report_files_the_magic_writes_name_the_cells(tmp_path):
    """`%gpushim snapshot` and `%gpushim report` leave a file whose cell frames carry `cell`, the
    name `gpushim report` shows; other frames, and a file with no cell frame, stay as written."""

    def frame(file, line, python=True):
        return {"function": "<module>", "file": file, "line": line, "python": python}

    doc = {
        "sites": [{"id": 1, "frames": [frame(CELL, 2), frame("/home/u/ws4/train.py", 66)]}],
        "failures": [{"frames": [frame(CELL, 5)]}],
        "oom": None,
    }
    path = tmp_path / "gpushim-1-snapshot-1-mine.json"
    path.write_text(json.dumps(doc))
    _jupyter._name_cells_in_file(str(path), kernel({CELL: 4}))
    got = json.loads(path.read_text())
    assert got["sites"][0]["frames"][0]["cell"] == "In [4] line 2"
    assert "cell" not in got["sites"][0]["frames"][1]
    assert got["failures"][0]["frames"][0]["cell"] == "In [4] line 5"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]

    plain = tmp_path / "plain.json"
    text = json.dumps({"sites": [{"frames": [frame("/home/u/ws4/train.py", 66)]}]})
    plain.write_text(text)
    _jupyter._name_cells_in_file(str(plain), kernel({CELL: 4}))
    assert plain.read_text() == text
