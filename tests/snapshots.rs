//! Snapshots on SIGUSR1, from inside the program and from `gpushim snapshot`.

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
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let pid = live.pid;
    let printed = take_snapshot(pid);
    let expected = t.dir.path().join(format!("gpushim-{pid}-snapshot-1.json"));
    assert_eq!(printed, expected.display().to_string());
    let v = read_json(&expected, &t.describe());
    assert_eq!(total(&v, "live_bytes"), MIB);
    assert_eq!(sites_with(&v, "sleeper_before").len(), 1);
    // The end of stdin lets the program go on.
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    let fin = read_json(&t.dir.path().join(format!("gpushim-{pid}.json")), &d);
    assert_eq!(total(&fin, "live_bytes"), 3 * MIB);
}
