//! The line the exit path says when it took a second or more: what it spent that time on.

use std::sync::atomic::Ordering::Acquire;

use crate::{python, sys};

/// One line on stderr when the exit took more than a second (`slow_exit_line`); `before` is the
/// bytes read and ns taken by the exit's scan made before the exit path, if one was.
pub fn say(before: Option<(u64, u64)>, asked: u64, got: u64, read: Option<u64>, scanned: u64) {
    let walk = python::heap::EXIT_WALK_NS.load(Acquire);
    if let Some(line) = slow_exit_line(walk, before, asked, got, read, scanned, sys::now_ns()) {
        eprintln!("{line}");
    }
}

/// What the exit spent its time on, when it took a second or more: the Python heap walk of the
/// final report (`walk` ns) and the reachability scan made at the end of the program's work
/// (`before`: bytes read, ns), both before the exit path; then the events still queued when the
/// exit path began (`asked` to `got`), the scan made there if none was before (`got` to
/// `scanned`, `read` bytes) and the collector taking the rest of the stream (to `now`).
fn slow_exit_line(
    walk: u64,
    before: Option<(u64, u64)>,
    asked: u64,
    got: u64,
    read: Option<u64>,
    scanned: u64,
    now: u64,
) -> Option<String> {
    let total = walk + before.map_or(0, |b| b.1) + now.saturating_sub(asked);
    if total < 1_000_000_000 {
        return None;
    }
    let s = |ns: u64| format!("{:.1} s", ns as f64 / 1e9);
    let scan = |ns: u64, read: u64| {
        format!(
            "{} in the reachability scan ({:.2} GiB read; GPUSHIM_REACHABILITY=0 leaves it out)",
            s(ns),
            read as f64 / (1u64 << 30) as f64
        )
    };
    let mut parts = Vec::new();
    if walk > 0 {
        parts.push(format!("{} walking the Python heap (who holds what)", s(walk)));
    }
    if let Some((read, ns)) = before {
        parts.push(scan(ns, read));
    }
    parts.push(format!("{} for the events still queued", s(got.saturating_sub(asked))));
    if let Some(read) = read {
        parts.push(scan(scanned.saturating_sub(got), read));
    }
    parts.push(format!("{} for the collector to take the rest", s(now.saturating_sub(scanned))));
    Some(format!("gpushim: the exit took {}: {}", s(total), parts.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::slow_exit_line;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_slow_exit_says_where_its_time_went() {
        let line = slow_exit_line(S / 2, None, 10 * S, 10 * S + S / 10, Some(3 << 30), 12 * S, 12 * S + S / 5).unwrap();
        assert_eq!(
            line,
            "gpushim: the exit took 2.7 s: 0.5 s walking the Python heap (who holds what), 0.1 s for the events still \
             queued, 1.9 s in the reachability scan (3.00 GiB read; GPUSHIM_REACHABILITY=0 leaves it out), 0.2 s for \
             the collector to take the rest"
        );
    }

    #[test]
    fn an_exit_under_a_second_says_nothing() {
        assert_eq!(slow_exit_line(0, None, S, S + 1000, None, S + 2000, 2 * S - 1), None);
        // Without a scan or a walk, only the parts that ran.
        let line = slow_exit_line(0, None, S, 2 * S, None, 2 * S, 3 * S).unwrap();
        assert_eq!(
            line,
            "gpushim: the exit took 2.0 s: 1.0 s for the events still queued, 1.0 s for the collector to take the rest"
        );
    }

    #[test]
    fn a_scan_made_before_the_exit_path_counts_in_its_time() {
        // The walk (1 s), the scan at the end of main (1.5 s, 2 GiB), then a short exit path.
        let line =
            slow_exit_line(S, Some((2 << 30, 3 * S / 2)), 10 * S, 10 * S, None, 10 * S, 10 * S + S / 10).unwrap();
        assert_eq!(
            line,
            "gpushim: the exit took 2.6 s: 1.0 s walking the Python heap (who holds what), 1.5 s in the reachability \
             scan (2.00 GiB read; GPUSHIM_REACHABILITY=0 leaves it out), 0.0 s for the events still queued, 0.1 s for \
             the collector to take the rest"
        );
    }
}
