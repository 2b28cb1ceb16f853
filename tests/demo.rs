//! `gpushim demo`: the bundled examples run with the stand-ins, found beside the build's
//! executable (`target/<profile>/standins`, the link build.rs makes) or in an installed wheel's
//! package (`gpushim/_demo/`); without them, one line saying how to get them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::*;

/// The line of `file` (1-based) that holds `text`, for the suspect's `file:line`.
fn line_of(file: &str, text: &str) -> usize {
    let src = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    src.lines().position(|l| l.contains(text)).unwrap_or_else(|| panic!("no {text:?} in {file}")) + 1
}

/// `gpushim demo` of the executable `exe`, with `args`, no preload and no stand-ins on the
/// search path, and `PATH` as given.
fn demo(exe: &Path, args: &[&str], path: &str) -> Output {
    Command::new(exe)
        .arg("demo")
        .args(args)
        .env_remove("LD_PRELOAD")
        .env_remove("LD_LIBRARY_PATH")
        .env("PATH", path)
        .output()
        .unwrap()
}

/// The number after `pat` in `line`.
fn number_after(line: &str, pat: &str) -> u64 {
    let at = line.find(pat).unwrap_or_else(|| panic!("no {pat:?} in {line:?}")) + pat.len();
    line[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
}

/// The one final report (`gpushim-PID.json`) in `dir`.
fn final_report(dir: &Path, all: &str) -> serde_json::Value {
    let names: Vec<String> = names_in(dir)
        .into_iter()
        .filter(|n| n.starts_with("gpushim-") && n.ends_with(".json") && !n.ends_with(".holders.json"))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}\n{all}");
    read_json(&dir.join(&names[0]), &all)
}

