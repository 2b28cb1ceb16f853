//! What `gpushim top` shows of a frame in words: the header's lines, a site's headline and
//! rate, the sites in either order, one text frame (`--once`), a job's row per process, and a
//! failed request in one line; the full-screen view ([`super::top_view`]) draws the same words.

use std::fmt::Write as _;

use crate::control::client::Failure;
use crate::control::frame::{Frame, SiteLine};
use crate::error::{coded, USAGE};
use crate::report::words::{self, fmt_bytes};

/// A failed request in one line.
pub(super) fn failure(pid: u32, f: Failure) -> anyhow::Error {
    coded(
        USAGE,
        match f {
            Failure::NoCollector => format!("the collector of pid {pid} is gone (the program ended?)"),
            Failure::Gone(why) => format!("the collector of pid {pid} is gone: {why}"),
            Failure::Refused(why) => format!("the collector of pid {pid}: {why}"),
        },
    )
}

/// How the sites are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sort {
    /// Most live bytes first.
    Live,
    /// Fastest growth over the window first.
    Growth,
}

/// `frame`'s sites in `sort` order.
pub(super) fn sorted(frame: &Frame, sort: Sort) -> Vec<&SiteLine> {
    let mut v: Vec<&SiteLine> = frame.sites.iter().collect();
    match sort {
        Sort::Live => v.sort_by_key(|s| std::cmp::Reverse(s.live_bytes)),
        Sort::Growth => v.sort_by(|a, b| b.growth_bytes_per_s.total_cmp(&a.growth_bytes_per_s)),
    }
    v
}

/// A rate for a person: `+1.2 MiB/s`, `-64.0 KiB/s`, `0 B/s`.
pub(super) fn rate(bytes_per_s: f64) -> String {
    let sign = if bytes_per_s > 0.0 {
        "+"
    } else if bytes_per_s < 0.0 {
        "-"
    } else {
        ""
    };
    format!("{sign}{}/s", fmt_bytes(bytes_per_s.abs().round() as u64))
}

/// The header's lines: the process, its totals per kind and GPU, the driver's figure.
pub(super) fn header(f: &Frame) -> Vec<String> {
    let rank = f.rank.map(|r| format!(" rank {r}")).unwrap_or_default();
    let state = if f.ended { ", ended" } else { "" };
    let mut lines =
        vec![format!("pid {}{rank}: {} (up {:.1} s{state})", f.pid, clean(&f.command.join(" ")), f.uptime_s)];
    let mut kinds = format!(
        "live {} in {} allocations, peak {}",
        fmt_bytes(f.totals.live_bytes),
        f.totals.live_count,
        fmt_bytes(f.totals.peak_live_bytes)
    );
    for (name, g) in [("device", &f.kinds.device), ("managed", &f.kinds.managed), ("pinned_host", &f.kinds.pinned_host)]
    {
        if g.peak_live_bytes > 0 {
            let _ = write!(kinds, "; {name} {} (peak {})", fmt_bytes(g.live_bytes), fmt_bytes(g.peak_live_bytes));
        }
    }
    lines.push(kinds);
    let gpus: Vec<String> = f
        .gpus
        .iter()
        .map(|g| {
            format!("GPU {} {} (peak {})", g.ordinal, fmt_bytes(g.gauge.live_bytes), fmt_bytes(g.gauge.peak_live_bytes))
        })
        .collect();
    let driver = if f.driver.is_empty() {
        format!("driver: {}", f.driver_unavailable.as_deref().unwrap_or("no figure yet"))
    } else {
        let d: Vec<String> = f
            .driver
            .iter()
            .map(|d| {
                let untraced = d.untraced_bytes.map(|u| format!(", untraced {}", fmt_bytes(u))).unwrap_or_default();
                format!("driver: NVML GPU {} {}{untraced}", d.nvml_index, fmt_bytes(d.used_bytes))
            })
            .collect();
        d.join("; ")
    };
    lines.push(format!("{}{}{driver}", gpus.join("; "), if gpus.is_empty() { "" } else { "; " }));
    lines
}

/// A row's sites for a person: `site 3`, or `sites 3, 4` for the sites of one line.
pub(super) fn site_ids(s: &SiteLine) -> String {
    if s.sites.len() > 1 {
        format!("sites {}", s.sites.join(", "))
    } else {
        format!("site {}", s.id)
    }
}

/// A row's headline for a person: its headline, followed by its sites when it has several
/// (`Buf.__init__ (myleak.py:10) (sites 3, 4)`), else its sites.
pub(super) fn headline(s: &SiteLine) -> String {
    if s.headline.is_empty() {
        site_ids(s)
    } else if s.sites.len() > 1 {
        format!("{} ({})", clean(&s.headline), site_ids(s))
    } else {
        clean(&s.headline)
    }
}

