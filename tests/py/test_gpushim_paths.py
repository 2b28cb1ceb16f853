"""python/gpushim/_paths.py and __main__.py: where the installed executable and library are.

The wheel itself is tested end to end by scripts/test-wheel.sh; these cover the layouts it does
not install into: a checkout's cargo build, lib64 and dist-packages, and nothing found.
"""

from __future__ import annotations

import os
import stat
import sysconfig
from pathlib import Path

import gpushim.__main__ as main
import pytest
from gpushim import _paths


def touch(path: Path, executable: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def nowhere_else(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No scripts directory of the running Python has a gpushim, no CARGO_TARGET_DIR."""
    empty = tmp_path / "empty-scripts"
    empty.mkdir()
    monkeypatch.setattr(sysconfig, "get_path", lambda name, scheme=None: str(empty))
    monkeypatch.delenv("CARGO_TARGET_DIR", raising=False)


@pytest.mark.parametrize(
    "lib, packages", [("lib", "site-packages"), ("lib64", "site-packages"), ("lib", "dist-packages")]
)
def test_an_installed_wheel_has_the_library_in_the_package_and_the_executable_in_bin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, nowhere_else: None, lib: str, packages: str
) -> None:
    package = tmp_path / "venv" / lib / "python3.12" / packages / "gpushim"
    library = touch(package / "libgpushim.so")
    exe = touch(tmp_path / "venv" / "bin" / "gpushim", executable=True)
    monkeypatch.setattr(_paths, "_PACKAGE", package)
    assert _paths.preload_path() == str(library)
    assert _paths.collector_path() == str(exe)


def test_a_checkout_uses_the_cargo_release_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, nowhere_else: None):
    touch(tmp_path / "Cargo.toml")
    monkeypatch.setattr(_paths, "_PACKAGE", tmp_path / "python" / "gpushim")
    exe = touch(tmp_path / "target" / "release" / "gpushim", executable=True)
    library = touch(tmp_path / "target" / "release" / "libgpushim.so")
    assert (_paths.collector_path(), _paths.preload_path()) == (str(exe), str(library))
    # CARGO_TARGET_DIR (relative to the checkout) comes first.
    other = tmp_path / "elsewhere" / "release"
    exe2, library2 = touch(other / "gpushim", executable=True), touch(other / "libgpushim.so")
    monkeypatch.setenv("CARGO_TARGET_DIR", "elsewhere")
    assert (_paths.collector_path(), _paths.preload_path()) == (str(exe2), str(library2))


def test_nothing_found_says_where_it_looked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, nowhere_else: None):
    package = tmp_path / "lib" / "python3.12" / "site-packages" / "gpushim"
    package.mkdir(parents=True)
    touch(tmp_path / "bin" / "gpushim")  # not executable: not taken
    monkeypatch.setattr(_paths, "_PACKAGE", package)
    with pytest.raises(FileNotFoundError, match=r"libgpushim\.so not found \(looked at .*site-packages/gpushim/"):
        _paths.preload_path()
    with pytest.raises(FileNotFoundError, match=r"gpushim executable not found \(looked at .*/bin/gpushim"):
        _paths.collector_path()


def test_python_m_gpushim_execs_the_executable_with_the_same_arguments(monkeypatch: pytest.MonkeyPatch):
    calls = []
    monkeypatch.setattr(main, "collector_path", lambda: "/x/bin/gpushim")
    monkeypatch.setattr(os, "execv", lambda path, argv: calls.append((path, argv)))
    monkeypatch.setattr("sys.argv", ["python -m gpushim", "run", "--", "python", "-c", "pass"])
    main.main()
    assert calls == [("/x/bin/gpushim", ["gpushim", "run", "--", "python", "-c", "pass"])]


def test_python_m_gpushim_without_the_executable_exits_2(monkeypatch: pytest.MonkeyPatch, capsys):
    def missing() -> str:
        raise FileNotFoundError("gpushim: the gpushim executable not found (looked at nowhere)")

    monkeypatch.setattr(main, "collector_path", missing)
    with pytest.raises(SystemExit) as e:
        main.main()
    assert e.value.code == 2
    assert "not found" in capsys.readouterr().err
