//! The frame of the live view that the control endpoint sends (`gpushim top --json` prints it;
//! docs/report-schema.md, "The live frame"), and how it is computed from the samples the
//! collector keeps.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::report::Gauge;

/// The `format` of a frame.
pub const FORMAT: &str = "gpushim-top-frame";

/// The frame's version: a reader refuses a frame of a later one. Version 2: a row of `sites`
/// is the sites of one line of user code (`SiteLine::sites`), and `suspects` counts such rows;
/// in version 1 each row was one site, and `suspects` counted sites.
pub const VERSION: u32 = 2;

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
    /// The rows those sites make (the sites of one line of user code are one row), of the
    /// latest sample's sites (the [`super::SITES_PER_SAMPLE`] largest); 0 in a frame that predates it.
    #[serde(default)]
    pub rows_live: u64,
    /// The top rows by live bytes and those by growth, most live bytes first: a row is a
    /// site, or the sites of one line of user code ([`SiteLine`]).
    pub sites: Vec<SiteLine>,
    /// Leak suspects as of the latest ranking, the suspect sites of one line of user code
    /// counted once (as the report groups them).
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

/// One row of the frame: a site, or the sites of one line of user code (those whose headlines
/// have the same key, `frames::Headline::key`, as the report groups its suspects).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteLine {
    /// The id in the reports of its site with most live bytes (the stack id; `none` for
    /// allocations without a stack).
    pub id: String,
    /// The ids of all its sites, most live bytes first (`id` is the first); empty in a frame of
    /// version 1, whose rows are one site each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<String>,
    /// Its headline, as the summary names a suspect (`render (leak.c:57)`), else its first
    /// user frame; empty when not known yet.
    pub headline: String,
    /// Live bytes of its sites.
    pub live_bytes: u64,
    /// Live allocations of its sites.
    pub live_count: u64,
    /// Change of its sites' live bytes over the window, per second (see [`sites`]).
    pub growth_bytes_per_s: f64,
    /// Whether any of its sites is a leak suspect as of the latest ranking.
    pub suspect: bool,
    /// The frames of its site with most live bytes, innermost first, each `function
    /// (file:line)`; `[internal]` before the CUDA, framework and runtime frames.
    pub frames: Vec<String>,
    /// Who held its sites' memory at the latest snapshot's heap walk (a Python program's): the
    /// lines a report gives under each site (`held by: train.py global 'kept' → list[*] → 208
    /// objects (832.0 MiB)`), each once; empty without one.
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
    /// What sites are grouped by: its headline's key (`frames::Headline::key`); empty when it
    /// has none (the site is a row of its own).
    pub key: String,
    /// Its line of user code as the ranking unites sites (`owners::union_line`).
    pub line: Option<String>,
    /// A caching pool holds its memory (`owners::Owner::pool`).
    pub pool: bool,
    pub frames: Vec<String>,
}

/// The rows of a frame ([`sites`]), the span the growth covers, and the suspects counted as
/// rows.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rows {
    pub lines: Vec<SiteLine>,
    /// The rows of all the latest sample's sites, not only those in `lines`.
    pub all: u64,
    pub span_ns: u64,
    pub suspects: u64,
}

