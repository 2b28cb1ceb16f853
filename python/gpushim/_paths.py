"""Where the installed ``gpushim`` executable and ``libgpushim.so`` are.

An installed wheel puts the library in this package's directory and the executable in the
scripts directory of the environment it was installed into (``PREFIX/bin``, with this package in
``PREFIX/lib/pythonX.Y/site-packages/gpushim``). Imported from a checkout instead, the two are
those of a cargo build: ``target/release`` (or ``$CARGO_TARGET_DIR/release``) of the checkout.
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_LIBRARY = "libgpushim.so"
_EXECUTABLE = "gpushim"


def _checkout_release() -> list[Path]:
    """The cargo build's release directories of the checkout this file is in, if it is in one."""
    root = _PACKAGE.parent.parent  # python/gpushim -> python -> the checkout
    if not (root / "Cargo.toml").is_file():
        return []
    dirs = []
    target = os.environ.get("CARGO_TARGET_DIR")
    if target:
        dirs.append(Path(target if os.path.isabs(target) else root / target) / "release")
    dirs.append(root / "target" / "release")
    return dirs


def _scripts_dirs() -> list[Path]:
    """Where pip puts a wheel's scripts for this package's install, most specific first."""
    dirs = []
    # PREFIX/lib/pythonX.Y/site-packages/gpushim -> PREFIX/bin: the prefix this copy is in.
    parents = _PACKAGE.parents
    if len(parents) >= 4 and parents[0].name in ("site-packages", "dist-packages"):
        dirs.append(parents[3] / "bin")
    for scheme in (None, f"{os.name}_user"):
        try:
            path = sysconfig.get_path("scripts") if scheme is None else sysconfig.get_path("scripts", scheme)
        except KeyError:
            continue
        if path:
            dirs.append(Path(path))
    return dirs


def _first_file(candidates: list[Path], what: str, executable: bool) -> str:
    for path in candidates:
        if path.is_file() and (not executable or os.access(path, os.X_OK)):
            return str(path)
    looked = ", ".join(str(p) for p in candidates) or "nowhere"
    raise FileNotFoundError(
        f"gpushim: {what} not found (looked at {looked}); reinstall the wheel (pip install gpushim-*.whl) "
        "or, in a checkout, build it with `cargo build --release`"
    )


def collector_path() -> str:
    """The absolute path of the ``gpushim`` executable of this installation.

    Raises FileNotFoundError, naming the places looked at, when there is none.
    """
    dirs = _scripts_dirs() + _checkout_release()
    return _first_file([d / _EXECUTABLE for d in dirs], "the gpushim executable", executable=True)


def preload_path() -> str:
    """The absolute path of ``libgpushim.so`` (for ``LD_PRELOAD``) of this installation.

    Raises FileNotFoundError, naming the places looked at, when there is none.
    """
    dirs = [_PACKAGE, *_checkout_release()]
    return _first_file([d / _LIBRARY for d in dirs], _LIBRARY, executable=False)
