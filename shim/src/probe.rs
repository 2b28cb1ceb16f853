//! Time-stamp-counter laps through the hot path, for a breakdown of the shim's cost per step on a
//! machine without a profiler (no `perf`). Built only with
//! `--features probe` (`scripts/bench-gpu-ab.sh` prints the table of a build named `probe…`); without it the [`probe!`] marks
//! compile to nothing and this module is empty.
//!
//! Made for a single-threaded allocation loop (`scripts/gpu/bench_pool.cu`): the marks are
//! process-wide relaxed loads and stores, not read-modify-writes (a lap must cost little and
//! take no locked instruction, which would itself drain the store buffer), so two threads in
//! hooks at once mix their laps. A lap costs one `rdtsc` and a few loads and stores (the table's
//! `calibration` row, measured at the end). The table goes to stderr when the library unloads.

#[cfg(feature = "probe")]
mod imp {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

    /// A step of a hook, from the previous mark to this one.
    #[derive(Clone, Copy)]
    #[repr(usize)]
    pub enum Step {
        /// The exported runtime entry: finding the real function (`route::routed`).
        Route,
        /// The re-entrancy guard (and, for a stream-ordered call, whether a capture is under way).
        Guard,
        /// Inside the real runtime function, up to its call of the driver.
        RuntimeBefore,
        /// The shim's driver export, passed through (the guard finds a hook in progress).
        InnerHook,
        /// The real driver function.
        Driver,
        /// Inside the real runtime function, after the driver returned.
        RuntimeAfter,
        /// `record::alloc` up to the stack: the sender, the device, the context.
        Prepare,
        /// The native and Python stacks and the comparison with the previous one.
        Stack,
        /// The stamp, the thread id, the sequence number.
        Stamp,
        /// The thread's name (once) and the ring's push.
        Push,
        /// `free_begin`: the sequence number and the free's in-progress mark.
        FreeBegin,
        /// `free_end`: the stamp, the push, the in-progress mark taken back.
        FreeEnd,
        /// Two laps back to back (the cost of one lap).
        Calibration,
    }

    const NAMES: [&str; N] = [
        "route",
        "guard",
        "runtime before driver",
        "inner hook (passed through)",
        "driver",
        "runtime after driver",
        "prepare",
        "stack",
        "stamp+tid+seq",
        "push",
        "free begin",
        "free end",
        "calibration",
    ];
    const N: usize = Step::Calibration as usize + 1;

    /// Which call the laps belong to: 0 an allocation, 1 a free.
    static PHASE: AtomicUsize = AtomicUsize::new(0);
    static MARK: AtomicU64 = AtomicU64::new(0);
    #[allow(clippy::declare_interior_mutable_const)]
    const ZERO: AtomicU64 = AtomicU64::new(0);
    static CYCLES: [AtomicU64; 2 * N] = [ZERO; 2 * N];
    static COUNT: [AtomicU64; 2 * N] = [ZERO; 2 * N];
    /// Writer-side counts: drains that found events, events drained, sleeps, wakes by a producer.
    pub static DRAINS: AtomicU64 = AtomicU64::new(0);
    pub static DRAINED: AtomicU64 = AtomicU64::new(0);
    pub static SLEEPS: AtomicU64 = AtomicU64::new(0);
    pub static WAKES: AtomicU64 = AtomicU64::new(0);