/// Computes the rows of a frame over `window_ns` from `history` (oldest first): the sites of
/// the latest sample, those whose names have the same key one row (bytes, counts and growth
/// summed, a suspect when any of them is, named and framed by its largest site, the holders of
/// all), and of these the `top` by live bytes and the `top` by growth, most live bytes first.
/// The suspects are counted the same way: the suspect sites of one key count once.
pub(crate) fn sites(
    history: &VecDeque<Sample>,
    window_ns: u64,
    top: usize,
    names: &HashMap<u32, Name>,
    suspects: &[u32],
    holders: &HashMap<u32, Vec<String>>,
) -> Rows {
    let key = |id: u32| names.get(&id).map(|n| n.key.as_str()).filter(|k| !k.is_empty());
    let mut keys = std::collections::HashSet::new();
    let suspect_rows = suspects.iter().filter(|&&id| key(id).is_none_or(|k| keys.insert(k))).count() as u64;
    let Some(now) = history.back() else { return Rows { suspects: suspect_rows, ..Rows::default() } };
    let from = now.ts_ns.saturating_sub(window_ns);
    // The span starts at the latest sample at or before the window's start, else at the
    // oldest: it covers the window whenever the samples reach back that far.
    let first = history.iter().rposition(|s| s.ts_ns <= from).unwrap_or(0);
    let span = now.ts_ns.saturating_sub(history[first].ts_ns);
    // Each row's sites, most live bytes first.
    let mut groups: Vec<Vec<(u32, u64, u64)>> = Vec::new();
    let mut by_key: HashMap<&str, usize> = HashMap::new();
    for &site in &now.sites {
        // A key seen first is given the index of the row it starts.
        match key(site.0).map(|k| *by_key.entry(k).or_insert(groups.len())) {
            Some(i) if i < groups.len() => groups[i].push(site),
            _ => groups.push(vec![site]),
        }
    }
    struct Row {
        sites: Vec<(u32, u64, u64)>,
        live: u64,
        count: u64,
        growth: f64,
    }
    let mut all: Vec<Row> = groups
        .into_iter()
        .map(|mut sites| {
            sites.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let ids: Vec<u32> = sites.iter().map(|s| s.0).collect();
            Row {
                live: sites.iter().fold(0u64, |a, s| a.saturating_add(s.1)),
                count: sites.iter().map(|s| s.2).sum(),
                growth: growth(history.range(first..), now, &ids),
                sites,
            }
        })
        .collect();
    all.sort_by(|a, b| b.live.cmp(&a.live).then(a.sites[0].0.cmp(&b.sites[0].0)));
    let mut chosen: Vec<usize> = (0..all.len().min(top)).collect();
    let mut by_growth: Vec<usize> = (0..all.len()).filter(|&i| all[i].growth > 0.0).collect();
    by_growth.sort_by(|&a, &b| all[b].growth.total_cmp(&all[a].growth).then(all[a].sites[0].0.cmp(&all[b].sites[0].0)));
    for i in by_growth.into_iter().take(top) {
        if !chosen.contains(&i) {
            chosen.push(i);
        }
    }
    chosen.sort_unstable();
    let rows_all = all.len() as u64;
    let lines = chosen
        .into_iter()
        .map(|i| {
            let row = &all[i];
            let head = row.sites[0].0;
            let name = names.get(&head).cloned().unwrap_or_default();
            let mut held_by: Vec<String> = Vec::new();
            for line in row.sites.iter().filter_map(|s| holders.get(&s.0)).flatten() {
                if !held_by.contains(line) {
                    held_by.push(line.clone());
                }
            }
            SiteLine {
                id: site_id(head),
                sites: row.sites.iter().map(|s| site_id(s.0)).collect(),
                headline: name.headline,
                live_bytes: row.live,
                live_count: row.count,
                growth_bytes_per_s: row.growth,
                suspect: row.sites.iter().any(|s| suspects.contains(&s.0)),
                frames: name.frames,
                held_by,
            }
        })
        .collect();
    Rows { lines, all: rows_all, span_ns: span, suspects: suspect_rows }
}

