"""gpushim: a GPU memory leak detector for CUDA programs (PyTorch, JAX, CuPy, Numba, C++, Rust).

The wheel holds the ``gpushim`` command (a Rust executable, installed in the environment's
scripts directory) and ``libgpushim.so`` (in this package), the library it preloads into the
traced program. Run ``gpushim run -- python train.py`` or ``python -m gpushim run -- ...``.

The Python API (works with or without the tracer loaded; without it, it says that tracing is
off and does nothing; it never raises):

- ``gpushim.snapshot(label=None)``: write a snapshot report now, return its path;
- ``gpushim.is_tracing()``: whether this process runs under ``libgpushim.so``;
- ``gpushim.report_path()``: where the final report will be written at exit.

In IPython/Jupyter, ``%load_ext gpushim`` adds the ``%gpushim`` magic (``gpushim._jupyter``);
with pytest, ``pytest --gpushim`` reports what each test left live (``gpushim.pytest_plugin``).
"""

from importlib import metadata as _metadata

from gpushim._api import holders_path, is_tracing, report_path, snapshot

try:
    # The wheel's version, which maturin takes from the Cargo workspace (workspace.package.version):
    # one number for the crates and the wheel.
    __version__: str = _metadata.version("gpushim")
except _metadata.PackageNotFoundError:  # imported from a checkout, not installed
    __version__ = "0+unknown"

__all__ = ["__version__", "holders_path", "is_tracing", "report_path", "snapshot"]


def load_ipython_extension(ipython) -> None:
    """``%load_ext gpushim``: the ``%gpushim`` magic and a snapshot after each cell."""
    from gpushim._jupyter import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    """``%unload_ext gpushim``: no more snapshots after each cell."""
    from gpushim._jupyter import unload

    unload(ipython)
