//! The gauges the live set keeps: live bytes, live count and their peak ([`Gauge`]) for the
//! whole process ([`Totals`], with its counters), per kind and per device (a [`Gauge`] each,
//! held by [`State`](crate::live::State)), and per site ([`SiteStats`], with its live bytes
//! over time in a [`SiteSeries`]).

use gpushim_wire::{Api, Kind};

use crate::series::Series;

/// At most this many points are kept in a site's [`SiteSeries`].
pub const SERIES_MAX: usize = 256;

/// Live bytes and count with their high-water mark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gauge {
    /// Bytes currently allocated.
    pub live_bytes: u64,
    /// Allocations currently live.
    pub live_count: u64,
    /// Highest `live_bytes` ever reached, bytes.
    pub peak_live_bytes: u64,
}

impl Gauge {
    /// Counts a new live allocation of `size` bytes.
    pub(crate) fn add(&mut self, size: u64) {
        self.live_bytes = self.live_bytes.saturating_add(size);
        self.live_count += 1;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }

    /// Takes out a live allocation of `size` bytes (freed, or replaced by a new one).
    pub(crate) fn sub(&mut self, size: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.live_count = self.live_count.saturating_sub(1);
    }
}

/// Process-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Live bytes, count and peak over all kinds.
    pub gauge: Gauge,
    /// Successful allocations.
    pub alloc_count: u64,
    /// Bytes of all successful allocations.
    pub alloc_bytes: u64,
    /// Successful frees of known allocations.
    pub free_count: u64,
    /// Failed allocation calls.
    pub failed_count: u64,
    /// Free calls (successful or not) of an address or handle that was not live.
    pub unknown_free_count: u64,
    /// Free calls of a live allocation that returned an error (it stays live).
    pub failed_free_count: u64,
    /// Allocations that returned an address that was still live: a free was missed.
    pub replaced_count: u64,
}

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
}

#[cfg(test)]
mod tests {
    use super::*;

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
