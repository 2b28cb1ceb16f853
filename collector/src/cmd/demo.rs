//! `gpushim demo`: the bundled examples under the shim with the stand-in CUDA libraries, for
//! trying gpushim on a machine without a GPU.
//!
//! The stand-ins are small C libraries that do what the CUDA driver and runtime do for an
//! allocation (standins/, built by the workspace's build.rs). Two layouts have them:
//! - a cargo build: `standins` beside the `gpushim` executable (`target/release/standins`), a
//!   link build.rs makes to the directory it built them in;
//! - an installed wheel: `_demo/` in the `gpushim` Python package, beside `libgpushim.so`
//!   (python/gpushim_build.py copies the few files the demo needs there).
//!
//! Nothing else looks in either place: `gpushim run` and the shim never do. The demo names the
//! directory in `LD_LIBRARY_PATH` only for the `gpushim run` it starts (and so for the example
//! it runs), so the examples load the stand-ins, not a driver the machine may have.
//!
//! Each example runs as `gpushim run --output DIR/NAME -- PROGRAM 200` would: its summary on
//! stderr, then its report for a person on stdout. The demo then reads the report back and checks
//! that its first suspect is the example's leak, `render`.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{anyhow, Context, Result};

use crate::error::{coded, file_cause, DEMO_MISSED, USAGE};
use crate::render::format::Format;
use crate::render::TextOptions;
use crate::report::Report;

/// The stand-ins' directory beside the executable of a cargo build.
pub const CHECKOUT_DIR: &str = "standins";

/// The stand-ins' directory in the `gpushim` Python package of an installed wheel.
pub const WHEEL_DIR: &str = "_demo";

/// The files the C example needs: the program and the libraries it loads (the runtime links
/// the driver by `dlopen`).
pub const REQUIRED: [&str; 3] = ["leak_example", "libcudart.so.13", "libcuda.so.1"];

/// The Python example (examples/leak.py), beside the C one.
pub const PYTHON_EXAMPLE: &str = "leak.py";

/// Frames each example renders.
const FRAMES: &str = "200";

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Directory for the reports; a new one under the temporary directory if `None`.
    pub output: Option<PathBuf>,
}

/// The stand-ins' directory for the `gpushim` executable at `exe`: `standins` beside it (a
/// cargo build), else `_demo` beside the `libgpushim.so` of its installed wheel
/// ([`super::preload::find_library`]). The error is one line saying where it looked and how
/// to get them.
pub fn find_standins(exe: &Path) -> Result<PathBuf> {
    let dir = exe.parent().ok_or_else(|| anyhow!("the gpushim executable {} has no directory", exe.display()))?;
    let beside = dir.join(CHECKOUT_DIR);
    let wheel = super::preload::find_library(exe)
        .and_then(|lib| lib.parent().map(|p| p.join(WHEEL_DIR)))
        .filter(|d| d.is_dir());
    let Some(found) = Some(beside.clone()).filter(|d| d.is_dir()).or(wheel) else {
        return Err(coded(
            USAGE,
            format!(
                "demo: the stand-in CUDA libraries are not installed: no {} and no gpushim Python package with {WHEEL_DIR}/ \
                 under {}; in a checkout build them with `cargo build --release` at its root, else reinstall the wheel \
                 (pip install gpushim-*.whl)",
                beside.display(),
                dir.parent().unwrap_or(dir).display()
            ),
        ));
    };
    let missing: Vec<&str> = REQUIRED.iter().copied().filter(|f| !found.join(f).is_file()).collect();
    if !missing.is_empty() {
        return Err(coded(
            USAGE,
            format!(
                "demo: the stand-ins' directory {} lacks {}; in a checkout rebuild them with `cargo build --release` at \
                 its root, else reinstall the wheel (pip install gpushim-*.whl)",
                found.display(),
                missing.join(", ")
            ),
        ));
    }
    Ok(found)
}

