//! `gpushim diff OLD NEW`: which sites grew between two reports, as text or JSON.
//!
//! Made for the snapshot workflow (SIGUSR1 at epoch 1 and at epoch 5, then diff) and for
//! comparing two runs. Stack ids differ from run to run, so sites are matched by their
//! symbolized frames (function, file and line; module and offset where those are unknown);
//! sites of one report with the same frames are added together. Rows are ranked by growth of
//! live bytes; sites only in NEW are new, sites only in OLD vanished.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::report::words::{
    first_user_frame, fmt_bytes, fmt_bytes_change, fmt_bytes_delta, fmt_seconds, frame_label, site_id_name,
    snapshot_name,
};
use crate::report::{Frame, Gauge, Report, Site};

/// The formats `gpushim diff` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    /// For a person.
    Text,
    /// The comparison as JSON (see docs/report-schema.md, "Diff").
    Json,
    /// The comparison as one self-contained HTML page: the sites that changed, side by side.
    Html,
}

/// A site's numbers in one report (summed over sites with the same frames).
#[derive(Clone, Debug, Default, Serialize)]
struct Side {
    /// The stack id of the first matching site in that report.
    id: u32,
    live_bytes: u64,
    live_count: u64,
    alloc_count: u64,
    free_count: u64,
}

/// One row: a site in either or both reports.
#[derive(Debug)]
struct Row {
    label: String,
    frames: Vec<Frame>,
    old: Option<Side>,
    new: Option<Side>,
}

impl Row {
    fn nums(s: &Option<Side>) -> (u64, u64, u64, u64) {
        s.as_ref().map_or((0, 0, 0, 0), |s| (s.live_bytes, s.live_count, s.alloc_count, s.free_count))
    }

    /// True if and only if the site is in only one report, or any number differs.
    fn changed(&self) -> bool {
        self.old.is_none() || self.new.is_none() || Row::nums(&self.old) != Row::nums(&self.new)
    }

    fn growth(&self) -> i128 {
        i128::from(Row::nums(&self.new).0) - i128::from(Row::nums(&self.old).0)
    }

    fn status(&self) -> &'static str {
        match (&self.old, &self.new) {
            (None, _) => "new",
            (_, None) => "vanished",
            _ => match self.growth().signum() {
                1 => "grown",
                -1 => "shrunk",
                _ if self.changed() => "changed",
                _ => "unchanged",
            },
        }
    }
}

/// The key two sites are matched by: their frames' keys, innermost first.
pub(crate) fn site_key(s: &Site) -> String {
    if s.frames.is_empty() {
        return if s.no_backtrace() { "<no backtrace>".into() } else { format!("<site {} without frames>", s.id) };
    }
    s.frames.iter().map(|f| f.match_key()).collect::<Vec<_>>().join(" <- ")
}

fn add(side: &mut Option<Side>, s: &Site) {
    let side = side.get_or_insert_with(|| Side { id: s.id, ..Side::default() });
    side.live_bytes += s.live_bytes;
    side.live_count += s.live_count;
    side.alloc_count += s.alloc_count;
    side.free_count += s.free_count;
}

/// Matches the sites of two reports; rows sorted by live-bytes growth, largest first.
fn rows(old: &Report, new: &Report) -> Vec<Row> {
    let mut map: BTreeMap<String, Row> = BTreeMap::new();
    for (is_new, r) in [(false, old), (true, new)] {
        for s in &r.sites {
            let row = map.entry(site_key(s)).or_insert_with(|| Row {
                label: first_user_frame(s).map_or_else(|| "(no backtrace)".to_string(), frame_label),
                frames: s.frames.clone(),
                old: None,
                new: None,
            });
            add(if is_new { &mut row.new } else { &mut row.old }, s);
        }
    }
    let mut v: Vec<Row> = map.into_values().collect();
    disambiguate(&mut v);
    // Stable: equal growth keeps the key order.
    v.sort_by_key(|r| std::cmp::Reverse(r.growth()));
    v
}

/// The first `depth` frames of the user's code (innermost first), `a <- b <- c`.
fn user_frames_label(frames: &[Frame], depth: usize) -> String {
    let user: Vec<&Frame> = frames.iter().filter(|f| !f.internal).collect();
    let shown = if user.is_empty() {
        frames.iter().take(depth).collect::<Vec<_>>()
    } else {
        user.into_iter().take(depth).collect()
    };
    shown.into_iter().map(frame_label).collect::<Vec<_>>().join(" <- ")
}

/// Rows whose labels read the same (two sites reached through one helper function) get their
/// callers added to the label, up to four frames, until they differ.
fn disambiguate(rows: &mut [Row]) {
    for depth in 2..=4 {
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for r in rows.iter() {
            *seen.entry(r.label.as_str()).or_default() += 1;
        }
        let dup: Vec<bool> = rows.iter().map(|r| seen[r.label.as_str()] > 1 && !r.frames.is_empty()).collect();
        if !dup.contains(&true) {
            return;
        }
        for (r, d) in rows.iter_mut().zip(dup) {
            if d {
                r.label = user_frames_label(&r.frames, depth);
            }
        }
    }
}

