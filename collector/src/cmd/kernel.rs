//! `gpushim kernel install`: writes a Jupyter kernel spec (`kernel.json`) that starts ipykernel
//! with `libgpushim.so` preloaded, so that a notebook's kernel runs under the tracer (its
//! `LD_PRELOAD` cannot be set once the kernel started).
//!
//! The spec is the one `python -m ipykernel install` writes (`argv` running `ipykernel_launcher`
//! with the connection file), plus `env`: `LD_PRELOAD` (the library's absolute path) and
//! `GPUSHIM_COLLECTOR` (this executable), which Jupyter sets for the kernel's process
//! (jupyter_client's kernel specs, field `env`). In the notebook, `%load_ext gpushim` adds the
//! `%gpushim` magic (python/gpushim/_jupyter.py).

use std::env;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{anyhow, Context, Result};

use crate::error::{coded, USAGE};

/// Where the spec goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// The user's Jupyter data directory: `$JUPYTER_DATA_DIR`, else `$XDG_DATA_HOME/jupyter`,
    /// else `~/.local/share/jupyter` (jupyter_core's order on Linux).
    User,
    /// `PREFIX/share/jupyter` (a virtual environment's or conda environment's prefix).
    Prefix(PathBuf),
}

/// What `gpushim kernel install` was asked for.
#[derive(Clone, Debug)]
pub struct Options {
    /// The kernel's name (its directory), `[A-Za-z0-9._-]+`.
    pub name: String,
    /// The name shown in Jupyter's kernel list.
    pub display_name: Option<String>,
    /// Where the spec goes.
    pub place: Place,
    /// The Python that runs ipykernel (default: `python3` on PATH).
    pub python: Option<PathBuf>,
}

/// Writes the spec and prints its directory.
///
/// # Errors
/// Exit code 2 for a bad name, a Python or `libgpushim.so` that cannot be found, or a
/// directory that cannot be written (the message names it and the cause).
pub fn install(opts: &Options) -> Result<ExitCode> {
    if opts.name.is_empty() || !opts.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
        return Err(coded(USAGE, format!("kernel name {:?}: use letters, digits, '.', '_' and '-' only", opts.name)));
    }
    let exe = env::current_exe().context("cannot find the path of the gpushim executable")?;
    let lib = super::preload::find_library(&exe).map_or_else(super::preload::library, Ok)?;
    let python = match &opts.python {
        Some(p) => std::path::absolute(p).with_context(|| format!("cannot resolve {}", p.display()))?,
        None => on_path("python3").ok_or_else(|| {
            coded(USAGE, "python3 is not on PATH: name the Python that has ipykernel with --python PATH")
        })?,
    };
    if !python.is_file() {
        return Err(coded(USAGE, format!("{}: no such file (--python)", python.display())));
    }
    let dir = data_dir(&opts.place)?.join("kernels").join(&opts.name);
    fs::create_dir_all(&dir)
        .map_err(|e| coded(USAGE, format!("cannot create {}: {}", dir.display(), crate::error::file_cause(&e))))?;
    // From a checkout (a cargo build), the kernel's Python may not have the package: the
    // checkout's `python/` directory then goes on its PYTHONPATH.
    let pythonpath = if imports(&python, "gpushim") { None } else { checkout_package(&exe) };
    let mut spec = spec(&python, &lib, &exe, opts.display_name.as_deref().unwrap_or("Python 3 (gpushim)"));
    if let Some(p) = &pythonpath {
        spec["env"]["PYTHONPATH"] = serde_json::Value::from(p.to_string_lossy());
    }
    let file = dir.join("kernel.json");
    let mut text = serde_json::to_vec_pretty(&spec)?;
    text.push(b'\n');
    fs::write(&file, text)
        .map_err(|e| coded(USAGE, format!("cannot write {}: {}", file.display(), crate::error::file_cause(&e))))?;
    let mut out = io::stdout().lock();
    writeln!(out, "Installed kernel spec {} in {}", opts.name, dir.display())?;
    if !imports(&python, "ipykernel") {
        let _ = writeln!(
            io::stderr(),
            "gpushim: warning: {} cannot import ipykernel; install it there (pip install ipykernel)",
            python.display()
        );
    }
    if pythonpath.is_none() && !imports(&python, "gpushim") {
        let _ = writeln!(
            io::stderr(),
            "gpushim: warning: {} cannot import gpushim, so %load_ext gpushim will fail in the kernel; install \
             the gpushim wheel there",
            python.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The `kernel.json` document.
fn spec(python: &Path, lib: &Path, exe: &Path, display_name: &str) -> serde_json::Value {
    serde_json::json!({
        "argv": [python.to_string_lossy(), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "python",
        "env": {
            "LD_PRELOAD": lib.to_string_lossy(),
            "GPUSHIM_COLLECTOR": exe.to_string_lossy(),
        },
    })
}

/// The Jupyter data directory of `place`.
fn data_dir(place: &Place) -> Result<PathBuf> {
    let var = |k: &str| env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    Ok(match place {
        Place::Prefix(p) => std::path::absolute(p)?.join("share/jupyter"),
        Place::User => match (var("JUPYTER_DATA_DIR"), var("XDG_DATA_HOME"), var("HOME")) {
            (Some(d), _, _) => d,
            (None, Some(x), _) => x.join("jupyter"),
            (None, None, Some(h)) => h.join(".local/share/jupyter"),
            (None, None, None) => return Err(anyhow!("HOME is not set: use --prefix DIR")),
        },
    })
}

/// The first executable `name` in `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    env::split_paths(&env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
        .and_then(|p| std::path::absolute(p).ok())
}

/// The `python/` directory of the checkout whose build `exe` is (`<checkout>/target/<profile>/
/// gpushim`, or a few levels deeper with a target triple), if it holds the package.
fn checkout_package(exe: &Path) -> Option<PathBuf> {
    exe.ancestors().skip(1).take(5).map(|d| d.join("python")).find(|p| p.join("gpushim/__init__.py").is_file())
}

/// Whether `python` can import `module`.
fn imports(python: &Path, module: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {module}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_preloads_the_library_and_runs_ipykernel() {
        let s = spec(Path::new("/v/bin/python"), Path::new("/w/libgpushim.so"), Path::new("/w/gpushim"), "K");
        assert_eq!(
            s["argv"],
            serde_json::json!(["/v/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"])
        );
        assert_eq!(s["env"]["LD_PRELOAD"], "/w/libgpushim.so");
        assert_eq!(s["env"]["GPUSHIM_COLLECTOR"], "/w/gpushim");
        assert_eq!((s["display_name"].as_str(), s["language"].as_str()), (Some("K"), Some("python")));
    }

    #[test]
    fn prefix_places_the_spec_under_share_jupyter() {
        assert_eq!(data_dir(&Place::Prefix("/p".into())).unwrap(), PathBuf::from("/p/share/jupyter"));
    }
}
