"""python/gpushim/_jupyter.py: a place in a notebook cell is named one way, `In [4] line 2`, in
the diff's lines and in the collector's text shown in the notebook (`%gpushim report`,
`%gpushim diff`). The real kernel is tested in tests/pyapi.rs."""

from __future__ import annotations

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
