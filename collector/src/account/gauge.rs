//! What the live set keeps per site ([`SiteStats`], with its live bytes over time in a
//! [`SiteSeries`]); the gauges themselves ([`Gauge`]: live bytes, live count and their peak) and
//! the process's counters are the report's types (`crate::report::Gauge`, `crate::report::Totals`),
//! declared once.

use gpushim_wire::{Api, Kind};

use crate::account::series::Series;
use crate::report::Gauge;

/// At most this many points are kept in a site's [`SiteSeries`].
pub const SERIES_MAX: usize = 256;

/// A site's live bytes over time (bytes, at monotonic ns), at most [`SERIES_MAX`] points,
/// evenly thinned (see [`Series`]), so memory per site is bounded.
pub type SiteSeries = Series<u64, SERIES_MAX>;

/// Everything known about one allocation site (one distinct stack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteStats {
    /// The stack id, or `NO_STACK`.
    pub id: u32,
    /// Kind of the site's first allocation.
    pub kind: Kind,
    /// Distinct allocating entry points, in order of first use.
    pub apis: Vec<Api>,
    /// Live bytes, count and peak at this site.
    pub gauge: Gauge,
    /// Successful allocations made here.
    pub alloc_count: u64,
    /// Their total size, bytes.
    pub alloc_bytes: u64,
    /// Successful frees of allocations made here.
    pub free_count: u64,
    /// Monotonic time of the first allocation, ns.
    pub first_alloc_ns: u64,
    /// Monotonic time of the latest allocation, ns.
    pub last_alloc_ns: u64,
    /// Live bytes over time.
    pub series: SiteSeries,
    /// Allocations made here that were still live when a context teardown freed them
    /// (`cudaDeviceReset` and the like), and their bytes: freed, but not by the program.
    pub swept_count: u64,
    /// See `swept_count`.
    pub swept_bytes: u64,
    /// Allocations made here that were live when the exit heap walk started and that only the
    /// interpreter's teardown freed (kept counted as live: see `State::teardown`).
    pub torn_count: u64,
    /// The threads that allocated here, by kernel thread id: at most [`MAX_SITE_THREADS`].
    pub threads: TidMap<ThreadUse>,
    /// Allocations made here by threads beyond the first [`MAX_SITE_THREADS`].
    pub other_thread_allocs: u64,
}

/// Hashes a thread id with one multiplication (Fibonacci hashing): the map is updated at every
/// allocation, and SipHash's cost showed in the collector's throughput.
#[derive(Clone, Copy, Debug, Default)]
pub struct TidHasher(u64);

impl std::hash::Hasher for TidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.0 = u64::from(v);
    }

    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}

/// A map keyed by thread id, hashed with [`TidHasher`].
pub type TidMap<V> = std::collections::HashMap<u32, V, std::hash::BuildHasherDefault<TidHasher>>;

/// Most threads kept per site; a site that more threads allocate at counts the others'
/// allocations in [`SiteStats::other_thread_allocs`]. Bounds the collector's memory: a program
/// that starts a thread per task has as many threads as tasks.
pub const MAX_SITE_THREADS: usize = 1024;

/// What one thread allocated at one site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadUse {
    /// Allocations.
    pub alloc_count: u64,
    /// Their bytes.
    pub alloc_bytes: u64,
    /// Monotonic time of its first allocation here, ns.
    pub first_ns: u64,
    /// Monotonic time of its latest allocation here, ns.
    pub last_ns: u64,
}

impl SiteStats {
    /// Counts an allocation of `size` bytes by thread `tid` at time `ts_ns`.
    #[inline]
    pub fn thread_alloc(&mut self, tid: u32, size: u64, ts_ns: u64) {
        let full = self.threads.len() >= MAX_SITE_THREADS;
        match self.threads.get_mut(&tid) {
            Some(t) => {
                t.alloc_count += 1;
                t.alloc_bytes = t.alloc_bytes.saturating_add(size);
                t.first_ns = t.first_ns.min(ts_ns);
                t.last_ns = t.last_ns.max(ts_ns);
            }
            None if full => self.other_thread_allocs += 1,
            None => {
                self.threads
                    .insert(tid, ThreadUse { alloc_count: 1, alloc_bytes: size, first_ns: ts_ns, last_ns: ts_ns });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_per_site_are_counted_and_bounded() {
        let mut s = SiteStats {
            id: 1,
            kind: gpushim_wire::Kind::Device,
            apis: Vec::new(),
            gauge: Gauge::default(),
            alloc_count: 0,
            alloc_bytes: 0,
            free_count: 0,
            first_alloc_ns: 0,
            last_alloc_ns: 0,
            series: SiteSeries::default(),
            swept_count: 0,
            swept_bytes: 0,
            torn_count: 0,
            threads: Default::default(),
            other_thread_allocs: 0,
        };
        s.thread_alloc(7, 100, 50);
        s.thread_alloc(7, 28, 20);
        assert_eq!(s.threads[&7], ThreadUse { alloc_count: 2, alloc_bytes: 128, first_ns: 20, last_ns: 50 });
        for tid in 0..MAX_SITE_THREADS as u32 + 10 {
            s.thread_alloc(1000 + tid, 1, 60);
        }
        assert_eq!(s.threads.len(), MAX_SITE_THREADS);
        assert_eq!(s.other_thread_allocs, 11);
    }

    #[test]
    fn series_is_bounded_and_exact_at_its_points() {
        let mut ser = SiteSeries::default();
        for i in 0..10_000u64 {
            ser.record(i * 10, i);
        }
        assert!(ser.points().len() <= SERIES_MAX);
        assert!(ser.points().len() >= SERIES_MAX / 2);
        for &(t, v) in ser.points() {
            assert_eq!(t, v * 10);
        }
        assert!(ser.points().windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(ser.value_at(0), 0);
        let (t, v) = ser.points()[10];
        assert_eq!(ser.value_at(t + 1), v);
    }
}
