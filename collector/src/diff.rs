//! `gpushim diff OLD NEW`: which sites grew between two reports.
//!
//! Stack ids differ from run to run, so sites are matched by their symbolized frames
//! (function, file and line; module and offset where those are unknown). Sites of one report
//! with the same frames are added together.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::render::{first_user_frame, fmt_bytes, fmt_bytes_delta, fmt_seconds, frame_label};
use crate::report::{KindTotals, Report, Site};

/// A site's numbers in one report (summed over sites with the same frames).
#[derive(Clone, Debug, Default)]
struct Side {
    live_bytes: u64,
    live_count: u64,
    alloc_count: u64,
    free_count: u64,
    id: Option<u32>,
}

/// One row: a site in either or both reports.
#[derive(Debug)]
struct Row {
    label: String,
    old: Side,
    new: Side,
}

impl Row {
    /// True if and only if any number differs between the two reports.
    fn changed(&self) -> bool {
        let n = |s: &Side| (s.live_bytes, s.live_count, s.alloc_count, s.free_count);
        n(&self.old) != n(&self.new)
    }

    fn growth(&self) -> i128 {
        i128::from(self.new.live_bytes) - i128::from(self.old.live_bytes)
    }
}

/// The key two sites are matched by: their frames' keys, innermost first.
fn site_key(s: &Site) -> String {
    if s.frames.is_empty() {
        return if s.no_backtrace() {
            "<no backtrace>".into()
        } else {
            format!("<site {} without frames>", s.id)
        };
    }
    s.frames
        .iter()
        .map(|f| f.match_key())
        .collect::<Vec<_>>()
        .join(" <- ")
}

fn add(side: &mut Side, s: &Site) {
    side.live_bytes += s.live_bytes;
    side.live_count += s.live_count;
    side.alloc_count += s.alloc_count;
    side.free_count += s.free_count;
    side.id.get_or_insert(s.id);
}

/// Matches the sites of two reports; rows sorted by live-bytes growth, largest first.
fn rows(old: &Report, new: &Report) -> Vec<Row> {
    let mut map: BTreeMap<String, Row> = BTreeMap::new();
    for (is_new, r) in [(false, old), (true, new)] {
        for s in &r.sites {
            let row = map.entry(site_key(s)).or_insert_with(|| Row {
                label: first_user_frame(s)
                    .map_or_else(|| "(no backtrace)".to_string(), frame_label),
                old: Side::default(),
                new: Side::default(),
            });
            add(if is_new { &mut row.new } else { &mut row.old }, s);
        }
    }
    let mut v: Vec<Row> = map.into_values().collect();
    // Stable: equal growth keeps the key order.
    v.sort_by_key(|r| std::cmp::Reverse(r.growth()));
    v
}

fn which(r: &Row) -> String {
    match (r.old.id, r.new.id) {
        (None, Some(n)) => format!("new site {n}"),
        (Some(o), None) => format!("site {o} (old only)"),
        (Some(o), Some(n)) if o != n => format!("site {n} (old {o})"),
        (_, Some(n)) => format!("site {n}"),
        (None, None) => String::new(),
    }
}

/// Writes the comparison of `old` and `new`: up to `top` changed sites ranked by live-bytes
/// growth, then the totals and their growth.
///
/// # Errors
/// Only errors of `out`.
pub fn diff(old: &Report, new: &Report, top: usize, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "pid {} ({}, {}) -> pid {} ({}, {})",
        old.pid,
        old.reason.name(),
        fmt_seconds(old.duration_s),
        new.pid,
        new.reason.name(),
        fmt_seconds(new.duration_s)
    )?;
    let rows = rows(old, new);
    let changed: Vec<&Row> = rows.iter().filter(|r| r.changed()).collect();
    if changed.is_empty() {
        writeln!(out, "no site changed")?;
    } else {
        writeln!(
            out,
            "sites by live-bytes growth ({} of {} changed):",
            changed.len().min(top),
            changed.len()
        )?;
        for r in changed.iter().take(top) {
            writeln!(
                out,
                "  {:>10}  live {} -> {} in {} -> {}; allocations {} -> {}, frees {} -> {}; {}: {}",
                fmt_bytes_delta(r.growth()),
                fmt_bytes(r.old.live_bytes),
                fmt_bytes(r.new.live_bytes),
                r.old.live_count,
                r.new.live_count,
                r.old.alloc_count,
                r.new.alloc_count,
                r.old.free_count,
                r.new.free_count,
                which(r),
                r.label,
            )?;
        }
    }
    writeln!(out, "totals:")?;
    let (a, b) = (&old.totals, &new.totals);
    line(
        out,
        "live",
        a.live_bytes,
        b.live_bytes,
        Some((a.live_count, b.live_count)),
    )?;
    line(out, "peak", a.peak_live_bytes, b.peak_live_bytes, None)?;
    for ((name, ka), (_, kb)) in old.kinds.iter().into_iter().zip(new.kinds.iter()) {
        kind_line(out, name, ka, kb)?;
    }
    let mut ordinals: Vec<i32> = old
        .devices
        .iter()
        .chain(&new.devices)
        .map(|d| d.ordinal)
        .collect();
    ordinals.sort_unstable();
    ordinals.dedup();
    for o in ordinals {
        let get = |r: &Report| {
            r.devices
                .iter()
                .find(|d| d.ordinal == o)
                .map(|d| KindTotals {
                    live_bytes: d.live_bytes,
                    live_count: d.live_count,
                    peak_live_bytes: d.peak_live_bytes,
                })
                .unwrap_or_default()
        };
        kind_line(out, &format!("GPU {o}"), &get(old), &get(new))?;
    }
    writeln!(
        out,
        "  allocations {} -> {}, frees {} -> {}, failed {} -> {}",
        a.alloc_count, b.alloc_count, a.free_count, b.free_count, a.failed_count, b.failed_count
    )
}

