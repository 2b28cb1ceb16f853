"""gpushim: a GPU memory leak detector for CUDA programs (PyTorch, JAX, CuPy, Numba, C++, Rust).

The wheel holds the ``gpushim`` command (a Rust executable, installed in the environment's
scripts directory) and ``libgpushim.so`` (in this package), the library it preloads into the
traced program. Run ``gpushim run -- python train.py`` or ``python -m gpushim run -- ...``.
"""

from importlib import metadata as _metadata

try:
    # The wheel's version, which maturin takes from the Cargo workspace (workspace.package.version):
    # one number for the crates and the wheel.
    __version__: str = _metadata.version("gpushim")
except _metadata.PackageNotFoundError:  # imported from a checkout, not installed
    __version__ = "0+unknown"