#[test]
fn demo_runs_the_c_and_python_examples_and_finds_both_leaks() {
    let dir = TempDir::new("demo");
    let out = demo(&collector(), &["--output", dir.path().to_str().unwrap()], &std::env::var("PATH").unwrap());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let all = format!("status {}\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}", out.status);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(!stderr.contains("panicked"), "{all}");
    let link = bin_dir().join("standins");
    let first = stderr.lines().next().unwrap_or("");
    assert_eq!(
        first,
        format!(
            "gpushim demo: the stand-in CUDA libraries of {}; reports go to {}",
            link.display(),
            dir.path().display()
        ),
        "{all}"
    );
    // The link build.rs made names a build of the stand-ins the tests use: every library of
    // theirs is there. (Not always the same directory: `cargo clippy` runs the build script
    // too, in a build directory of its own, and the link follows the last build.)
    let names = |d: &std::path::Path| -> std::collections::BTreeSet<String> {
        fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("lib") && n.contains(".so"))
            .collect()
    };
    let (ours, linked) = (names(&standins()), names(&fs::canonicalize(&link).unwrap()));
    assert!(!ours.is_empty() && ours.is_subset(&linked), "{ours:?} against {linked:?}");

    // The C example: gpushim run's summary, the report for a person, the demo's verdict.
    let c_line = line_of("examples/leak.c", "cudaMalloc((void **)&s");
    let suspect = stderr
        .lines()
        .find(|l| l.starts_with("gpushim: suspect #1 site ") && l.contains("at render (examples/leak.c:"))
        .unwrap_or_else(|| panic!("no suspect #1 at render (examples/leak.c){all}"));
    assert!(suspect.contains(&format!("at render (examples/leak.c:{c_line})")), "{all}");
    // Nearly all of the 200 definitely lost; a stale copy on a stack may keep one reachable (below).
    assert!(suspect.contains(" of 200 allocations definitely lost "), "{all}");
    let lost: Option<u64> = suspect.split(": ").nth(2).and_then(|t| t.split(' ').next()?.parse().ok());
    assert!(lost.is_some_and(|n| (190..=200).contains(&n)), "{suspect}{all}");
    let verdict = stderr
        .lines()
        .find(|l| l.starts_with("gpushim demo: examples/leak.c: found the leak: "))
        .unwrap_or_else(|| panic!("no verdict for leak.c{all}"));
    let want = format!(
        "gpushim demo: examples/leak.c: found the leak: suspect #1 is render (examples/leak.c:{c_line}), 200 allocations \
         live, "
    );
    assert!(verdict.starts_with(&want), "{verdict:?} does not start with {want:?}{all}");
    // A conservative scan may keep one or two reachable through a stale word (as in
    // examples::c_example_render_leak_is_the_top_suspect): at most the 200, nearly all found.
    let lost = number_after(verdict, "live, ");
    assert!(verdict.ends_with(" definitely lost") && (190..=200).contains(&lost), "{verdict}{all}");
    let definitely = stderr
        .lines()
        .find(|l| l.starts_with("gpushim: pid ") && l.contains(": definitely lost: "))
        .unwrap_or_else(|| panic!("no definitely lost line{all}"));
    assert!((190..=201).contains(&number_after(definitely, " in ")), "{definitely}{all}");
    let r = final_report(&dir.path().join("c"), &all);
    assert_eq!(total(&r, "live_bytes"), 232 * MIB, "200 frames × 1 MiB and the 32 MiB model{all}");
    assert!(r["command"][0].as_str().unwrap().ends_with("/standins/leak_example"), "{all}");
    // The report for a person, on stdout.
    assert!(stdout.contains(&format!("render (examples/leak.c:{c_line})")), "{all}");

    // The Python example (python3 is on the tests' PATH: tests/python.rs needs it too).
    let py_line = line_of("examples/leak.py", "check(rt.cudaMalloc(ctypes.byref(p), MIB)");
    let verdict = stderr
        .lines()
        .find(|l| l.starts_with("gpushim demo: examples/leak.py: found the leak: "))
        .unwrap_or_else(|| panic!("no verdict for leak.py{all}"));
    assert!(
        verdict.starts_with(&format!(
            "gpushim demo: examples/leak.py: found the leak: suspect #1 is render (examples/leak.py:{py_line}), 200 \
             allocations live"
        )),
        "{verdict}{all}"
    );
    // It ran the copy it made beside the reports, which the report names as the demo does.
    let script = dir.path().join("examples/leak.py");
    assert!(stderr.contains(&format!(" {} 200\n", script.display())) && script.is_file(), "{all}");
    assert!(stderr.contains(&format!(" allocated at render (examples/leak.py:{py_line})\n")), "{all}");
    assert!(!all.contains("standins/leak.py"), "{all}");
    // The model is main()'s local, freed when main returns; the 200 scratch buffers stay in
    // the global list until the interpreter's teardown.
    let r = final_report(&dir.path().join("python"), &all);
    assert_eq!(total(&r, "live_bytes"), 200 * MIB, "{all}");
    assert!(stdout.contains("examples/leak.py global 'history'"), "who holds the buffers{all}");
    // The demo turned NVML off itself: the reports say so, and never blame a setting of the user's;
    // without a GPU neither the summary nor the text report has a line of where the GPU memory is.
    let note = r["gpu_memory"][0]["driver_note"].as_str().unwrap_or_default();
    assert!(!all.contains("GPUSHIM_NVML=0") && note.contains("NVML is off in the demo"), "{note}{all}");
    assert!(!all.contains("GPU 0 memory"), "{all}");
    assert_eq!(
        stderr.lines().last(),
        Some(format!(
            "gpushim demo: done: every example's leak was found; the reports are in {}",
            dir.path().display()
        ))
        .as_deref(),
        "{all}"
    );
}

/// `-o DIR` where an earlier run left reports (`DIR/c`, `DIR/python`): the demo counts only the
/// reports its own runs wrote, so it finds both leaks and leaves the old files as they were.
#[test]
fn demo_into_a_directory_with_old_reports_counts_only_its_own() {
    let dir = TempDir::new("demo-again");
    let old = [("c", "gpushim-1.json"), ("python", "gpushim-rank00000-2.json")];
    for (sub, name) in old {
        fs::create_dir_all(dir.path().join(sub)).unwrap();
        fs::write(dir.path().join(sub).join(name), "{\"old\": true}").unwrap();
    }
    let out = demo(&collector(), &["-o", dir.path().to_str().unwrap()], &std::env::var("PATH").unwrap());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let all = format!("status {}\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}", out.status);
    assert_eq!(out.status.code(), Some(0), "{all}");
    for ex in ["examples/leak.c", "examples/leak.py"] {
        let verdict = format!("gpushim demo: {ex}: found the leak: suspect #1 is render ({ex}:");
        assert!(stderr.lines().any(|l| l.starts_with(&verdict)), "no {verdict:?}{all}");
    }
    for (sub, name) in old {
        assert_eq!(fs::read_to_string(dir.path().join(sub).join(name)).unwrap(), "{\"old\": true}", "{all}");
        let reports: Vec<String> = names_in(&dir.path().join(sub))
            .into_iter()
            .filter(|n| n.starts_with("gpushim-") && n.ends_with(".json") && !n.contains(".holders") && n != name)
            .filter(|n| !n.contains(".reach"))
            .collect();
        assert_eq!(reports.len(), 1, "one new report in {sub}: {reports:?}{all}");
    }
}