fn kind_line(out: &mut dyn Write, name: &str, a: &KindTotals, b: &KindTotals) -> io::Result<()> {
    line(
        out,
        name,
        a.live_bytes,
        b.live_bytes,
        Some((a.live_count, b.live_count)),
    )
}

fn line(
    out: &mut dyn Write,
    name: &str,
    a: u64,
    b: u64,
    counts: Option<(u64, u64)>,
) -> io::Result<()> {
    let counts = counts
        .map(|(x, y)| format!(" in {x} -> {y} allocations"))
        .unwrap_or_default();
    writeln!(
        out,
        "  {name:<12} {} -> {} ({}){counts}",
        fmt_bytes(a),
        fmt_bytes(b),
        fmt_bytes_delta(i128::from(b) - i128::from(a))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Frame, Reason, Totals, SCHEMA};

    fn frame(function: &str, line: u32) -> Frame {
        Frame {
            function: function.into(),
            file: Some("/src/app.c".into()),
            line: Some(line),
            module: "/bin/app".into(),
            address: "0x1".into(),
            offset: Some("0x1".into()),
            internal: false,
            inlined: false,
        }
    }

    fn site(id: u32, f: &str, live_bytes: u64, live_count: u64) -> Site {
        Site {
            id,
            kind: "device".into(),
            apis: vec!["cudaMalloc".into()],
            live_bytes,
            live_count,
            alloc_count: live_count,
            frames: vec![frame(f, 10), frame("main", 50)],
            ..Site::default()
        }
    }

    fn report(pid: u32, sites: Vec<Site>) -> Report {
        let live: u64 = sites.iter().map(|s| s.live_bytes).sum();
        Report {
            schema: SCHEMA.into(),
            pid,
            ppid: 1,
            command: vec!["app".into()],
            cwd: "/".into(),
            reason: Reason::Exit,
            snapshot: None,
            start_unix_ns: 0,
            duration_s: 1.0,
            shim_version: "0.1.0".into(),
            collector_version: "0.1.0".into(),
            totals: Totals {
                live_bytes: live,
                ..Totals::default()
            },
            kinds: Default::default(),
            devices: vec![],
            sites,
            suspects: vec![],
            failures: vec![],
            mem_info: vec![],
            notes: vec![],
        }
    }

    #[test]
    fn matches_by_frames_and_ranks_by_growth() {
        let old = report(
            1,
            vec![
                site(0, "render", 1 << 20, 1),
                site(1, "load", 5 << 20, 5),
                site(2, "gone", 100, 1),
            ],
        );
        let new = report(
            2,
            vec![
                site(7, "render", 10 << 20, 10),
                site(3, "load", 5 << 20, 5),
                site(9, "fresh", 2 << 20, 2),
            ],
        );
        let mut out = Vec::new();
        diff(&old, &new, 10, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "pid 1 (exit, 1.0 s) -> pid 2 (exit, 1.0 s)");
        assert_eq!(lines[1], "sites by live-bytes growth (3 of 3 changed):");
        assert!(
            lines[2].contains("+9.0 MiB")
                && lines[2].contains("site 7 (old 0): render (src/app.c:10)"),
            "{text}"
        );
        assert!(
            lines[3].contains("+2.0 MiB") && lines[3].contains("new site 9: fresh"),
            "{text}"
        );
        assert!(
            lines[4].contains("-100 B") && lines[4].contains("site 2 (old only): gone"),
            "{text}"
        );
        assert_eq!(lines[5], "totals:");
        assert_eq!(
            lines[6],
            "  live         6.0 MiB -> 17.0 MiB (+11.0 MiB) in 0 -> 0 allocations"
        );
    }
}
