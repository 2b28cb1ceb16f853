//! A bounded, evenly thinned series of observations over time: the one thinning rule behind a
//! site's live bytes over time and the process's timeline of live bytes per kind and device.
//!
//! Every `stride`-th change is recorded; when `MAX` points are held, every other one is
//! dropped (each pair of neighbours merges into its later point, which is still an exact
//! observation) and the stride doubles. So each point is an exact observation, the points stay
//! spread over the whole run, and memory does not grow with the number of changes.

/// Observations of a `T` over time, at most `MAX` points, thinned as the module docs say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series<T, const MAX: usize> {
    /// `(monotonic time in ns, observation)`, oldest first.
    points: Vec<(u64, T)>,
    /// One change in `stride` is recorded.
    stride: u64,
    /// Changes counted so far.
    changes: u64,
}

impl<T, const MAX: usize> Default for Series<T, MAX> {
    fn default() -> Self {
        Series { points: Vec::new(), stride: 1, changes: 0 }
    }
}

impl<T, const MAX: usize> Series<T, MAX> {
    /// Counts one change at `ts_ns` (monotonic ns) and, if this change is sampled, records
    /// `observe()` for it; `observe` runs only then, so an unsampled change is cheap.
    /// Timestamps that go backwards (events of different threads) are clamped to the last
    /// point's, so points stay sorted.
    pub fn record_with(&mut self, ts_ns: u64, observe: impl FnOnce() -> T) {
        let take = self.changes.is_multiple_of(self.stride);
        self.changes += 1;
        if !take {
            return;
        }
        if self.points.len() >= MAX {
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i % 2 == 0
            });
            self.stride *= 2;
        }
        let ts = self.points.last().map_or(ts_ns, |&(t, _)| t.max(ts_ns));
        let value = observe();
        self.points.push((ts, value));
    }

    /// Records that the observed value became `value` at `ts_ns` (monotonic ns); see
    /// [`Series::record_with`].
    pub fn record(&mut self, ts_ns: u64, value: T) {
        self.record_with(ts_ns, || value);
    }

    /// The recorded `(ts_ns, value)` points, oldest first.
    pub fn points(&self) -> &[(u64, T)] {
        &self.points
    }
}

impl<T: Copy + Default, const MAX: usize> Series<T, MAX> {
    /// The value at `ts_ns` (monotonic ns) as recorded: the value of the last point at or
    /// before it, or `T::default()` (0 for a number) before the first point.
    pub fn value_at(&self, ts_ns: u64) -> T {
        let i = self.points.partition_point(|&(t, _)| t <= ts_ns);
        if i == 0 {
            T::default()
        } else {
            self.points[i - 1].1
        }
    }
}
