//! The process's live bytes over time, per kind and per device, in bounded memory; the
//! report's `timeline` and the counter tracks of the Perfetto output are made from it.
//!
//! Like a site's [`Series`](crate::live::Series), every `stride`-th change is recorded; when
//! [`TIMELINE_MAX`] points are held every other one is dropped and the stride doubles, so each
//! point is an exact observation, the points stay spread over the whole run, and memory does
//! not grow with the number of events.

use std::collections::BTreeMap;

use crate::live::Gauge;
use crate::report;

/// At most this many points are held (the report adds one more: the state at its end).
pub const TIMELINE_MAX: usize = 2000;

/// One observation: monotonic time, live bytes per kind, live bytes per device.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Point {
    ts_ns: u64,
    kinds: [u64; 3],
    /// Indexed like [`Timeline::devices`]; shorter if devices appeared later.
    devices: Vec<u64>,
}

/// Live bytes per kind and per device over time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeline {
    /// Device ordinals in order of first appearance.
    devices: Vec<i32>,
    points: Vec<Point>,
    stride: u64,
    changes: u64,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline { devices: Vec::new(), points: Vec::new(), stride: 1, changes: 0 }
    }
}

impl Timeline {
    /// Records the gauges after one change of the live set at `ts_ns`. Cheap when the change
    /// is not sampled. Timestamps that go backwards are clamped, so points stay sorted.
    pub fn record(&mut self, ts_ns: u64, kinds: &[Gauge; 3], devices: &BTreeMap<i32, Gauge>) {
        let take = self.changes.is_multiple_of(self.stride);
        self.changes += 1;
        if !take {
            return;
        }
        if self.points.len() >= TIMELINE_MAX {
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i % 2 == 0
            });
            self.stride *= 2;
        }
        let ts_ns = self.points.last().map_or(ts_ns, |p| p.ts_ns.max(ts_ns));
        let point = self.observe(ts_ns, kinds, devices);
        self.points.push(point);
    }

    fn observe(&mut self, ts_ns: u64, kinds: &[Gauge; 3], devices: &BTreeMap<i32, Gauge>) -> Point {
        for &d in devices.keys() {
            if !self.devices.contains(&d) {
                self.devices.push(d);
            }
        }
        Point {
            ts_ns,
            kinds: [kinds[0].live_bytes, kinds[1].live_bytes, kinds[2].live_bytes],
            devices: self.devices.iter().map(|d| devices.get(d).map_or(0, |g| g.live_bytes)).collect(),
        }
    }

    /// Number of points held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// The timeline for a report: the held points plus the gauges as they are at `end_ns`,
    /// times in seconds after `start_ns`, devices in ascending order.
    pub fn to_report(
        &self,
        start_ns: u64,
        end_ns: u64,
        kinds: &[Gauge; 3],
        devices: &BTreeMap<i32, Gauge>,
    ) -> report::Timeline {
        let mut me = self.clone();
        let last = me.points.last().map_or(end_ns, |p| p.ts_ns.max(end_ns));
        let end = me.observe(last, kinds, devices);
        if me.points.last().map(|p| (&p.kinds, &p.devices)) != Some((&end.kinds, &end.devices)) {
            me.points.push(end);
        }
        let mut order: Vec<usize> = (0..me.devices.len()).collect();
        order.sort_by_key(|&i| me.devices[i]);
        report::Timeline {
            devices: order.iter().map(|&i| me.devices[i]).collect(),
            points: me
                .points
                .iter()
                .map(|p| report::TimelinePoint {
                    t_s: p.ts_ns.saturating_sub(start_ns) as f64 / 1e9,
                    kinds: p.kinds,
                    devices: order.iter().map(|&i| p.devices.get(i).copied().unwrap_or(0)).collect(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(live_bytes: u64) -> Gauge {
        Gauge { live_bytes, live_count: 1, peak_live_bytes: live_bytes }
    }

    #[test]
    fn bounded_exact_and_ends_with_the_final_state() {
        let mut t = Timeline::default();
        let mut devs = BTreeMap::new();
        for i in 0..100_000u64 {
            devs.insert(1, g(i));
            if i >= 500 {
                devs.insert(0, g(2 * i));
            }
            t.record(1_000 + i * 10, &[g(i), g(0), g(7)], &devs);
        }
        assert!(t.len() <= TIMELINE_MAX && t.len() >= TIMELINE_MAX / 2, "{}", t.len());
        let r = t.to_report(1_000, 1_000 + 99_999 * 10, &[g(99_999), g(0), g(7)], &devs);
        assert_eq!(r.devices, vec![0, 1]);
        assert!(r.points.windows(2).all(|w| w[0].t_s <= w[1].t_s));
        for p in &r.points {
            let i = (p.t_s * 1e9 / 10.0).round() as u64;
            assert_eq!(p.kinds, [i, 0, 7], "{p:?}");
            let gpu0 = if i >= 500 { 2 * i } else { 0 };
            assert_eq!(p.devices, vec![gpu0, i], "{p:?}");
        }
        let last = r.points.last().unwrap();
        assert_eq!(last.kinds[0], 99_999);
        // An end state equal to the last point is not repeated.
        let mut one = Timeline::default();
        one.record(5, &[g(3), g(0), g(0)], &BTreeMap::new());
        let r = one.to_report(5, 9, &[g(3), g(0), g(0)], &BTreeMap::new());
        assert_eq!(r.points.len(), 1);
        assert!(r.devices.is_empty() && r.points[0].devices.is_empty());
    }
}
