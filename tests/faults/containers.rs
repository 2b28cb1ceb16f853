//! Containers, emulated with real PID namespaces (`unshare --pid --fork --mount-proc`, as
//! root): the program as PID 1 (`docker run IMAGE prog` without `--init`, a Kubernetes
//! container's entrypoint), under a minimal init that exits with its child (`docker run
//! --init`, tini), and `gpushim run` inside and outside the namespace. When PID 1 of a
//! namespace exits, the kernel kills every other process of it, the collector included: the
//! report was lost, with no line.

use std::process::Command;

use crate::util::*;

const UNSHARE: [&str; 4] = ["unshare", "--pid", "--fork", "--mount-proc"];

/// The collector's command line, as words.
fn cmdline(pid: i32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

#[test]
fn the_program_as_pid_1_of_a_pid_namespace_gets_its_report() {
    let t = Target::new("target_dynamic", "pid1").args(&["pause", "0"]);
    let mut live = Live::spawn(t.command_under(&UNSHARE), format!("unshare … {}", t.describe()));
    assert_eq!(live.line(), "ready");
    let c = the_collector(t.dir.path());
    assert!(cmdline(c).contains(&"--hold-exit".to_string()), "{:?}", cmdline(c));
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    assert_eq!(d.pid(), 1, "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!(r["reason"], "exit", "{d}");
    assert_eq!(total(&r, "live_bytes"), 3 * MIB, "{d}");
    assert!(d.stderr.contains("gpushim: report written to "), "{d}");
}

#[test]
fn the_program_under_an_init_that_exits_with_it_gets_its_report() {
    // sh as PID 1 runs the program as its child (no exec: a command follows) and exits with
    // its status, as tini and `docker run --init` do.
    let t = Target::new("target_dynamic", "init-child").args(&["pause", "0"]);
    let mut wrapper = UNSHARE.to_vec();
    wrapper.extend(["sh", "-c", "\"$@\"; exit $?", "sh"]);
    let mut live = Live::spawn(t.command_under(&wrapper), format!("unshare … sh -c … {}", t.describe()));
    assert_eq!(live.line(), "ready");
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    assert_ne!(d.pid(), 1, "{d}");
    let r = d.report_in(t.dir.path());
    assert_eq!((r["reason"].as_str(), total(&r, "live_bytes")), (Some("exit"), 3 * MIB), "{d}");
}

#[test]
fn outside_a_container_the_exit_does_not_wait_for_the_report() {
    // The README's promise: the exit waits only until the stream is read.
    let t = Target::new("target_dynamic", "no-hold").args(&["pause", "0"]);
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let c = the_collector(t.dir.path());
    assert!(!cmdline(c).contains(&"--hold-exit".to_string()), "{:?}", cmdline(c));
    let d = live.finish();
    assert!(d.status.success(), "{d}");
}

#[test]
fn gpushim_run_inside_and_outside_a_pid_namespace_gets_the_report() {
    // Outside, `run` could not reach the program's collector (its notify pipe was named
    // through /proc, which the namespace's own /proc does not show): "no CUDA allocations:
    // no report", and the program's exit killed the collector.
    for (name, inside) in [("run-outside", false), ("run-inside", true)] {
        let dir = TempDir::new(name);
        let run = [
            collector().display().to_string(),
            "run".into(),
            "-o".into(),
            dir.path().display().to_string(),
            "--".into(),
        ];
        let mut words: Vec<String> = if inside { UNSHARE.iter().map(|s| s.to_string()).collect() } else { vec![] };
        words.extend(run);
        if !inside {
            words.extend(UNSHARE.iter().map(|s| s.to_string()));
        }
        let mut cmd = Command::new(&words[0]);
        cmd.args(&words[1..])
            .arg(standin("target_dynamic"))
            .args(["pause", "0"])
            .env("LD_LIBRARY_PATH", standins())
            .env_remove("LD_PRELOAD");
        let mut live = Live::spawn(cmd, words.join(" "));
        assert_eq!(live.line(), "ready");
        let d = live.finish();
        assert!(d.status.success(), "{name}{d}");
        assert!(!d.stderr.contains("no CUDA allocations"), "{name}{d}");
        let r = d.report_in(dir.path());
        assert_eq!((r["reason"].as_str(), total(&r, "live_bytes")), (Some("exit"), 3 * MIB), "{name}{d}");
    }
}

#[test]
fn in_a_pid_namespace_the_untraced_figure_is_marked_unknown() {
    // NVML lists the machine's pids, not the container's: the program's figure would be
    // another process's or none, silently. (The stand-in lists the pid the program sees.)
    let t = Target::new("hostile", "nvml-container").args(&["nvml-growth"]);
    let file = t.dir.path().join("nvml.txt");
    // No query will come: the program need not wait for one.
    std::fs::write(t.dir.path().join("nvml.txt.queries"), "").unwrap();
    let t = t
        .env("GPUSHIM_STANDIN_NVML", file.display())
        .env("GPUSHIM_NVML_LIB", standin("libnvidia-ml.so.1").display())
        .env("GPUSHIM_NVML_INTERVAL_MS", 5);
    let d = Live::spawn(t.command_under(&UNSHARE), format!("unshare … {}", t.describe())).finish();
    assert!(d.status.success(), "{d}");
    let r = d.report_in(t.dir.path());
    let g = &r["gpu_memory"][0];
    assert_eq!(g["traced_bytes"], 21 * MIB, "{d}");
    assert_eq!((&g["driver_bytes"], &g["untraced_bytes"]), (&serde_json::Value::Null, &serde_json::Value::Null), "{d}");
    let note = g["driver_note"].as_str().unwrap_or_default();
    assert!(note.starts_with("unknown: the program runs in a PID namespace of its own"), "{note}{d}");
}

#[test]
fn a_snapshot_by_the_hosts_pid_of_a_program_in_a_pid_namespace() {
    // The collector and the files know the program by the pid it has in its namespace (1):
    // `gpushim snapshot HOSTPID` said it "has made no CUDA allocation yet".
    let t = Target::new("target_dynamic", "host-pid").args(&["pause", "0"]);
    let mut live = Live::spawn(t.command_under(&UNSHARE), format!("unshare … {}", t.describe()));
    assert_eq!(live.line(), "ready");
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", live.pid)).unwrap_or_default();
    let host_pid: i32 = match children.split_whitespace().collect::<Vec<_>>()[..] {
        [one] => one.parse().unwrap(),
        ref other => live.abort(&format!("unshare's children: {other:?}")),
    };
    assert_ne!(host_pid, 1);
    let path = take_snapshot(host_pid);
    assert!(path.ends_with("gpushim-1-snapshot-1.json"), "{path}");
    let snap = read_json(std::path::Path::new(&path), &path);
    assert_eq!((snap["pid"].as_u64(), total(&snap, "live_bytes")), (Some(1), MIB), "{path}");
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    assert_eq!(total(&d.report_in(t.dir.path()), "live_bytes"), 3 * MIB, "{d}");
}

#[test]
fn the_program_as_pid_1_that_ends_with_quick_exits_gets_its_report() {
    // `_exit`, `_Exit` and `quick_exit` run no exit handler: the stream was ended and sent, but
    // the exit did not wait for the collector, which the kernel killed with PID 1 before it wrote.
    for how in ["_exit", "_Exit", "quick_exit"] {
        let t = Target::new("target_dynamic", &format!("pid1-{how}")).args(&["quick-end", how]);
        let d = Live::spawn(t.command_under(&UNSHARE), format!("unshare … {}", t.describe())).finish();
        assert_eq!(d.status.code(), Some(5), "{how}{d}");
        let r = d.report_in(t.dir.path());
        assert_eq!((r["reason"].as_str(), total(&r, "alloc_count")), (Some("exit"), 100), "{how}{d}");
    }
}