/// The row's site as its reports name it: `site 7 (old 0)`, `new site 9`, `site without
/// backtrace (only in the old report)`.
fn which(r: &Row) -> String {
    match (&r.old, &r.new) {
        (None, Some(n)) => format!("new site {}", site_id_name(n.id)),
        (Some(o), None) => format!("site {} (only in the old report)", site_id_name(o.id)),
        (Some(o), Some(n)) if o.id != n.id => format!("site {} (old {})", site_id_name(n.id), site_id_name(o.id)),
        (_, Some(n)) => format!("site {}", site_id_name(n.id)),
        (None, None) => String::new(),
    }
}

/// True if and only if both reports come from the same traced process (same pid and start).
fn same_process(a: &Report, b: &Report) -> bool {
    a.pid == b.pid && a.start_unix_ns == b.start_unix_ns && a.start_unix_ns != 0
}

/// `exit, 1.0 s`, `snapshot 3, 2.5 s` or `snapshot 1 "half", 10 s`.
fn describe(r: &Report) -> String {
    let what = match r.snapshot {
        Some(n) => snapshot_name(n, r.label.as_deref()),
        None => r.reason.name().to_string(),
    };
    format!("{what}, {}", fmt_seconds(r.duration_s))
}

/// A holder group (the heap walk's companion files, CPython targets) compared between the two
/// reports: matched by its path without counts ([`crate::explain::holders::holder_label`]).
#[derive(Serialize)]
struct HolderChange {
    label: String,
    how: String,
    objects: Change,
    bytes: Change,
}

/// The holder groups whose bytes grew from `old` to `new` (new groups included), most growth
/// first; empty unless `new` has a walk. A side without a walk counts as holding nothing.
fn holder_changes(old: &Report, new: &Report) -> Vec<HolderChange> {
    let Some(nh) = new.holders.as_ref() else { return Vec::new() };
    let before = old.holders.as_ref().map(crate::explain::holders::group_totals).unwrap_or_default();
    let mut v: Vec<HolderChange> = crate::explain::holders::group_totals(nh)
        .into_iter()
        .filter_map(|(label, (how, objects, bytes))| {
            let (o_objects, o_bytes) = before.get(&label).map_or((0, 0), |b| (b.1, b.2));
            (bytes > o_bytes).then(|| HolderChange {
                label,
                how,
                objects: Change::of(o_objects, objects),
                bytes: Change::of(o_bytes, bytes),
            })
        })
        .collect();
    v.sort_by(|a, b| b.bytes.growth.cmp(&a.bytes.growth).then_with(|| a.label.cmp(&b.label)));
    v
}

/// Notes about the holders' comparison: a side without a heap walk, and a walk that saw other
/// live bytes than its report (it runs after the snapshot, while the program goes on), which
/// makes the holders' growth differ from the sites'.
fn holder_caveats(old: &Report, new: &Report) -> Vec<String> {
    let mut v = match (old.holders.is_some(), new.holders.is_some()) {
        (false, true) => vec!["OLD has no heap walk (no holders file): every holder of NEW counts as new".into()],
        (true, false) => vec!["NEW has no heap walk (no holders file): holders are not compared".into()],
        _ => Vec::new(),
    };
    for (name, r) in [("OLD", old), ("NEW", new)] {
        let Some(h) = r.holders.as_ref() else { continue };
        let (mut walk, mut report) = (0u64, 0u64);
        for s in &h.sites {
            if let Some(site) = s.site.and_then(|id| r.sites.iter().find(|x| x.id == id)) {
                walk += s.live_bytes;
                report += site.live_bytes;
            }
        }
        if walk != report {
            v.push(format!(
                "{name}'s heap walk ran after its report was taken, while the program went on: its sites \
                 held {} live then and {} in the report, so the holders' growth differs from the sites' \
                 by that",
                fmt_bytes(walk),
                fmt_bytes(report)
            ));
        }
    }
    v
}

/// Notes about the comparison itself: capped site lists make "new" and "vanished" unsure.
fn caveats(old: &Report, new: &Report) -> Vec<String> {
    let mut v = Vec::new();
    for (name, r) in [("OLD", old), ("NEW", new)] {
        if r.notes.iter().any(|n| n.starts_with("the report lists")) {
            v.push(format!(
                "{name} lists only some of its sites: a site missing from it may only have been \
                 left out"
            ));
        }
    }
    v
}