/// A new, empty directory for the demo's reports under the temporary directory (`TMPDIR`).
fn fresh_dir() -> Result<PathBuf> {
    let base = std::env::temp_dir();
    let pid = std::process::id();
    for n in 0..1000u32 {
        let dir = base.join(format!("gpushim-demo-{pid}-{n}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(coded(USAGE, format!("demo: cannot make {}: {}", dir.display(), file_cause(&e))));
            }
        }
    }
    Err(coded(USAGE, format!("demo: cannot make a new gpushim-demo-{pid}-N directory in {}", base.display())))
}

/// The Python the example runs with: `python3` beside the `gpushim` executable (the environment
/// a wheel was installed into), else the first `python3` on `PATH`.
fn python(exe_dir: &Path) -> Option<PathBuf> {
    let beside = exe_dir.join("python3");
    if is_executable(&beside) {
        return Some(beside);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join("python3")).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// One example: its name in the messages, what to run, and the file its leak is in.
struct Example {
    name: &'static str,
    subdir: &'static str,
    command: Vec<OsString>,
    file: &'static str,
}

/// `gpushim demo`: runs the C example, then the Python one when a `python3` is found, each
/// under `gpushim run` with the stand-ins, prints their reports and checks that each names its
/// leak. Exit code 0 when every example that ran found its leak.
///
/// # Errors
/// Exit code 2 when the stand-ins, `libgpushim.so` or the output directory are missing ([`find_standins`]);
/// [`DEMO_MISSED`] when an example failed or its report did not have `render` as its first suspect.
pub fn run(opts: &Options) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the path of the gpushim executable")?;
    let standins = find_standins(&exe)?;
    super::preload::library()?;
    let out = match &opts.output {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| coded(USAGE, format!("demo: cannot make {}: {}", d.display(), file_cause(&e))))?;
            std::path::absolute(d).unwrap_or_else(|_| d.clone())
        }
        None => fresh_dir()?,
    };
    let say = |line: &str| {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "gpushim demo: {line}");
    };
    say(&format!("the stand-in CUDA libraries of {}; reports go to {}", standins.display(), out.display()));

    let mut examples = vec![Example {
        name: "examples/leak.c",
        subdir: "c",
        command: vec![standins.join("leak_example").into(), FRAMES.into()],
        file: "examples/leak.c",
    }];
    let script = standins.join(PYTHON_EXAMPLE);
    match (script.is_file(), python(exe.parent().unwrap_or(Path::new("/")))) {
        (true, Some(py)) => examples.push(Example {
            name: "examples/leak.py",
            subdir: "python",
            command: vec![py.into(), python_example(&script, &out)?.into(), FRAMES.into()],
            file: "examples/leak.py",
        }),
        (false, _) => say(&format!("examples/leak.py is skipped: no {}", script.display())),
        (true, None) => say("examples/leak.py is skipped: no python3 beside gpushim nor on PATH"),
    }

    for ex in &examples {
        let dir = out.join(ex.subdir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| coded(USAGE, format!("demo: cannot make {}: {}", dir.display(), file_cause(&e))))?;
        say(&format!("{}: gpushim run -- {}", ex.name, shown(&ex.command)));
        let report = run_example(&exe, &standins, &dir, ex)?;
        std::io::stdout().flush()?;
        super::report::run(&report, Format::Text, None, TextOptions::default())?;
        std::io::stdout().flush()?;
        say(&found_leak(&report, ex)?);
    }
    say(&format!("done: every example's leak was found; the reports are in {}", out.display()));
    Ok(ExitCode::SUCCESS)
}

/// The Python example as the demo runs it: the stand-ins' copy, copied to `examples/leak.py`
/// in the reports' directory `out`, so that the report names it as the demo does and as the
/// user finds it in a checkout (`render (examples/leak.py:66)`, `examples/leak.py global
/// 'history'`: a report names a file by its directory and its name), and the user can run it again.
fn python_example(script: &Path, out: &Path) -> Result<PathBuf> {
    let dir = out.join("examples");
    let copy = dir.join(PYTHON_EXAMPLE);
    std::fs::create_dir_all(&dir).and_then(|()| std::fs::copy(script, &copy)).map_err(|e| {
        coded(USAGE, format!("demo: cannot copy {} to {}: {}", script.display(), copy.display(), file_cause(&e)))
    })?;
    Ok(copy)
}