    fn rdtsc() -> u64 {
        // SAFETY: `rdtsc` only reads the time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// Whether the outer hook is inside the real function (an inner hook's entry then ends the
    /// runtime's own part, not the route).
    static IN_REAL: AtomicUsize = AtomicUsize::new(0);
    pub static WAITS: AtomicU64 = AtomicU64::new(0);

    /// The first mark of an intercepted call (the exported entry).
    #[inline(always)]
    pub fn start() {
        MARK.store(rdtsc(), Relaxed);
    }

    /// A hook's body begins, of an allocation (`free` 0) or a free (1): the lap is the route
    /// of an outer hook, or the runtime's part before an inner one.
    #[inline(always)]
    pub fn enter(free: usize) {
        if IN_REAL.load(Relaxed) == 0 {
            PHASE.store(free, Relaxed);
            lap(Step::Route);
        } else {
            lap(Step::RuntimeBefore);
        }
    }

    /// The outer hook calls the real function.
    #[inline(always)]
    pub fn real_begins() {
        IN_REAL.store(1, Relaxed);
    }

    /// The real function returned to the outer hook.
    #[inline(always)]
    pub fn real_ends() {
        lap(Step::RuntimeAfter);
        IN_REAL.store(0, Relaxed);
    }

    /// Counts the time since the previous mark as `step`.
    #[inline(always)]
    pub fn lap(step: Step) {
        let t = rdtsc();
        let m = MARK.load(Relaxed);
        if m != 0 {
            let i = PHASE.load(Relaxed) * N + step as usize;
            CYCLES[i].store(CYCLES[i].load(Relaxed) + t.wrapping_sub(m), Relaxed);
            COUNT[i].store(COUNT[i].load(Relaxed) + 1, Relaxed);
        }
        MARK.store(t, Relaxed);
    }

    /// Adds `n` to a count.
    pub fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Relaxed) + n, Relaxed);
    }

    /// The table, on stderr.
    pub fn report() {
        PHASE.store(0, Relaxed);
        MARK.store(rdtsc(), Relaxed);
        for _ in 0..1000 {
            lap(Step::Calibration);
        }
        // The counter's rate, over 20 ms on this thread's CPU.
        let (t0, n0) = (rdtsc(), crate::sys::now_ns());
        while crate::sys::now_ns() - n0 < 20_000_000 {}
        let ns_per_tick = (crate::sys::now_ns() - n0) as f64 / rdtsc().wrapping_sub(t0) as f64;
        eprintln!("gpushim probe: {ns_per_tick:.4} ns per tick");
        eprintln!("gpushim probe: | call | step | count | ticks each | ns each |");
        for phase in 0..2 {
            for (s, name) in NAMES.iter().enumerate() {
                let i = phase * N + s;
                let c = COUNT[i].load(Relaxed);
                if c > 0 {
                    let ticks = CYCLES[i].load(Relaxed) as f64 / c as f64;
                    let each = ticks * ns_per_tick;
                    let call = ["alloc", "free"][phase];
                    eprintln!("gpushim probe: | {call} | {name} | {c} | {ticks:.1} | {each:.1} |");
                }
            }
        }
        eprintln!("gpushim probe: {} waits for room in a full ring", WAITS.load(Relaxed));
        eprintln!(
            "gpushim probe: writer: {} drains of {} events ({:.1} each), {} sleeps, {} wakes by a producer",
            DRAINS.load(Relaxed),
            DRAINED.load(Relaxed),
            DRAINED.load(Relaxed) as f64 / DRAINS.load(Relaxed).max(1) as f64,
            SLEEPS.load(Relaxed),
            WAKES.load(Relaxed)
        );
    }
}

#[cfg(feature = "probe")]
pub use imp::*;

/// `probe!(Step)`: a lap ending at this point; `probe!(start)`, `probe!(enter free)`,
/// `probe!(real_begins)`, `probe!(real_ends)`, `probe!(report)`: the functions of those names;
/// `probe!(count NAME)`, `probe!(add NAME, n)`: one more, or `n` more, of a count. Nothing without the `probe` feature.
macro_rules! probe {
    (start) => {
        #[cfg(feature = "probe")]
        $crate::probe::start();
    };
    (enter $free:expr) => {
        #[cfg(feature = "probe")]
        $crate::probe::enter($free);
    };
    (real_begins) => {
        #[cfg(feature = "probe")]
        $crate::probe::real_begins();
    };
    (real_ends) => {
        #[cfg(feature = "probe")]
        $crate::probe::real_ends();
    };
    (report) => {
        #[cfg(feature = "probe")]
        $crate::probe::report();
    };
    (count $c:ident) => {
        #[cfg(feature = "probe")]
        $crate::probe::add(&$crate::probe::$c, 1);
    };
    (add $c:ident, $n:expr) => {
        #[cfg(feature = "probe")]
        $crate::probe::add(&$crate::probe::$c, $n);
    };
    ($step:ident) => {
        #[cfg(feature = "probe")]
        $crate::probe::lap($crate::probe::Step::$step);
    };
}
pub(crate) use probe;
