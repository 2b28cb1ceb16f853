//! Snapshots on SIGUSR1, from inside the program and from `gpushim snapshot`.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use crate::util::*;

fn pid_of(r: &serde_json::Value) -> u64 {
    r["pid"].as_u64().unwrap()
}

#[test]
fn sigusr1_snapshot_holds_exactly_the_allocations_before_the_signal() {
    let run = Target::new("target_dynamic", "snap").args(&["snapshot"]).run();
    run.success();
    let fin = run.report();
    let snap = run.snapshot(pid_of(&fin), 1);
    assert_eq!(snap["reason"], "snapshot", "{run}");
    assert_eq!(total(&snap, "live_bytes"), MIB, "{run}");
    assert_eq!(total(&snap, "live_count"), 1, "{run}");
    assert_eq!(sites_with(&snap, "snapshot_before").len(), 1, "{run}");
    assert!(sites_with(&snap, "snapshot_after").is_empty(), "{run}");
    assert_eq!(total(&fin, "live_bytes"), 3 * MIB, "{run}");
}

#[test]
fn gpushim_snapshot_from_outside() {
    let t = Target::new("target_dynamic", "snap-outside").args(&["sleep-snapshot"]);
    let mut child = t.command().stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let snap = std::process::Command::new(collector()).args(["snapshot", &child.id().to_string()]).output().unwrap();
    let printed = String::from_utf8_lossy(&snap.stdout).trim().to_string();
    assert!(snap.status.success(), "gpushim snapshot failed: {}", String::from_utf8_lossy(&snap.stderr));
    let expected = t.dir.path().join(format!("gpushim-{}-snapshot-1.json", child.id()));
    assert_eq!(printed, expected.display().to_string());
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&expected).unwrap()).unwrap();
    assert_eq!(total(&v, "live_bytes"), MIB);
    assert_eq!(sites_with(&v, "sleeper_before").len(), 1);
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    let fin: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(t.dir.path().join(format!("gpushim-{}.json", child.id()))).unwrap(),
    )
    .unwrap();
    assert_eq!(total(&fin, "live_bytes"), 3 * MIB);
}
