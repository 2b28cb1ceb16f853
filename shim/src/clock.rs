//! Event time stamps on the hot path. `clock_gettime(CLOCK_MONOTONIC)` goes through the vDSO
//! already, but one call costs about twice an `rdtsc`, and two calls a pair are a large share of
//! the shim's added cost on the pool-hit loop (docs/performance.md has the numbers). So `Alloc` and `Free` messages carry a
//! *stamp*: the time-stamp counter where the kernel itself keeps time with it, else monotonic ns;
//! the writer thread turns stamps into monotonic ns ([`StampClock`]) before encoding, so the
//! stream and the reports carry `CLOCK_MONOTONIC` nanoseconds as before.
//!
//! When the counter is used: x86-64, and the kernel's current clocksource is `tsc`
//! (`/sys/devices/system/clocksource/clocksource0/current_clocksource`). The kernel selects it
//! only when the counter runs at a constant rate, does not stop in idle states and is in step
//! across CPUs (Linux, Documentation/virt/kvm/x86/timekeeping.rst, and arch/x86/kernel/tsc.c's
//! stability checks), so a stamp read on any CPU is comparable with one read on another.
//!
//! Conversion: the writer takes a reference pair (counter, monotonic ns) when tracing starts
//! and again whenever its channel is empty and every 4096 events; a stamp becomes
//! `ns_ref + (stamp - tsc_ref) × rate`, with the rate measured over everything since the start
//! (at least 1 ms before the first conversion). The error is the reference pair's read jitter
//! (≈ 0.1 µs) times the distance to the latest reference divided by the measuring span: below
//! a microsecond from the first millisecond on, nanoseconds after a second.

use std::sync::atomic::{AtomicBool, Ordering::*};

use crate::sys;

/// Whether stamps are counter ticks (set once, before the first stamp, in [`choose`]).
static TSC: AtomicBool = AtomicBool::new(false);

/// Shortest span the rate is measured over before the first conversion, ns.
const MIN_SPAN_NS: u64 = 1_000_000;

#[cfg(target_arch = "x86_64")]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` only reads the time-stamp counter (available on every x86-64 CPU).
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtsc() -> u64 {
    0
}

/// Decides, once per process that traces and before its first event, whether stamps are counter
/// ticks: on x86-64 when the kernel keeps time with the TSC.
pub fn choose() {
    let tsc = cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .is_ok_and(|s| s.trim() == "tsc");
    TSC.store(tsc, Release);
}

/// The stamp of an event: counter ticks or monotonic ns (see the module doc). Async-signal-safe.
#[inline]
pub fn stamp() -> u64 {
    if TSC.load(Relaxed) {
        rdtsc()
    } else {
        sys::now_ns()
    }
}

/// The writer's conversion of stamps into monotonic ns.
pub struct StampClock {
    tsc: bool,
    /// The first reference pair (counter, ns) and the latest.
    first: (u64, u64),
    latest: (u64, u64),
    /// Events converted since the latest reference.
    since: u32,
}

/// A reference pair: the counter read on both sides of the clock, its midpoint; of four tries
/// the tightest, so that a thread preempted between the reads does not make a pair that is off
/// by the time it waited.
fn reference() -> (u64, u64) {
    let mut best = (u64::MAX, (0, 0));
    for _ in 0..4 {
        let a = rdtsc();
        let ns = sys::now_ns();
        let b = rdtsc();
        let width = b.wrapping_sub(a);
        if width < best.0 {
            best = (width, (a / 2 + b / 2 + (a & b & 1), ns));
        }
    }
    best.1
}

impl StampClock {
    /// Takes the first reference (call after [`choose`], before the first stamp is taken).
    pub fn new() -> StampClock {
        let tsc = TSC.load(Acquire);
        let r = if tsc { reference() } else { (0, 0) };
        StampClock { tsc, first: r, latest: r, since: 0 }
    }

    /// Takes a new reference (the writer calls it when its channel is empty).
    pub fn refresh(&mut self) {
        if self.tsc {
            self.latest = reference();
            self.since = 0;
        }
    }

    /// Monotonic ns of `stamp`.
    pub fn ns_of(&mut self, stamp: u64) -> u64 {
        if !self.tsc {
            return stamp;
        }
        self.since += 1;
        if self.since >= 4096 || self.latest.1 - self.first.1 < MIN_SPAN_NS {
            if self.latest.1 - self.first.1 < MIN_SPAN_NS {
                // Once, in the first millisecond of tracing: wait for a span to measure over.
                let left = MIN_SPAN_NS - (sys::now_ns() - self.first.1).min(MIN_SPAN_NS);
                std::thread::sleep(std::time::Duration::from_nanos(left));
            }
            self.refresh();
        }
        let (t0, n0) = self.first;
        let (t1, n1) = self.latest;
        let ticks = i128::from(t1.wrapping_sub(t0) as i64);
        if ticks <= 0 {
            return n1;
        }
        let d = i128::from(stamp.wrapping_sub(t1) as i64) * i128::from(n1 - n0) / ticks;
        (i128::from(n1) + d).clamp(0, i128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_become_monotonic_ns_within_microseconds() {
        choose();
        let mut c = StampClock::new();
        for _ in 0..3 {
            let before = sys::now_ns();
            let s = stamp();
            let after = sys::now_ns();
            let ns = c.ns_of(s);
            // The first conversion waits for a 1 ms span; the error is then well below 50 µs
            // even on a loaded machine (the tightest of four reference pairs).
            assert!(ns + 50_000 >= before && ns <= after + 50_000, "{before} <= {ns} <= {after}");
            c.refresh();
        }
    }
}
