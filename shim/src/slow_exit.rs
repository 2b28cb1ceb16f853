//! The line the exit path says when it took a second or more: what it spent that time on.

use std::sync::atomic::Ordering::Acquire;

use crate::{python, sys};

/// One line on stderr when the exit path took more than a second (`slow_exit_line`).
pub fn say(asked: u64, got: u64, read: Option<u64>, scanned: u64) {
    let walk = python::heap::EXIT_WALK_NS.load(Acquire);
    if let Some(line) = slow_exit_line(walk, asked, got, read, scanned, sys::now_ns()) {
        eprintln!("{line}");
    }
}

/// What the exit path spent its time on, when it took a second or more: the Python heap walk of
/// the final report (`walk` ns, before the exit path), the events still queued when it began
/// (`asked` to `got`), the reachability scan (`got` to `scanned`, `read` bytes) and the collector
/// taking the rest of the stream (to `now`).
fn slow_exit_line(walk: u64, asked: u64, got: u64, read: Option<u64>, scanned: u64, now: u64) -> Option<String> {
    let total = walk + now.saturating_sub(asked);
    if total < 1_000_000_000 {
        return None;
    }
    let s = |ns: u64| format!("{:.1} s", ns as f64 / 1e9);
    let mut parts = Vec::new();
    if walk > 0 {
        parts.push(format!("{} walking the Python heap (who holds what)", s(walk)));
    }
    parts.push(format!("{} for the events still queued", s(got.saturating_sub(asked))));
    if let Some(read) = read {
        parts.push(format!(
            "{} in the reachability scan ({:.2} GiB read; GPUSHIM_REACHABILITY=0 leaves it out)",
            s(scanned.saturating_sub(got)),
            read as f64 / (1u64 << 30) as f64
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
        let line = slow_exit_line(S / 2, 10 * S, 10 * S + S / 10, Some(3 << 30), 12 * S, 12 * S + S / 5).unwrap();
        assert_eq!(
            line,
            "gpushim: the exit took 2.7 s: 0.5 s walking the Python heap (who holds what), 0.1 s for the events still \
             queued, 1.9 s in the reachability scan (3.00 GiB read; GPUSHIM_REACHABILITY=0 leaves it out), 0.2 s for \
             the collector to take the rest"
        );
    }

    #[test]
    fn an_exit_under_a_second_says_nothing() {
        assert_eq!(slow_exit_line(0, S, S + 1000, None, S + 2000, 2 * S - 1), None);
        // Without a scan or a walk, only the parts that ran.
        let line = slow_exit_line(0, S, 2 * S, None, 2 * S, 3 * S).unwrap();
        assert_eq!(
            line,
            "gpushim: the exit took 2.0 s: 1.0 s for the events still queued, 1.0 s for the collector to take the rest"
        );
    }
}