/// The program a report is of, for telling two programs apart: the executable's file name and,
/// for an interpreter (`python…`, `node`, `ruby`, `perl`, `bash`, `sh`), its first argument that
/// is not an option (the script). A different argument list of the same program is the same
/// program (a run with more steps).
fn program(r: &Report) -> String {
    let mut words = r.command.iter();
    let exe = words.next().map(|w| w.rsplit('/').next().unwrap_or(w).to_string()).unwrap_or_default();
    let interpreter = exe.starts_with("python") || ["node", "ruby", "perl", "bash", "sh"].contains(&exe.as_str());
    match words.find(|w| !w.starts_with('-')).filter(|_| interpreter) {
        Some(script) => format!("{exe} {script}"),
        None => exe,
    }
}

/// The moment a report describes, ns since the epoch: its process's start plus its duration.
fn taken_at_ns(r: &Report) -> u128 {
    u128::from(r.start_unix_ns) + (r.duration_s.max(0.0) * 1e9) as u128
}

/// What looks wrong about comparing `old` with `new`, one line each, for standard error: two
/// different programs ([`program`]), or OLD newer than NEW (started later, or, within one
/// process, taken later: the arguments swapped?). Reports without a start time are not
/// compared in time.
pub fn warnings(old: &Report, new: &Report) -> Vec<String> {
    let mut v = Vec::new();
    let (a, b) = (program(old), program(new));
    if a != b {
        v.push(format!("OLD and NEW are reports of different programs ({a} and {b}): their sites may not match"));
    }
    if old.start_unix_ns != 0 && new.start_unix_ns != 0 {
        if same_process(old, new) {
            if taken_at_ns(old) > taken_at_ns(new) {
                v.push(format!(
                    "OLD ({}) was taken after NEW ({}): are OLD and NEW swapped? growth is shown from OLD to NEW",
                    describe(old),
                    describe(new)
                ));
            }
        } else if old.start_unix_ns > new.start_unix_ns {
            v.push(format!(
                "OLD (pid {}) started after NEW (pid {}): are OLD and NEW swapped? growth is shown from OLD to NEW",
                old.pid, new.pid
            ));
        }
    }
    v
}

/// Writes the comparison of `old` and `new` for a person: up to `top` changed sites ranked by
/// live-bytes growth, then the totals and their growth, then how many sites were new,
/// vanished and unchanged.
///
/// # Errors
/// Only errors of `out`.
pub fn diff(old: &Report, new: &Report, top: usize, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "pid {} ({}) -> pid {} ({}){}",
        old.pid,
        describe(old),
        new.pid,
        describe(new),
        if same_process(old, new) { "; same process" } else { "" }
    )?;
    let rows = rows(old, new);
    let changed: Vec<&Row> = rows.iter().filter(|r| r.changed()).collect();
    if changed.is_empty() {
        writeln!(out, "no site changed")?;
    } else {
        // How many sites changed out of how many in either report, and how many are shown.
        let shown = if changed.len() > top { format!("; the top {top} shown") } else { String::new() };
        writeln!(
            out,
            "sites by live-bytes growth ({} of {} changed{shown}):",
            changed.len(),
            crate::report::words::count(rows.len() as u64, "site")
        )?;
        for r in changed.iter().take(top) {
            let (o, n) = (Row::nums(&r.old), Row::nums(&r.new));
            writeln!(
                out,
                "  {:>10}  live {} -> {} in {} -> {}; allocations {} -> {}, frees {} -> {}; {}: {}",
                fmt_bytes_change(o.0, n.0),
                fmt_bytes(o.0),
                fmt_bytes(n.0),
                o.1,
                n.1,
                o.2,
                n.2,
                o.3,
                n.3,
                which(r),
                r.label,
            )?;
        }
    }
    writeln!(out, "totals:")?;
    let (a, b) = (&old.totals, &new.totals);
    line(out, "live", a.gauge.live_bytes, b.gauge.live_bytes, Some((a.gauge.live_count, b.gauge.live_count)))?;
    line(out, "peak", a.gauge.peak_live_bytes, b.gauge.peak_live_bytes, None)?;
    for ((name, ka), (_, kb)) in old.kinds.iter().into_iter().zip(new.kinds.iter()) {
        kind_line(out, name, ka, kb)?;
    }
    for (o, ka, kb) in device_pairs(old, new) {
        kind_line(out, &format!("GPU {o}"), &ka, &kb)?;
    }
    writeln!(
        out,
        "  allocations {} -> {}, frees {} -> {}, failed {} -> {}",
        a.alloc_count, b.alloc_count, a.free_count, b.free_count, a.failed_count, b.failed_count
    )?;
    let count = |status: &str| rows.iter().filter(|r| r.status() == status).count();
    let bytes = |status: &str| -> i128 { rows.iter().filter(|r| r.status() == status).map(Row::growth).sum() };
    // "changed": the same live bytes, other counts moved (allocations and frees in between).
    let churned = match count("changed") {
        0 => String::new(),
        n => format!(", {n} changed at the same live bytes"),
    };
    writeln!(
        out,
        "sites: {} new ({}), {} vanished ({}), {} grown, {} shrunk{churned}, {} unchanged",
        count("new"),
        fmt_bytes_delta(bytes("new")),
        count("vanished"),
        fmt_bytes_delta(bytes("vanished")),
        count("grown"),
        count("shrunk"),
        count("unchanged"),
    )?;
    let held = holder_changes(old, new);
    if !held.is_empty() {
        writeln!(out, "holders that grew (who holds the memory, from the heap walks):")?;
        for h in held.iter().take(top) {
            writeln!(
                out,
                "  {:>10}  {} -> {} in {} -> {} objects: {}",
                fmt_bytes_change(h.bytes.old, h.bytes.new),
                fmt_bytes(h.bytes.old),
                fmt_bytes(h.bytes.new),
                h.objects.old,
                h.objects.new,
                h.label
            )?;
        }
    }
    for c in caveats(old, new).into_iter().chain(holder_caveats(old, new)) {
        writeln!(out, "note: {c}")?;
    }
    Ok(())
}

