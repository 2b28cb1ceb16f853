//! The frame of the live view that the control endpoint sends (`gpushim top --json` prints it;
//! docs/report-schema.md, "The live frame"), and how it is computed from the samples the
//! collector keeps.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::report::Gauge;

/// The `format` of a frame.
pub const FORMAT: &str = "gpushim-top-frame";

/// The frame's version: a reader refuses a frame of a later one.
pub const VERSION: u32 = 1;

/// One frame of the live view.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The traced process.
    pub pid: u32,
    /// Its command line.
    pub command: Vec<String>,
    /// Its rank, when the launcher set one.
    pub rank: Option<u32>,
    /// Its local rank, when known.
    pub local_rank: Option<u32>,
    /// Seconds from the first event to the latest sample.
    pub uptime_s: f64,
    /// Whether the stream has ended (the program exited or was killed; the final report is
    /// being written).
    pub ended: bool,
    /// The whole process: live bytes and count, peak.
    pub totals: Gauge,
    /// Per kind of memory.
    pub kinds: Kinds,
    /// Per GPU ordinal (device and managed memory), ascending.
    pub gpus: Vec<GpuLine>,
    /// The driver's figure per GPU (NVML), when the collector samples it.
    pub driver: Vec<DriverLine>,
    /// Why there is no driver figure, when there is none.
    pub driver_unavailable: Option<String>,
    /// Live bytes of the process, one sample about every second, oldest first.
    pub series: Vec<Point>,
    /// The growth window asked for, seconds.
    pub window_s: f64,
    /// The span the growth rates cover: the window, or less when the samples do not reach
    /// back that far.
    pub window_covered_s: f64,
    /// Sites with live allocations (all of them, not only those listed).
    pub sites_live: u64,
    /// The top sites by live bytes and those by growth, most live bytes first.
    pub sites: Vec<SiteLine>,
    /// Leak suspects as of the latest ranking.
    pub suspects: u64,
    /// Which heap walk the sites' `held_by` come from (`snapshot 2`); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holders_from: Option<String>,
}

/// Live bytes per kind of memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kinds {
    /// Device memory.
    pub device: Gauge,
    /// Managed (unified) memory.
    pub managed: Gauge,
    /// Pinned host memory.
    pub pinned_host: Gauge,
}

/// One GPU's traced memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuLine {
    /// The ordinal the process saw.
    pub ordinal: i32,
    /// Its device and managed memory.
    pub gauge: Gauge,
}

/// What the driver counts for the process on one GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverLine {
    /// NVML's index of the GPU.
    pub nvml_index: u32,
    /// Bytes the driver counts for the process there.
    pub used_bytes: u64,
    /// The part of them no traced allocation explains (`used_bytes` less the traced live
    /// device and managed bytes), when the process uses one GPU.
    pub untraced_bytes: Option<u64>,
}

/// One sample of the series.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Seconds after the first event.
    pub t_s: f64,
    /// Live bytes of the process then.
    pub live_bytes: u64,
}

/// One site of the frame.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteLine {
    /// Its id in the reports (the stack id; `none` for allocations without a stack).
    pub id: String,
    /// Its headline, as the summary names a suspect (`render (leak.c:57)`), else its first
    /// user frame; empty when not known yet.
    pub headline: String,
    /// Live bytes.
    pub live_bytes: u64,
    /// Live allocations.
    pub live_count: u64,
    /// Change of its live bytes over the window, per second.
    pub growth_bytes_per_s: f64,
    /// Whether it is a leak suspect as of the latest ranking.
    pub suspect: bool,
    /// Its frames, innermost first, each `function (file:line)`; `[internal]` before the
    /// CUDA, framework and runtime frames.
    pub frames: Vec<String>,
    /// Who held its memory at the latest snapshot's heap walk (a Python program's): the lines
    /// a report gives under the site (`held by: train.py global 'kept' → list[*] → 208
    /// objects (832.0 MiB)`); empty without one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<String>,
}

/// One sample of the live set: when, the process's live bytes, and each site's live bytes and
/// count (the sites with most live bytes, by site id).
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    /// Monotonic time, ns.
    pub ts_ns: u64,
    /// The process's live bytes.
    pub live_bytes: u64,
    /// `(site, live bytes, live count)`, ascending site id.
    pub sites: Vec<(u32, u64, u64)>,
}

impl Sample {
    fn site(&self, id: u32) -> Option<(u64, u64)> {
        self.sites.binary_search_by_key(&id, |s| s.0).ok().map(|i| (self.sites[i].1, self.sites[i].2))
    }
}

/// What names a site in the frame.
#[derive(Clone, Debug, Default)]
pub(crate) struct Name {
    pub headline: String,
    pub frames: Vec<String>,
}

