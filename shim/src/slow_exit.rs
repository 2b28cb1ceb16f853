//! The line the exit path says when it took a second or more: what it spent that time on.

use std::sync::atomic::Ordering::Acquire;

use crate::{python, sys};

/// One line on stderr when the exit path took more than a second (`slow_exit_line`).
/// `beside`: the scan made beside the Python exit walk, if it was (its ns and bytes read).
pub fn say(asked: u64, got: u64, read: Option<u64>, scanned: u64, beside: Option<(u64, Option<u64>)>) {
    let walk = python::heap::EXIT_WALK_NS.load(Acquire);
    if let Some(line) = slow_exit_line(walk, asked, got, read, scanned, sys::now_ns(), beside) {
        eprintln!("{line}");
    }
}

/// What the exit path spent its time on, when it took a second or more: the Python heap walk of
/// the final report (`walk` ns, before the exit path), the events still queued when it began
/// (`asked` to `got`), the reachability scan (`got` to `scanned`, `read` bytes) and the collector
/// taking the rest of the stream (to `now`); or the scan made `beside` the walk.
fn slow_exit_line(
    walk: u64,
    asked: u64,
    got: u64,
    read: Option<u64>,
    scanned: u64,
    now: u64,
    beside: Option<(u64, Option<u64>)>,
) -> Option<String> {
    let total = walk + now.saturating_sub(asked);
    if total < 1_000_000_000 {
        return None;
    }
    let s = |ns: u64| format!("{:.1} s", ns as f64 / 1e9);
    let mut parts = Vec::new();
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    match beside {
        Some((ns, read)) => parts.push(format!(
            "{} walking the Python heap (who holds what) with the reachability scan beside it ({}, {:.2} GiB read; \
             GPUSHIM_REACHABILITY=0 leaves it out)",
            s(walk),
            s(ns),
            gib(read.unwrap_or(0))
        )),
        None if walk > 0 => parts.push(format!("{} walking the Python heap (who holds what)", s(walk))),
        None => {}
    }
    parts.push(format!("{} for the events still queued", s(got.saturating_sub(asked))));
    if let Some(read) = read {
        parts.push(format!(
            "{} in the reachability scan ({:.2} GiB read; GPUSHIM_REACHABILITY=0 leaves it out)",
            s(scanned.saturating_sub(got)),
            gib(read)
        ));
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
        let line = slow_exit_line(S / 2, 10 * S, 10 * S + S / 10, Some(3 << 30), 12 * S, 12 * S + S / 5, None).unwrap();
        assert_eq!(
            line,
            "gpushim: the exit took 2.7 s: 0.5 s walking the Python heap (who holds what), 0.1 s for the events still \
             queued, 1.9 s in the reachability scan (3.00 GiB read; GPUSHIM_REACHABILITY=0 leaves it out), 0.2 s for \
             the collector to take the rest"
        );
    }

    #[test]
    fn an_exit_under_a_second_says_nothing() {
        assert_eq!(slow_exit_line(0, S, S + 1000, None, S + 2000, 2 * S - 1, None), None);
        // Without a scan or a walk, only the parts that ran.
        let line = slow_exit_line(0, S, 2 * S, None, 2 * S, 3 * S, None).unwrap();
        assert_eq!(
            line,
            "gpushim: the exit took 2.0 s: 1.0 s for the events still queued, 1.0 s for the collector to take the rest"
        );
    }

    #[test]
    fn a_scan_beside_the_walk_is_said_with_it() {
        let line = slow_exit_line(S, 5 * S, 5 * S, None, 5 * S, 5 * S + S / 10, Some((S / 2, Some(1 << 30)))).unwrap();
        assert_eq!(
            line,
            "gpushim: the exit took 1.1 s: 1.0 s walking the Python heap (who holds what) with the reachability scan \
             beside it (0.5 s, 1.00 GiB read; GPUSHIM_REACHABILITY=0 leaves it out), 0.0 s for the events still queued, \
             0.1 s for the collector to take the rest"
        );
    }
}