/// `s` with control characters shown as `?` (names come from the program's files).
pub(super) fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// The sites live, and the rows they make when these are fewer (the sites of one line are one
/// row): `4 sites live in 2 rows`, or `2 sites live` (`sites` false: `4 live in 2 rows`, as the
/// full-screen view's title says it after "sites by …"). A frame without `rows_live` (an older
/// collector's) gives the sites only.
pub(super) fn sites_live(f: &Frame, sites: bool) -> String {
    let n = if sites { words::count(f.sites_live, "site") } else { f.sites_live.to_string() };
    if f.rows_live == 0 || f.rows_live == f.sites_live {
        format!("{n} live")
    } else {
        format!("{n} live in {}", words::count(f.rows_live, "row"))
    }
}

/// One text frame (`--once`): the header, then up to `top` rows in `sort` order.
pub(super) fn text(f: &Frame, sort: Sort, top: usize) -> String {
    let mut out = String::new();
    for l in header(f) {
        let _ = writeln!(out, "{l}");
    }
    let why = if f.rows_live == 0 || f.rows_live == f.sites_live { "" } else { " (sites of one line are one row)" };
    let _ = writeln!(
        out,
        "{}{why}, {}; growth over the last {:.0} s ({:.1} s of samples)",
        sites_live(f, true),
        words::count(f.suspects, "suspect"),
        f.window_s,
        f.window_covered_s
    );
    let _ = writeln!(out, "{:>10}  {:>7}  {:>13}  {:<7}  SITE", "LIVE", "COUNT", "GROWTH", "SUSPECT");
    for s in sorted(f, sort).into_iter().take(top) {
        let _ = writeln!(
            out,
            "{:>10}  {:>7}  {:>13}  {:<7}  {}",
            fmt_bytes(s.live_bytes),
            s.live_count,
            rate(s.growth_bytes_per_s),
            if s.suspect { "yes" } else { "" },
            headline(s)
        );
    }
    out
}

/// A process's name in a job: `rank R (pid P)`, or `pid P` without a rank.
pub(super) fn process(f: &Frame) -> String {
    match f.rank {
        Some(r) => format!("rank {r} (pid {})", f.pid),
        None => format!("pid {}", f.pid),
    }
}

/// The process's live bytes' change over the frame's window, per second, from its series: from
/// the first point with live bytes among those from the latest at or before the window's start
/// (else the oldest), as a row's growth is measured (`frame::sites`): memory that appeared
/// after the first point and stayed (a start-up allocation) is no growth.
pub(super) fn process_growth(f: &Frame) -> f64 {
    let Some(now) = f.series.last() else { return 0.0 };
    let from = now.t_s - f.window_s;
    let first = f.series.iter().rposition(|p| p.t_s <= from).unwrap_or(0);
    let Some(old) = f.series[first..].iter().find(|p| p.live_bytes > 0) else { return 0.0 };
    let span = now.t_s - old.t_s;
    if span <= 0.0 {
        return 0.0;
    }
    (now.live_bytes as f64 - old.live_bytes as f64) / span
}

/// The suspect a job's row names: the suspect row growing fastest over the window, else none.
/// It need not be the report's first suspect: the report puts definitely-lost memory first,
/// which a frame does not know.
pub(super) fn fastest_suspect(f: &Frame) -> Option<&SiteLine> {
    f.sites.iter().filter(|s| s.suspect).max_by(|a, b| a.growth_bytes_per_s.total_cmp(&b.growth_bytes_per_s))
}

/// The cells of a job's row: process, live, peak, growth, suspects, fastest suspect.
pub(super) fn job_cells(f: &Frame) -> [String; 6] {
    let top =
        fastest_suspect(f).map(|s| format!("{} ({})", headline(s), rate(s.growth_bytes_per_s))).unwrap_or_default();
    [
        process(f),
        fmt_bytes(f.totals.live_bytes),
        fmt_bytes(f.totals.peak_live_bytes),
        rate(process_growth(f)),
        f.suspects.to_string(),
        top,
    ]
}