/// The command as a person would type it (arguments joined by spaces).
fn shown(command: &[OsString]) -> String {
    command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

/// Runs `gpushim run --output DIR -- COMMAND` with the stand-ins in `LD_LIBRARY_PATH`; the path
/// of the final report it wrote: the one final report in `DIR` that was not there before (a
/// report of an earlier demo into the same `-o DIR` is left alone and not counted).
fn run_example(exe: &Path, standins: &Path, dir: &Path, ex: &Example) -> Result<PathBuf> {
    let mut search = standins.as_os_str().to_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        search.push(":");
        search.push(old);
    }
    // Reports an earlier run left in the directory are not this run's.
    let before = final_reports(dir)?;
    let status = Command::new(exe)
        .arg("run")
        .arg("--output")
        .arg(dir)
        .arg("--")
        .args(&ex.command)
        .env("LD_LIBRARY_PATH", search)
        // The Python example loads this runtime, not another the loader might find first.
        .env("GPUSHIM_EXAMPLE_CUDART", standins.join("libcudart.so.13"))
        // The stand-ins have no NVIDIA driver to ask; the machine's would describe other programs.
        .env("GPUSHIM_NVML", "0")
        // So that the reports say NVML is off as the demo's doing, not as the user's setting.
        .env("GPUSHIM_RUN_DEMO", "1")
        .env_remove("LD_PRELOAD")
        .status()
        .with_context(|| format!("demo: cannot run {}", exe.display()))?;
    if !status.success() {
        return Err(coded(DEMO_MISSED, format!("demo: {} failed under gpushim run ({status})", ex.name)));
    }
    let reports: Vec<PathBuf> = final_reports(dir)?.into_iter().filter(|p| !before.contains(p)).collect();
    match reports.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(coded(
            DEMO_MISSED,
            format!("demo: {} wrote {} final reports in {}, not one", ex.name, reports.len(), dir.display()),
        )),
    }
}

/// The final reports in `dir` (`gpushim-<pid>.json`, `gpushim-rank<R>-<pid>.json`, either with
/// a `.<n>`), sorted.
fn final_reports(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut reports: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("demo: cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| crate::explain::identity::final_report_name(n).is_some())
        })
        .collect();
    reports.sort();
    Ok(reports)
}

/// The line that says the example's leak was found: its first suspect is `render` in the
/// example's file (named as the report names it: `render (examples/leak.c:57)`). An error when
/// it is not.
fn found_leak(path: &Path, ex: &Example) -> Result<String> {
    let report = Report::read(path).with_context(|| format!("demo: cannot read {}", path.display()))?;
    let top = report.suspects.first().and_then(|s| report.sites.iter().find(|site| site.id == s.site));
    let at = top.and_then(|site| {
        site.frames.iter().find(|f| f.function == "render" && f.file.as_deref().is_some_and(|p| p.ends_with(ex.file)))
    });
    let (Some(site), Some(frame)) = (top, at) else {
        return Err(coded(
            DEMO_MISSED,
            format!(
                "demo: {}'s report {} does not name render ({}) as its first suspect",
                ex.name,
                path.display(),
                ex.file
            ),
        ));
    };
    // A Python program's buffers are held by its objects (the report says by whom): none lost.
    let lost = site
        .reach
        .as_ref()
        .filter(|r| r.definitely_lost_count > 0)
        .map_or(String::new(), |r| format!(", {} definitely lost", r.definitely_lost_count));
    Ok(format!(
        "{}: found the leak: suspect #1 is {}, {} live{lost}",
        ex.name,
        crate::report::words::frame_label(frame),
        crate::report::words::count(site.live_count, "allocation")
    ))
}