/// Computes the sites of a frame over `window_ns` from `history` (oldest first): the `top`
/// sites by live bytes and the `top` by growth, most live bytes first. Returns them with the
/// span covered, ns.
pub(crate) fn sites(
    history: &VecDeque<Sample>,
    window_ns: u64,
    top: usize,
    names: &HashMap<u32, Name>,
    suspects: &[u32],
    holders: &HashMap<u32, Vec<String>>,
) -> (Vec<SiteLine>, u64) {
    let Some(now) = history.back() else { return (Vec::new(), 0) };
    let from = now.ts_ns.saturating_sub(window_ns);
    // The latest sample at or before the window's start, else the oldest: the span covers the
    // window whenever the samples reach back that far.
    let old = history.iter().rev().find(|s| s.ts_ns <= from).or(history.front()).unwrap_or(now);
    let span = now.ts_ns.saturating_sub(old.ts_ns);
    let rate = |id: u32, live: u64| -> f64 {
        if span == 0 {
            return 0.0;
        }
        let before = old.site(id).map_or(0, |s| s.0);
        (live as f64 - before as f64) / (span as f64 / 1e9)
    };
    let mut all: Vec<(u32, u64, u64, f64)> = now.sites.iter().map(|&(id, b, c)| (id, b, c, rate(id, b))).collect();
    let mut chosen: Vec<u32> = Vec::new();
    all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    chosen.extend(all.iter().take(top).map(|s| s.0));
    let mut by_growth: Vec<&(u32, u64, u64, f64)> = all.iter().filter(|s| s.3 > 0.0).collect();
    by_growth.sort_by(|a, b| b.3.total_cmp(&a.3).then(a.0.cmp(&b.0)));
    for s in by_growth.into_iter().take(top) {
        if !chosen.contains(&s.0) {
            chosen.push(s.0);
        }
    }
    let lines = all
        .iter()
        .filter(|s| chosen.contains(&s.0))
        .map(|&(id, live_bytes, live_count, growth)| {
            let name = names.get(&id).cloned().unwrap_or_default();
            SiteLine {
                id: site_id(id),
                headline: name.headline,
                live_bytes,
                live_count,
                growth_bytes_per_s: growth,
                suspect: suspects.contains(&id),
                frames: name.frames,
                held_by: holders.get(&id).cloned().unwrap_or_default(),
            }
        })
        .collect();
    (lines, span)
}

/// A site's id as the reports write it: its stack id, or `none`.
pub(crate) fn site_id(id: u32) -> String {
    if id == gpushim_wire::NO_STACK {
        "none".to_string()
    } else {
        id.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn sample(t: u64, sites: &[(u32, u64)]) -> Sample {
        Sample {
            ts_ns: t * S,
            live_bytes: sites.iter().map(|s| s.1).sum(),
            sites: sites.iter().map(|&(id, b)| (id, b, b / 100)).collect(),
        }
    }

    /// Growth over the window: from the latest sample at or before its start, a site new since
    /// then from 0; a window longer than the history covers what there is.
    #[test]
    fn growth_over_the_window() {
        let h: VecDeque<Sample> = [
            sample(0, &[(1, 0), (2, 500)]),
            sample(5, &[(1, 1000), (2, 500), (3, 200)]),
            sample(10, &[(1, 2000), (2, 500), (4, 100)]),
        ]
        .into_iter()
        .collect();
        let names = HashMap::from([(1, Name { headline: "grow (a.c:1)".into(), frames: vec![] })]);
        let (lines, span) = sites(&h, 5 * S, 10, &names, &[1], &HashMap::new());
        assert_eq!(span, 5 * S);
        // Between samples: from the one before the window's start.
        assert_eq!(sites(&h, 4 * S, 10, &names, &[1], &HashMap::new()).1, 5 * S);
        let ids: Vec<&str> = lines.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(ids, ["1", "2", "4"]);
        assert_eq!(
            (lines[0].growth_bytes_per_s, lines[0].suspect, lines[0].headline.as_str()),
            (200.0, true, "grow (a.c:1)")
        );
        assert_eq!(lines[1].growth_bytes_per_s, 0.0);
        assert_eq!((lines[2].live_bytes, lines[2].growth_bytes_per_s), (100, 20.0));
        let (lines, span) = sites(&h, 60 * S, 1, &names, &[], &HashMap::new());
        assert_eq!(span, 10 * S);
        // The top one by live bytes, and the top one by growth: the same site.
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].growth_bytes_per_s, 200.0);
        assert!(sites(&VecDeque::new(), S, 5, &names, &[], &HashMap::new()).0.is_empty());
    }
}
