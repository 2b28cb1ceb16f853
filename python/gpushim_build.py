"""The PEP 517 build backend of the gpushim wheel: maturin, plus ``libgpushim.so``.

maturin builds one crate per wheel: here the collector (``collector/Cargo.toml``, ``bindings =
"bin"``), whose ``gpushim`` executable goes to the wheel's scripts (the environment's ``bin/``),
with the ``gpushim`` Python package from ``python/``. The preloaded library is another crate
(``shim/``, a cdylib), so this backend builds it first with cargo, the same way maturin is asked to
build (the profile, and zig for an older glibc, from ``MATURIN_PEP517_ARGS``), and copies it to
``python/gpushim/libgpushim.so``, which ``[tool.maturin] include`` puts into the package. The same
cargo command builds the root package, whose build.rs compiles the C stand-ins for the CUDA
libraries; the few that ``gpushim demo`` runs (``DEMO_FILES``) are copied to
``python/gpushim/_demo/``, also put into the package by ``include``, and used by nothing else.
Every other hook is maturin's own.

``pip install .`` builds for this machine (maturin's default for PEP 517 builds: the plain
``linux`` tag). ``scripts/build-wheel.sh`` builds the wheel to hand out, tagged
``manylinux_2_28`` and linked with zig against glibc 2.28 (``--zig --compatibility
manylinux_2_28``), for which this backend asks for ``ziglang`` and ``cargo-zigbuild``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import maturin
from maturin import (
    build_sdist,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "python" / "gpushim" / "libgpushim.so"
# `gpushim demo`'s files (collector/src/cmd/demo.rs): the C example, the stand-in runtime and
# driver it loads, and the Python example.
DEMO = ROOT / "python" / "gpushim" / "_demo"
DEMO_FILES = ["leak_example", "libcudart.so.13", "libcuda.so.1", "leak.py"]
# Versions known to build this wheel (zig's linker for glibc 2.28, and cargo's driver for it).
ZIG_REQUIRES = ["ziglang==0.17.1", "cargo-zigbuild==0.24.1"]


def _args(config_settings: Mapping[str, Any] | None) -> list[str]:
    """The arguments maturin is given (``MATURIN_PEP517_ARGS`` or the config settings)."""
    return maturin.get_maturin_pep517_args(config_settings)


def _option(args: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in ``args``, the last one given."""
    value = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def _zig_glibc(args: list[str]) -> str | None:
    """The glibc version (``2.28``) to link against with zig, if ``--zig`` is asked for."""
    if "--zig" not in args:
        return None
    compat = _option(args, "--compatibility") or _option(args, "--manylinux") or "manylinux_2_17"
    if compat.startswith("manylinux_"):
        return compat.removeprefix("manylinux_").replace("_", ".")
    return {"manylinux2014": "2.17"}.get(compat, "2.17")


def _target_dir(cargo: str) -> Path:
    """The workspace's cargo target directory (CARGO_TARGET_DIR and cargo's settings honoured)."""
    out = subprocess.run(
        [cargo, "metadata", "--format-version", "1", "--no-deps"], cwd=ROOT, stdout=subprocess.PIPE, check=True
    ).stdout
    return Path(json.loads(out)["target_directory"])


def _build_library(args: list[str]) -> None:
    """Builds the shim with cargo as maturin will build the collector; copies it to LIBRARY."""
    glibc = _zig_glibc(args)
    profile = _option(args, "--profile") or "release"
    cargo = os.environ.get("CARGO", "cargo")
    command = [cargo, "build", "-p", "gpushim-shim", "-p", "gpushim-tests", "--profile", profile]
    if glibc is not None:
        # cargo-zigbuild: the glibc version rides on the target triple.
        zigbuild = shutil.which("cargo-zigbuild")
        if zigbuild is None:
            sys.exit("gpushim_build: --zig needs cargo-zigbuild (pip install " + " ".join(ZIG_REQUIRES) + ")")
        command = [zigbuild, "zigbuild", *command[2:], "--target", f"x86_64-unknown-linux-gnu.{glibc}"]
    command += ["--message-format", "json-render-diagnostics"]
    # build.rs builds only the demo's stand-ins, not the tests' programs (zig's linker fails on
    # some of those: a shared library linked with `-l:libcudart.so.13`).
    env = {**os.environ, "GPUSHIM_STANDINS_DEMO_ONLY": "1"}
    if glibc is not None:
        # A target directory of its own: cargo-zigbuild and maturin's zig set different flags, and
        # in one directory each build would rebuild the crates the other built (libc, ...).
        env["CARGO_TARGET_DIR"] = str(_target_dir(cargo) / "zig-shim")
    print("gpushim_build: running", shlex.join(command), file=sys.stderr, flush=True)
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, env=env, check=False)
    if result.returncode != 0:
        sys.exit(f"gpushim_build: building libgpushim.so failed ({shlex.join(command)})")
    built = None
    standins = None
    for line in result.stdout.decode(errors="replace").splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") == "compiler-artifact" and "cdylib" in msg.get("target", {}).get("kind", []):
            built = next((f for f in msg.get("filenames", []) if f.endswith(".so")), built)
        if msg.get("reason") == "build-script-executed":
            # build.rs names its directory for the tests: GPUSHIM_STANDINS.
            standins = next((v for k, v in msg.get("env", []) if k == "GPUSHIM_STANDINS"), standins)
    if built is None:
        sys.exit("gpushim_build: cargo named no libgpushim.so")
    if standins is None:
        sys.exit("gpushim_build: cargo named no stand-ins directory (GPUSHIM_STANDINS of build.rs)")
    LIBRARY.unlink(missing_ok=True)
    shutil.copyfile(built, LIBRARY)
    print(f"gpushim_build: {built} -> {LIBRARY}", file=sys.stderr, flush=True)
    _copy_demo(Path(standins))


def _copy_demo(standins: Path) -> None:
    """Copies ``gpushim demo``'s files from the stand-ins' directory to DEMO (replacing it)."""
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir(parents=True)
    for name in DEMO_FILES:
        source = standins / name
        if not source.is_file():
            sys.exit(f"gpushim_build: the stand-ins' directory {standins} has no {name}")
        shutil.copy2(source, DEMO / name)
    print(f"gpushim_build: {', '.join(DEMO_FILES)} of {standins} -> {DEMO}", file=sys.stderr, flush=True)


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    extra = ZIG_REQUIRES if _zig_glibc(_args(config_settings)) else []
    return [*maturin.get_requires_for_build_wheel(config_settings), *extra]


get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _build_library(_args(config_settings))
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _build_library(_args(config_settings))
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