/// The text of a job (`--once` on `gpushim run`'s pid): one row per traced process, and one
/// line for each process whose frame could not be had.
pub(super) fn job_text(name: &str, frames: &[Result<Frame, String>]) -> String {
    let window = frames.iter().flatten().map(|f| f.window_s).next().unwrap_or(0.0);
    let mut out = format!("{name}: {} traced processes; growth over the last {window:.0} s\n", frames.len());
    let _ = writeln!(
        out,
        "{:<22}  {:>10}  {:>10}  {:>13}  {:>8}  FASTEST SUSPECT",
        "PROCESS", "LIVE", "PEAK", "GROWTH", "SUSPECTS"
    );
    for f in frames {
        match f {
            Ok(f) => {
                let [p, live, peak, growth, n, top] = job_cells(f);
                let _ = writeln!(out, "{p:<22}  {live:>10}  {peak:>10}  {growth:>13}  {n:>8}  {top}");
            }
            Err(why) => {
                let _ = writeln!(out, "{why}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::frame::{Frame, SiteLine};

    #[test]
    fn a_text_frame() {
        let site = |id: &str, live: u64, g: f64, h: &str| SiteLine {
            id: id.into(),
            sites: vec![id.into()],
            headline: h.into(),
            live_bytes: live,
            live_count: 2,
            growth_bytes_per_s: g,
            suspect: g > 0.0,
            frames: vec![],
            held_by: vec![],
        };
        let f = Frame {
            pid: 7,
            command: vec!["./grow".into(), "\x1b[2J".into()],
            uptime_s: 12.0,
            window_s: 10.0,
            window_covered_s: 10.0,
            sites_live: 4,
            rows_live: 3,
            suspects: 1,
            sites: vec![
                site("1", 1 << 20, 0.0, "big (a.c:1)"),
                site("2", 1024, 2048.0, ""),
                SiteLine { sites: vec!["4".into(), "3".into()], ..site("4", 4096, 0.0, "Buf.__init__ (myleak.py:10)") },
            ],
            ..Frame::default()
        };
        let t = text(&f, Sort::Live, 10);
        assert!(t.starts_with("pid 7: ./grow ?[2J (up 12.0 s)\n"), "{t}");
        // Four sites in three rows: the line says both, and why.
        assert_eq!(
            t.lines().nth(3),
            Some("4 sites live in 3 rows (sites of one line are one row), 1 suspect; growth over the last 10 s (10.0 s of samples)"),
            "{t}"
        );
        assert_eq!(sites_live(&f, false), "4 live in 3 rows");
        // As many rows as sites, or a frame without `rows_live`: the sites only.
        for rows_live in [4, 0] {
            let g = Frame { rows_live, ..f.clone() };
            assert!(text(&g, Sort::Live, 10).lines().nth(3).unwrap().starts_with("4 sites live, 1 suspect; "));
            assert_eq!(sites_live(&g, false), "4 live");
        }
        let rows: Vec<&str> = t.lines().skip(5).collect();
        assert!(rows[0].ends_with("big (a.c:1)") && rows[2].ends_with("site 2"), "{t}");
        // The sites of one line: one row, its sites after its headline.
        assert!(rows[1].ends_with("Buf.__init__ (myleak.py:10) (sites 4, 3)"), "{t}");
        assert!(rows[2].contains("+2.0 KiB/s") && rows[2].contains("yes"), "{t}");
        let t = text(&f, Sort::Growth, 1);
        assert_eq!(t.lines().count(), 6, "{t}");
        assert!(t.lines().last().unwrap().ends_with("site 2"), "{t}");
    }

    #[test]
    fn a_jobs_rows() {
        use crate::control::frame::Point;
        let point = |t_s: f64, live_bytes: u64| Point { t_s, live_bytes };
        let leak = SiteLine {
            id: "3".into(),
            headline: "grow (a.c:9)".into(),
            growth_bytes_per_s: 100.0,
            suspect: true,
            ..SiteLine::default()
        };
        // A suspect with more live bytes, growing slower: the row names the fastest one.
        let big = SiteLine {
            id: "5".into(),
            headline: "keep (a.c:20)".into(),
            live_bytes: 1 << 30,
            growth_bytes_per_s: 10.0,
            suspect: true,
            ..SiteLine::default()
        };
        let f = Frame {
            pid: 42,
            rank: Some(1),
            window_s: 10.0,
            series: vec![point(0.0, 0), point(5.0, 500), point(15.0, 1500)],
            suspects: 2,
            sites: vec![big, leak],
            ..Frame::default()
        };
        // From the point at or before 15 - 10 = 5 s.
        assert_eq!(process_growth(&f), 100.0);
        // Three seconds of a run whose start-up allocation came after the first point: none.
        let m = 32 << 20;
        let start = Frame { series: vec![point(0.0, 0), point(1.0, m), point(2.0, m), point(3.0, m)], ..f.clone() };
        assert_eq!(process_growth(&start), 0.0);
        let t = job_text("pid 7", &[Ok(f), Err("the collector of pid 43 is gone".into())]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "pid 7: 2 traced processes; growth over the last 10 s");
        // The column says what it picks: the suspect growing fastest, not the report's first.
        assert!(lines[1].starts_with("PROCESS") && lines[1].ends_with("  SUSPECTS  FASTEST SUSPECT"), "{t}");
        assert!(lines[2].starts_with("rank 1 (pid 42)") && lines[2].ends_with("grow (a.c:9) (+100 B/s)"), "{t}");
        assert_eq!(lines[3], "the collector of pid 43 is gone");
    }
}