/// The growth of the live bytes of `ids` (summed), per second, over `span` (the samples of the
/// span, oldest first, ending with `now`): from the first sample of the span in which they
/// were live to `now`. Sites live at the span's first sample are measured from it; sites not
/// live then are measured from their own first sample, not from 0: one sample showing memory
/// that the samples before it did not is a one-off allocation as much as growth (a start-up
/// buffer made before the collector's first sample could take it in, or between two samples),
/// so growth needs two samples of the span showing it. A site live only in `now` has 0.
fn growth<'a>(span: impl Iterator<Item = &'a Sample>, now: &Sample, ids: &[u32]) -> f64 {
    let live = |s: &Sample| ids.iter().filter_map(|&id| s.site(id)).fold(0u64, |a, v| a.saturating_add(v.0));
    let Some(base) = span.into_iter().find(|s| live(s) > 0) else { return 0.0 };
    let secs = now.ts_ns.saturating_sub(base.ts_ns) as f64 / 1e9;
    if secs <= 0.0 {
        return 0.0;
    }
    (live(now) as f64 - live(base) as f64) / secs
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
    /// then from its own first sample (0 when that is the latest); a window longer than the
    /// history covers what there is.
    #[test]
    fn growth_over_the_window() {
        let h: VecDeque<Sample> = [
            sample(0, &[(1, 0), (2, 500)]),
            sample(5, &[(1, 1000), (2, 500), (3, 200)]),
            sample(10, &[(1, 2000), (2, 500), (4, 100)]),
        ]
        .into_iter()
        .collect();
        let names = HashMap::from([(1, Name { headline: "grow (a.c:1)".into(), ..Name::default() })]);
        let Rows { lines, all, span_ns, suspects } = sites(&h, 5 * S, 10, &names, &[1], &HashMap::new());
        assert_eq!((all, span_ns, suspects), (3, 5 * S, 1));
        // Between samples: from the one before the window's start.
        assert_eq!(sites(&h, 4 * S, 10, &names, &[1], &HashMap::new()).span_ns, 5 * S);
        let ids: Vec<&str> = lines.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(ids, ["1", "2", "4"]);
        assert_eq!(
            (lines[0].growth_bytes_per_s, lines[0].suspect, lines[0].headline.as_str()),
            (200.0, true, "grow (a.c:1)")
        );
        assert_eq!(lines[1].growth_bytes_per_s, 0.0);
        // Site 4 is live in the latest sample only: one sample shows no growth.
        assert_eq!((lines[2].live_bytes, lines[2].growth_bytes_per_s), (100, 0.0));
        let Rows { lines, span_ns, .. } = sites(&h, 60 * S, 1, &names, &[], &HashMap::new());
        assert_eq!(span_ns, 10 * S);
        // The top one by live bytes, and the top one by growth: the same site.
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].growth_bytes_per_s, 200.0);
        assert!(sites(&VecDeque::new(), S, 5, &names, &[], &HashMap::new()).lines.is_empty());
    }

    /// Sites whose names have the same key (one line of user code reached by two stacks) are
    /// one row: bytes, counts and growth summed, a suspect as its members are, named and
    /// framed by the largest, with the holders of both once each; the suspects are counted as
    /// rows. A site without a key is a row of its own.
    #[test]
    fn sites_of_one_line_are_one_row() {
        let name = |key: &str, headline: &str, frame: &str| Name {
            headline: headline.into(),
            key: key.into(),
            frames: vec![frame.into()],
            ..Name::default()
        };
        let names = HashMap::from([
            (3, name("user Buf.__init__ myleak.py:10", "Buf.__init__ (myleak.py:10)", "pool_a (p.c:1)")),
            (4, name("user Buf.__init__ myleak.py:10", "Buf.__init__ (myleak.py:10)", "pool_b (p.c:2)")),
            (5, name("", "", "")),
            (6, name("user main m.py:3", "main (m.py:3)", "main (m.py:3)")),
        ]);
        let holders = HashMap::from([
            (3, vec!["held by: A".to_string(), "held by: B".to_string()]),
            (4, vec!["held by: B".to_string(), "held by: C".to_string()]),
        ]);
        let h: VecDeque<Sample> = [
            sample(0, &[(3, 100), (4, 300), (5, 50), (6, 1000)]),
            sample(10, &[(3, 600), (4, 800), (5, 50), (6, 1000)]),
        ]
        .into_iter()
        .collect();
        let Rows { lines, all, suspects, .. } = sites(&h, 10 * S, 10, &names, &[3, 4, 5], &holders);
        // Four sites, three rows.
        assert_eq!((all, suspects), (3, 2));
        // Id, sites, live bytes and count, growth, suspect.
        let rows: Vec<String> = lines
            .iter()
            .map(|l| {
                let sites = l.sites.join(", ");
                format!("{} [{sites}] {} {} {} {}", l.id, l.live_bytes, l.live_count, l.growth_bytes_per_s, l.suspect)
            })
            .collect();
        assert_eq!(rows, ["4 [4, 3] 1400 14 100 true", "6 [6] 1000 10 0 false", "5 [5] 50 0 0 true"]);
        assert_eq!(
            (lines[0].headline.as_str(), &lines[0].frames[..]),
            ("Buf.__init__ (myleak.py:10)", &["pool_b (p.c:2)".to_string()][..])
        );
        assert_eq!(lines[0].held_by, ["held by: B", "held by: C", "held by: A"]);
        // The top one by live bytes is the top one by growth: one row listed, of three.
        let top1 = sites(&h, 10 * S, 1, &names, &[], &holders);
        assert_eq!((top1.lines.len(), top1.all), (1, 3));
        // A row of a frame of version 1 (one site each, no `sites`) still reads.
        let v1 = r#"{"id":"7","headline":"","live_bytes":1,"live_count":1,"growth_bytes_per_s":0.0,"suspect":false,"frames":[]}"#;
        let line: SiteLine = serde_json::from_str(v1).expect("a version 1 row");
        assert_eq!((line.id.as_str(), line.sites.len()), ("7", 0));
    }

    /// Three seconds of samples and a window of ten: a start-up allocation missing from the
    /// first sample (made after it, or before it and not applied yet) and unchanged since is
    /// no growth, nor is a site live in the latest sample only; a site first seen after the
    /// span's start that keeps growing is measured from its own first sample.
    #[test]
    fn a_one_off_allocation_is_no_growth() {
        const M: u64 = 1 << 20;
        let h: VecDeque<Sample> = [
            sample(0, &[]),
            sample(1, &[(1, 32 * M), (2, M)]),
            sample(2, &[(1, 32 * M), (2, 3 * M)]),
            sample(3, &[(1, 32 * M), (2, 5 * M), (3, 8 * M)]),
        ]
        .into_iter()
        .collect();
        let Rows { lines, span_ns, .. } = sites(&h, 10 * S, 10, &HashMap::new(), &[], &HashMap::new());
        assert_eq!(span_ns, 3 * S);
        let got: Vec<(&str, u64, f64)> =
            lines.iter().map(|l| (l.id.as_str(), l.live_bytes, l.growth_bytes_per_s)).collect();
        assert_eq!(got, [("1", 32 * M, 0.0), ("3", 8 * M, 0.0), ("2", 5 * M, 2.0 * M as f64)]);
    }
}