/// Per device ordinal in either report: (ordinal, old, new).
fn device_pairs(old: &Report, new: &Report) -> Vec<(i32, Gauge, Gauge)> {
    let mut ordinals: Vec<i32> = old.devices.iter().chain(&new.devices).map(|d| d.ordinal).collect();
    ordinals.sort_unstable();
    ordinals.dedup();
    let get = |r: &Report, o: i32| {
        r.devices
            .iter()
            .find(|d| d.ordinal == o)
            .map(|d| Gauge { live_bytes: d.live_bytes, live_count: d.live_count, peak_live_bytes: d.peak_live_bytes })
            .unwrap_or_default()
    };
    ordinals.into_iter().map(|o| (o, get(old, o), get(new, o))).collect()
}

fn kind_line(out: &mut dyn Write, name: &str, a: &Gauge, b: &Gauge) -> io::Result<()> {
    line(out, name, a.live_bytes, b.live_bytes, Some((a.live_count, b.live_count)))
}

fn line(out: &mut dyn Write, name: &str, a: u64, b: u64, counts: Option<(u64, u64)>) -> io::Result<()> {
    let counts = counts.map(|(x, y)| format!(" in {x} -> {y} allocations")).unwrap_or_default();
    writeln!(out, "  {name:<12} {} -> {} ({}){counts}", fmt_bytes(a), fmt_bytes(b), fmt_bytes_change(a, b))
}

/// Which report a side of the JSON comparison is.
#[derive(Serialize)]
struct ReportId {
    pid: u32,
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    start_unix_ns: u64,
    duration_s: f64,
}

impl ReportId {
    fn of(r: &Report) -> ReportId {
        ReportId {
            pid: r.pid,
            reason: r.reason.name(),
            snapshot: r.snapshot,
            label: r.label.clone(),
            start_unix_ns: r.start_unix_ns,
            duration_s: r.duration_s,
        }
    }
}

/// An old and a new value and the growth between them.
#[derive(Serialize)]
struct Change {
    old: u64,
    new: u64,
    growth: i64,
}

impl Change {
    fn of(old: u64, new: u64) -> Change {
        let g = i128::from(new) - i128::from(old);
        Change { old, new, growth: g.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64 }
    }
}

#[derive(Serialize)]
struct JsonRow<'a> {
    status: &'static str,
    growth_bytes: i64,
    label: &'a str,
    old: &'a Option<Side>,
    new: &'a Option<Side>,
    frames: &'a [Frame],
}

#[derive(Serialize)]
struct JsonGauge {
    live_bytes: Change,
    live_count: Change,
}

#[derive(Serialize)]
struct JsonDevice {
    ordinal: i32,
    live_bytes: Change,
    live_count: Change,
}

#[derive(Serialize)]
struct JsonTotals {
    live_bytes: Change,
    live_count: Change,
    peak_live_bytes: Change,
    alloc_count: Change,
    free_count: Change,
    failed_count: Change,
}

#[derive(Serialize)]
struct JsonDiff<'a> {
    schema: &'static str,
    old: ReportId,
    new: ReportId,
    same_process: bool,
    sites: Vec<JsonRow<'a>>,
    unchanged_sites: usize,
    totals: JsonTotals,
    kinds: BTreeMap<&'static str, JsonGauge>,
    devices: Vec<JsonDevice>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    holders: Vec<HolderChange>,
    notes: Vec<String>,
}

/// The value of the JSON comparison's `schema` field.
pub const DIFF_SCHEMA: &str = "gpushim.diff.v1";

