//! The `gpushim` command line: run, report, diff; user mistakes get one clear line.

use std::process::Command;

use crate::util::*;

fn gpushim(args: &[&str]) -> std::process::Output {
    Command::new(collector()).args(args).env_remove("LD_PRELOAD").output().unwrap()
}

#[test]
fn run_sets_up_the_shim_and_forwards_the_exit_code() {
    let dir = TempDir::new("cli-run");
    let out = Command::new(collector())
        .args(["run", "--output", dir.path().to_str().unwrap(), "--"])
        .arg(standin("target_dynamic"))
        .arg("kinds")
        .env("LD_LIBRARY_PATH", standins())
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let reports: Vec<_> = std::fs::read_dir(dir.path()).unwrap().filter_map(|e| e.ok()).collect();
    assert_eq!(reports.len(), 1, "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(reports[0].path()).unwrap()).unwrap();
    assert_eq!(total(&v, "live_bytes"), 20 * MIB + 10240);
    // Exit codes pass through.
    let out = Command::new(collector()).args(["run", "--", "/bin/sh", "-c", "exit 7"]).output().unwrap();
    assert_eq!(out.status.code(), Some(7));
    let out = Command::new(collector()).args(["run", "--", "/nonexistent-program"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

#[test]
fn report_renders_text_and_rejects_garbage_in_one_line() {
    let run = Target::new("leak_example", "cli-report").args(&["20"]).run();
    run.success();
    let path = run.dir.path().join(&run.files()[0]);
    let out = gpushim(&["report", path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("render"), "{text}");
    assert!(text.contains("MiB"), "{text}");
    let bad = run.dir.path().join("bad.json");
    std::fs::write(&bad, "{ not json").unwrap();
    for arg in [bad.to_str().unwrap(), "/nonexistent/report.json"] {
        let out = gpushim(&["report", arg]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("gpushim: "), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn diff_ranks_the_growing_site_first() {
    let small = Target::new("leak_example", "cli-diff-a").args(&["10"]).run();
    let big = Target::new("leak_example", "cli-diff-b").args(&["30"]).run();
    small.success();
    big.success();
    let a = small.dir.path().join(&small.files()[0]);
    let b = big.dir.path().join(&big.files()[0]);
    let out = gpushim(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first_site_line = text.lines().find(|l| l.contains("render") || l.contains("load_model")).unwrap_or("");
    assert!(first_site_line.contains("render"), "{text}");
    assert!(text.contains("20.0 MiB"), "growth of 20 frames × 1 MiB{text}");
}