/// A scratch directory beside the build (the same file system, so the executable is linked,
/// not copied: a copy just written can fail to run with ETXTBSY while another test forks).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = bin_dir().join(format!("demo-test-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("bin")).unwrap();
        Scratch(d)
    }

    /// `bin/gpushim`: the build's executable under another path.
    fn gpushim(&self) -> PathBuf {
        let exe = self.0.join("bin/gpushim");
        fs::hard_link(collector(), &exe).unwrap();
        exe
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

#[test]
fn demo_without_the_standins_says_how_to_get_them_in_one_line() {
    let s = Scratch::new("none");
    let exe = s.gpushim();
    fs::hard_link(shim(), s.0.join("bin/libgpushim.so")).unwrap();
    let out = demo(&exe, &[], "/usr/bin:/bin");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(out.stdout, b"", "{err}");
    assert_eq!(
        err,
        format!(
            "gpushim: demo: the stand-in CUDA libraries are not installed: no {}/bin/standins and no gpushim Python \
             package with _demo/ under {}; in a checkout build them with `cargo build --release` at its root, else \
             reinstall the wheel (pip install gpushim-*.whl)\n",
            s.0.display(),
            s.0.display()
        )
    );
    // A directory without the example: what is missing, in one line.
    fs::create_dir(s.0.join("bin/standins")).unwrap();
    fs::copy(standin("libcuda.so.1"), s.0.join("bin/standins/libcuda.so.1")).unwrap();
    let out = demo(&exe, &[], "/usr/bin:/bin");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        format!(
            "gpushim: demo: the stand-ins' directory {}/bin/standins lacks leak_example, libcudart.so.13; in a \
             checkout rebuild them with `cargo build --release` at its root, else reinstall the wheel (pip install \
             gpushim-*.whl)\n",
            s.0.display()
        )
    );
}

/// An installed wheel's layout (`PREFIX/bin/gpushim`, the package in
/// `PREFIX/lib/pythonX.Y/site-packages/gpushim/` with `_demo/`): the demo finds its files
/// there; with no python3 beside gpushim or on `PATH` it runs the C example alone and says so.
#[test]
fn demo_finds_the_standins_in_an_installed_wheels_package() {
    let s = Scratch::new("wheel");
    let exe = s.gpushim();
    let package = s.0.join("lib/python3.12/site-packages/gpushim");
    fs::create_dir_all(package.join("_demo")).unwrap();
    fs::hard_link(shim(), package.join("libgpushim.so")).unwrap();
    for f in ["leak_example", "libcudart.so.13", "libcuda.so.1", "leak.py"] {
        fs::copy(standin(f), package.join("_demo").join(f)).unwrap();
    }
    let out_dir = s.0.join("reports");
    let out = demo(&exe, &["-o", out_dir.to_str().unwrap()], "/nonexistent");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let all = format!("status {}\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}", out.status);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("gpushim demo: ")).collect();
    assert_eq!(lines.len(), 5, "{all}");
    assert_eq!(
        lines[0],
        format!(
            "gpushim demo: the stand-in CUDA libraries of {}; reports go to {}",
            package.join("_demo").display(),
            out_dir.display()
        ),
        "{all}"
    );
    assert_eq!(lines[1], "gpushim demo: examples/leak.py is skipped: no python3 beside gpushim nor on PATH", "{all}");
    assert_eq!(
        lines[2],
        format!("gpushim demo: examples/leak.c: gpushim run -- {} 200", package.join("_demo/leak_example").display()),
        "{all}"
    );
    let c_line = line_of("examples/leak.c", "cudaMalloc((void **)&s");
    assert!(
        lines[3].starts_with(&format!(
            "gpushim demo: examples/leak.c: found the leak: suspect #1 is render (examples/leak.c:{c_line}), 200 \
             allocations live, "
        )),
        "{all}"
    );
    let r = final_report(&out_dir.join("c"), &all);
    assert_eq!(total(&r, "live_bytes"), 232 * MIB, "{all}");
    assert!(!out_dir.join("python").exists(), "{all}");
}