/// Writes the comparison of `old` and `new` as JSON: every changed site (up to `top`), ranked
/// as in the text form, with totals per kind and device.
///
/// # Errors
/// Only errors of `out`.
pub fn diff_json(old: &Report, new: &Report, top: usize, out: &mut dyn Write) -> io::Result<()> {
    let rows = rows(old, new);
    let sites: Vec<JsonRow<'_>> = rows
        .iter()
        .filter(|r| r.changed())
        .take(top)
        .map(|r| JsonRow {
            status: r.status(),
            growth_bytes: Change::of(Row::nums(&r.old).0, Row::nums(&r.new).0).growth,
            label: &r.label,
            old: &r.old,
            new: &r.new,
            frames: &r.frames,
        })
        .collect();
    let (a, b) = (&old.totals, &new.totals);
    let doc = JsonDiff {
        schema: DIFF_SCHEMA,
        old: ReportId::of(old),
        new: ReportId::of(new),
        same_process: same_process(old, new),
        unchanged_sites: rows.iter().filter(|r| !r.changed()).count(),
        sites,
        totals: JsonTotals {
            live_bytes: Change::of(a.gauge.live_bytes, b.gauge.live_bytes),
            live_count: Change::of(a.gauge.live_count, b.gauge.live_count),
            peak_live_bytes: Change::of(a.gauge.peak_live_bytes, b.gauge.peak_live_bytes),
            alloc_count: Change::of(a.alloc_count, b.alloc_count),
            free_count: Change::of(a.free_count, b.free_count),
            failed_count: Change::of(a.failed_count, b.failed_count),
        },
        kinds: old
            .kinds
            .iter()
            .into_iter()
            .zip(new.kinds.iter())
            .map(|((name, ka), (_, kb))| {
                (
                    name,
                    JsonGauge {
                        live_bytes: Change::of(ka.live_bytes, kb.live_bytes),
                        live_count: Change::of(ka.live_count, kb.live_count),
                    },
                )
            })
            .collect(),
        devices: device_pairs(old, new)
            .into_iter()
            .map(|(ordinal, ka, kb)| JsonDevice {
                ordinal,
                live_bytes: Change::of(ka.live_bytes, kb.live_bytes),
                live_count: Change::of(ka.live_count, kb.live_count),
            })
            .collect(),
        holders: holder_changes(old, new).into_iter().take(top).collect(),
        notes: caveats(old, new).into_iter().chain(holder_caveats(old, new)).collect(),
    };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)
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
            python: false,
            class: Default::default(),
            cell: None,
        }
    }

    pub(super) fn site(id: u32, f: &str, live_bytes: u64, live_count: u64) -> Site {
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

    pub(super) fn report(pid: u32, sites: Vec<Site>) -> Report {
        let live: u64 = sites.iter().map(|s| s.live_bytes).sum();
        Report {
            schema: SCHEMA.into(),
            pid,
            ppid: 1,
            command: vec!["app".into()],
            cwd: "/".into(),
            reason: Reason::Exit,
            signal: None,
            snapshot: None,
            label: None,
            interval: None,
            start_unix_ns: 0,
            duration_s: 1.0,
            shim_version: "0.1.0".into(),
            collector_version: "0.1.0".into(),
            totals: Totals { gauge: Gauge { live_bytes: live, ..Gauge::default() }, ..Totals::default() },
            kinds: Default::default(),
            devices: vec![],
            vmm: vec![],
            sites,
            suspects: vec![],
            suppressed: vec![],
            held_growth: None,
            failures: vec![],
            mem_info: vec![],
            timeline: Default::default(),
            context_teardowns: Vec::new(),
            interpreter_teardown: None,
            gpu_memory: vec![],
            memory_kinds: vec![],
            findings: vec![],
            notes: vec![],
            allocations: vec![],
            physical_devices: Vec::new(),
            identity: None,
            holders: None,
            reachability: None,
            oom: None,
        }
    }

    #[test]
    fn warns_of_different_programs_and_of_old_newer_than_new() {
        let mut old = report(1, vec![]);
        let mut new = report(2, vec![]);
        old.command = vec!["/usr/bin/python3".into(), "-u".into(), "train.py".into(), "--steps".into(), "10".into()];
        new.command = vec!["python3".into(), "train.py".into(), "--steps".into(), "30".into()];
        (old.start_unix_ns, new.start_unix_ns) = (1_000_000_000, 2_000_000_000);
        assert_eq!(warnings(&old, &new), Vec::<String>::new(), "the same script, other arguments");
        new.command = vec!["python3".into(), "eval.py".into()];
        assert_eq!(
            warnings(&old, &new),
            ["OLD and NEW are reports of different programs (python3 train.py and python3 eval.py): their sites \
              may not match"]
        );
        new.command = old.command.clone();
        assert_eq!(
            warnings(&new, &old),
            ["OLD (pid 2) started after NEW (pid 1): are OLD and NEW swapped? growth is shown from OLD to NEW"]
        );
        // One process: its snapshot 2 given as OLD, snapshot 1 as NEW.
        let (mut s1, mut s2) = (old.clone(), old.clone());
        (s1.snapshot, s1.duration_s, s2.snapshot, s2.duration_s) = (Some(1), 1.0, Some(2), 2.5);
        assert_eq!(warnings(&s1, &s2), Vec::<String>::new());
        assert_eq!(
            warnings(&s2, &s1),
            ["OLD (snapshot 2, 2.5 s) was taken after NEW (snapshot 1, 1.0 s): are OLD and NEW swapped? growth is \
              shown from OLD to NEW"]
        );
    }

    #[test]
    fn matches_by_frames_and_ranks_by_growth() {
        let old = report(1, vec![site(0, "render", 1 << 20, 1), site(1, "load", 5 << 20, 5), site(2, "gone", 100, 1)]);
        let new =
            report(2, vec![site(7, "render", 10 << 20, 10), site(3, "load", 5 << 20, 5), site(9, "fresh", 2 << 20, 2)]);
        let mut out = Vec::new();
        diff(&old, &new, 10, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "pid 1 (exit, 1.0 s) -> pid 2 (exit, 1.0 s)");
        assert_eq!(lines[1], "sites by live-bytes growth (3 of 4 sites changed):");
        assert!(lines[2].contains("+9.0 MiB") && lines[2].contains("site 7 (old 0): render (src/app.c:10)"), "{text}");
        assert!(lines[3].contains("+2.0 MiB") && lines[3].contains("new site 9: fresh"), "{text}");
        assert!(lines[4].contains("-100 B") && lines[4].contains("site 2 (only in the old report): gone"), "{text}");
        assert_eq!(lines[5], "totals:");
        assert_eq!(lines[6], "  live         6.0 MiB -> 17.0 MiB (+11.0 MiB) in 0 -> 0 allocations");
        assert_eq!(
            lines.last().unwrap(),
            &"sites: 1 new (+2.0 MiB), 1 vanished (-100 B), 1 grown, 0 shrunk, 1 unchanged"
        );
    }

    /// Allocations recorded without a backtrace share the id `NO_STACK`: the text names that
    /// site in words, never by the sentinel's number.
    #[test]
    fn the_site_without_backtrace_is_named_in_words() {
        let bare = |live_bytes| Site { frames: vec![], ..site(gpushim_wire::NO_STACK, "", live_bytes, 1) };
        let old = report(1, vec![bare(1 << 20), site(0, "gone", 100, 1)]);
        let new = report(2, vec![bare(3 << 20)]);
        let mut out = Vec::new();
        diff(&old, &new, 10, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("+2.0 MiB  live 1.0 MiB -> 3.0 MiB")
                && text.contains("site without backtrace: (no backtrace)\n"),
            "{text}"
        );
        let only_new = report(2, vec![bare(1 << 20)]);
        let mut out = Vec::new();
        diff(&report(1, vec![]), &only_new, 10, &mut out).unwrap();
        let text_new = String::from_utf8(out).unwrap();
        assert!(text_new.contains("new site without backtrace: (no backtrace)\n"), "{text_new}");
        let mut out = Vec::new();
        diff(&only_new, &report(2, vec![]), 10, &mut out).unwrap();
        let text_gone = String::from_utf8(out).unwrap();
        assert!(text_gone.contains("site without backtrace (only in the old report): (no backtrace)\n"), "{text_gone}");
        for t in [&text, &text_new, &text_gone] {
            assert!(!t.contains("4294967295"), "{t}");
        }
    }

    #[test]
    fn sites_through_one_helper_are_told_apart_by_their_callers() {
        let mut a = site(0, "helper", 1 << 20, 1);
        a.frames.insert(1, frame("before", 20));
        let mut b = site(1, "helper", 2 << 20, 1);
        b.frames.insert(1, frame("after", 30));
        let old = report(1, vec![a.clone()]);
        let new = report(1, vec![a, b]);
        let mut out = Vec::new();
        diff(&old, &new, 10, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("new site 1: helper (src/app.c:10) <- after (src/app.c:30)\n"), "{text}");
    }

    /// A site whose live bytes did not move but that allocated and freed in between is counted
    /// as changed, in the text's footer as in the JSON (the footer called it unchanged).
    #[test]
    fn a_site_that_churned_at_the_same_size_is_changed_in_text_and_json_alike() {
        let old = report(7, vec![site(0, "pool", 1 << 20, 1), site(1, "load", 5 << 20, 5)]);
        let mut churned = site(0, "pool", 1 << 20, 1);
        churned.alloc_count = 3;
        churned.free_count = 2;
        let new = report(7, vec![churned, site(1, "load", 5 << 20, 5)]);
        let mut out = Vec::new();
        diff(&old, &new, 10, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("sites by live-bytes growth (1 of 2 sites changed):"), "{text}");
        assert!(
            text.contains("0 grown, 0 shrunk, 1 changed at the same live bytes, 1 unchanged\n"),
            "the footer agrees with the header: {text}"
        );
        let mut out = Vec::new();
        diff_json(&old, &new, 10, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["unchanged_sites"], 1);
    }

    /// The SIGUSR1 workflow: snapshots 1 and 5 of one process. Ids are the same; a site that
    /// appeared between them is new; the header says it is one process.
    #[test]
    fn snapshots_of_one_process_and_json() {
        let mut old = report(7, vec![site(0, "render", 1 << 20, 1), site(1, "load", 5 << 20, 5)]);
        old.reason = Reason::Snapshot;
        old.snapshot = Some(1);
        old.start_unix_ns = 1_700_000_000_000_000_000;
        old.duration_s = 2.0;
        let mut new =
            report(7, vec![site(0, "render", 5 << 20, 5), site(1, "load", 5 << 20, 5), site(2, "late", 3 << 10, 3)]);
        new.reason = Reason::Snapshot;
        new.snapshot = Some(5);
        new.start_unix_ns = old.start_unix_ns;
        new.duration_s = 10.0;
        let mut out = Vec::new();
        diff(&old, &new, 10, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "pid 7 (snapshot 1, 2.0 s) -> pid 7 (snapshot 5, 10 s); same process");
        assert_eq!(lines[1], "sites by live-bytes growth (2 of 3 sites changed):");
        assert_eq!(
            lines[2],
            "    +4.0 MiB  live 1.0 MiB -> 5.0 MiB in 1 -> 5; allocations 1 -> 5, frees 0 -> 0; site 0: render (src/app.c:10)"
        );
        assert!(lines[3].contains("+3.0 KiB") && lines[3].contains("new site 2: late"), "{text}");

        let mut out = Vec::new();
        diff_json(&old, &new, 10, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["schema"], DIFF_SCHEMA);
        assert_eq!(v["same_process"], true);
        assert_eq!(v["old"]["snapshot"], 1);
        assert_eq!(v["new"]["snapshot"], 5);
        let sites = v["sites"].as_array().unwrap();
        assert_eq!(sites.len(), 2);
        assert_eq!(sites[0]["status"], "grown");
        assert_eq!(sites[0]["growth_bytes"], 4 << 20);
        assert_eq!(sites[0]["old"]["live_count"], 1);
        assert_eq!(sites[0]["new"]["live_count"], 5);
        assert_eq!(sites[0]["frames"][0]["function"], "render");
        assert_eq!(sites[1]["status"], "new");
        assert_eq!(sites[1]["old"], serde_json::Value::Null);
        assert_eq!(v["unchanged_sites"], 1);
        assert_eq!(v["totals"]["live_bytes"]["growth"], (4 << 20) + (3 << 10));
        assert_eq!(v["kinds"]["device"]["live_bytes"]["old"], 0);
    }

    /// The API's snapshot 1 labelled "half" and `gpushim top`'s snapshot 1 (labelled "top",
    /// numbered on its own): the header names each with its label, so they read apart; the
    /// JSON has the labels.
    #[test]
    fn snapshots_with_one_number_are_told_apart_by_their_labels() {
        let mut old = report(9176, vec![site(0, "render", 1 << 20, 1)]);
        (old.reason, old.snapshot, old.label) = (Reason::Snapshot, Some(1), Some("half".into()));
        (old.start_unix_ns, old.duration_s) = (1_700_000_000_000_000_000, 10.0);
        let mut new = report(9176, vec![site(0, "render", 2 << 20, 2)]);
        (new.reason, new.snapshot, new.label) = (Reason::Snapshot, Some(1), Some("top".into()));
        (new.start_unix_ns, new.duration_s) = (old.start_unix_ns, 17.0);
        let mut out = Vec::new();
        diff(&old, &new, 10, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text.lines().next(),
            Some("pid 9176 (snapshot 1 \"half\", 10 s) -> pid 9176 (snapshot 1 \"top\", 17 s); same process"),
            "{text}"
        );
        // Swapped, the warning names them the same way.
        assert_eq!(
            warnings(&new, &old),
            ["OLD (snapshot 1 \"top\", 17 s) was taken after NEW (snapshot 1 \"half\", 10 s): are OLD and NEW \
              swapped? growth is shown from OLD to NEW"]
        );
        let mut out = Vec::new();
        diff_json(&old, &new, 10, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!((&v["old"]["label"], &v["new"]["label"]), (&serde_json::json!("half"), &serde_json::json!("top")));
        // Without a label: none in the JSON, none in the words.
        old.label = None;
        let mut out = Vec::new();
        diff(&old, &new, 10, &mut out).unwrap();
        assert!(String::from_utf8(out).unwrap().starts_with("pid 9176 (snapshot 1, 10 s) -> "));
        let mut out = Vec::new();
        diff_json(&old, &new, 10, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v["old"].get("label").is_none(), "{v}");
    }
}

#[cfg(test)]
mod holder_tests {
    use super::tests::{report, site};
    use super::*;
    use crate::report::{HolderLine, Holders, SiteHolders};

    fn line(how: &str, path: &[&str], saved_for: Option<&str>, objects: u64, bytes: u64) -> HolderLine {
        HolderLine {
            how: how.into(),
            path: path.iter().map(|p| p.to_string()).collect(),
            saved_for: saved_for.map(Into::into),
            objects,
            bytes,
            ..HolderLine::default()
        }
    }

    fn walk(sites: Vec<Vec<HolderLine>>) -> Holders {
        Holders {
            schema: crate::explain::holders::SCHEMA.into(),
            pid: 7,
            reason: "snapshot".into(),
            number: Some(1),
            walk: Default::default(),
            sites: sites
                .into_iter()
                .map(|holders| SiteHolders { site: Some(0), holders, ..Default::default() })
                .collect(),
            unattributed: SiteHolders::default(),
            kinds: vec![],
        }
    }

    /// Holder groups are matched by path across the two walks and summed over sites; only the
    /// groups that grew are listed, a new one from zero, most growth first.
    #[test]
    fn diff_lists_the_holders_that_grew() {
        const MIB: u64 = 1 << 20;
        let kept = ["train.py global 'history'", "list[*]"];
        let total = ["function 'step' (train.py:9) local 'total'", "Tensor() float32 grad_fn=AddBackward0"];
        let mut old = report(7, vec![]);
        old.holders = Some(walk(vec![vec![
            line("path", &kept, None, 2, 8 * MIB),
            line("path", &["m global 'w'"], None, 1, MIB),
        ]]));
        let mut new = report(7, vec![]);
        new.holders = Some(walk(vec![
            vec![line("path", &kept, None, 3, 12 * MIB), line("autograd", &total, Some("MulBackward0"), 10, 40 * MIB)],
            vec![line("path", &kept, None, 2, 8 * MIB)],
        ]));
        let mut text = Vec::new();
        diff(&old, &new, 10, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let got: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("holders that grew")).collect();
        assert_eq!(
            got,
            [
                "holders that grew (who holds the memory, from the heap walks):",
                "   +40.0 MiB  0 B -> 40.0 MiB in 0 -> 10 objects: saved by autograd for MulBackward0, reached from \
                 function 'step' (train.py:9) local 'total' \u{2192} Tensor() float32 grad_fn=AddBackward0",
                "   +12.0 MiB  8.0 MiB -> 20.0 MiB in 2 -> 5 objects: train.py global 'history' \u{2192} list[*]",
            ],
            "{text}"
        );
        let mut json = Vec::new();
        diff_json(&old, &new, 10, &mut json).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["holders"][1]["bytes"], serde_json::json!({"old": 8 * MIB, "new": 20 * MIB, "growth": 12 * MIB}));
        assert_eq!(v["holders"][0]["how"], "autograd");
        // Without a walk on the OLD side, everything NEW holds is new, and a note says why.
        old.holders = None;
        let mut text = Vec::new();
        diff(&old, &new, 10, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("note: OLD has no heap walk"), "{text}");
    }

    /// A heap walk runs after its snapshot while the program goes on: when it saw other live
    /// bytes at its sites than the report holds, a note gives both, so that the holders' growth
    /// and the sites' growth can be told apart (a new user read +728 against +725 as a
    /// contradiction).
    #[test]
    fn a_walk_that_saw_other_live_bytes_than_its_report_is_noted() {
        const MIB: u64 = 1 << 20;
        let old = report(7, vec![site(0, "render", 3 * MIB, 3)]);
        let mut new = report(7, vec![site(0, "render", 728 * MIB, 728)]);
        let mut h = walk(vec![vec![line("path", &["leak.py global 'history'", "list[*]"], None, 725, 725 * MIB)]]);
        h.sites[0].live_bytes = 725 * MIB;
        new.holders = Some(h);
        let mut text = Vec::new();
        diff(&old, &new, 10, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains(
                "note: NEW's heap walk ran after its report was taken, while the program went on: its sites held \
                 725.0 MiB live then and 728.0 MiB in the report, so the holders' growth differs from the sites' by \
                 that\n"
            ),
            "{text}"
        );
        // A walk that saw what its report holds needs no note.
        new.holders.as_mut().unwrap().sites[0].live_bytes = 728 * MIB;
        let mut text = Vec::new();
        diff(&old, &new, 10, &mut text).unwrap();
        assert!(!String::from_utf8(text).unwrap().contains("heap walk ran after"));
    }

    /// The header counts the changed sites out of all the sites of either report, and says when
    /// only the top ones are listed.
    #[test]
    fn the_header_counts_changed_sites_out_of_all_and_says_when_the_list_is_cut() {
        let old = report(1, vec![site(0, "a", 1 << 20, 1), site(1, "b", 1 << 20, 1), site(2, "c", 1 << 20, 1)]);
        let new = report(1, vec![site(0, "a", 3 << 20, 3), site(1, "b", 2 << 20, 2), site(2, "c", 1 << 20, 1)]);
        let mut out = Vec::new();
        diff(&old, &new, 1, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().nth(1), Some("sites by live-bytes growth (2 of 3 sites changed; the top 1 shown):"));
    }
}
