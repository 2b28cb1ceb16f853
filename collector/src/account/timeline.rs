//! The process's live bytes over time, per kind and per device, in bounded memory; the
//! report's `timeline` and the counter tracks of the Perfetto output are made from it.
//!
//! The points are held in a [`Series`], thinned like a site's live bytes: every `stride`-th
//! change is recorded; when [`TIMELINE_MAX`] points are held every other one is dropped and the
//! stride doubles, so each point is an exact observation, the points stay spread over the whole
//! run, and memory does not grow with the number of events.

use std::collections::BTreeMap;

use crate::account::series::Series;
use crate::report;
use crate::report::Gauge;

/// At most this many points are held (the report adds one more: the state at its end).
pub const TIMELINE_MAX: usize = 2000;

/// One observation: live bytes per kind, live bytes per device.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Point {
    kinds: [u64; 3],
    /// Indexed like [`Timeline::devices`]; shorter if devices appeared later.
    devices: Vec<u64>,
}

/// Live bytes per kind and per device over time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// Device ordinals in order of first appearance.
    devices: Vec<i32>,
    /// The observations, at monotonic ns.
    points: Series<Point, TIMELINE_MAX>,
}

impl Timeline {
    /// Records the gauges after one change of the live set at `ts_ns`. Cheap when the change
    /// is not sampled. Timestamps that go backwards are clamped, so points stay sorted.
    pub fn record(&mut self, ts_ns: u64, kinds: &[Gauge; 3], devices: &BTreeMap<i32, Gauge>) {
        let known = &mut self.devices;
        self.points.record_with(ts_ns, || observe(known, kinds, devices));
    }

    /// Number of points held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.points.points().len()
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
        let held = self.points.points();
        let mut known = self.devices.clone();
        let last = held.last().map_or(end_ns, |&(t, _)| t.max(end_ns));
        let end = observe(&mut known, kinds, devices);
        let end = (held.last().map(|(_, p)| (&p.kinds, &p.devices)) != Some((&end.kinds, &end.devices)))
            .then_some((last, end));
        let mut order: Vec<usize> = (0..known.len()).collect();
        order.sort_by_key(|&i| known[i]);
        report::Timeline {
            devices: order.iter().map(|&i| known[i]).collect(),
            points: held
                .iter()
                .chain(&end)
                .map(|(ts_ns, p)| report::TimelinePoint {
                    t_s: ts_ns.saturating_sub(start_ns) as f64 / 1e9,
                    kinds: p.kinds,
                    devices: order.iter().map(|&i| p.devices.get(i).copied().unwrap_or(0)).collect(),
                })
                .collect(),
        }
    }
}

/// The gauges as a point, indexed by `known` (device ordinals in order of first appearance),
/// to which devices seen for the first time are added.
fn observe(known: &mut Vec<i32>, kinds: &[Gauge; 3], devices: &BTreeMap<i32, Gauge>) -> Point {
    for &d in devices.keys() {
        if !known.contains(&d) {
            known.push(d);
        }
    }
    Point {
        kinds: [kinds[0].live_bytes, kinds[1].live_bytes, kinds[2].live_bytes],
        devices: known.iter().map(|d| devices.get(d).map_or(0, |g| g.live_bytes)).collect(),
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
