//! The job view: the final reports of every process of one job side by side (`gpushim report
//! DIR`, and the summary `gpushim run` prints when the program it ran started several traced
//! processes).
//!
//! - **Processes**, sorted by rank (processes without one after, by pid): live and peak bytes,
//!   per device ordinal and the machine's GPU it maps to (`CUDA_VISIBLE_DEVICES`).
//! - **GPUs**: per machine GPU, the sum of the processes' live bytes, and the sum of their peaks
//!   (an upper bound of the GPU's peak: the processes' peaks need not coincide).
//! - **Suspects** matched across processes by their frames (the key of `gpushim diff`): a
//!   suspect of every process is a code leak; one of a single process (when there are several)
//!   a data- or rank-specific leak. They are ordered as one report orders its suspects
//!   (`rank::report_order`: definitely lost bytes first, then live bytes, then score), over
//!   their processes' sums (the highest score), so that a job of one process lists them as its
//!   report does.
//! - **Allocations on a GPU that is not the rank's own**: a rank's own GPU is `LOCAL_RANK`'s
//!   device after `CUDA_VISIBLE_DEVICES` mapping ([`identity::own_ordinal`]), else the device
//!   that held most of its bytes at its peak; any other device on which it allocated (peak above
//!   0) is listed. The classic case is every rank creating buffers on GPU 0 before
//!   `torch.cuda.set_device(LOCAL_RANK)`.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use serde::Serialize;

use crate::account::rank;
use crate::compare::diff::site_key;
use crate::explain::identity;
use crate::report::words::{first_user_frame, fmt_bytes, frame_label};
use crate::report::Report;

/// The `schema` of the job view's JSON.
pub const SCHEMA: &str = "gpushim.job.v1";

/// Every final report of a job, side by side.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct JobView {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The launcher's job ids the processes carry (usually one; empty when none was set).
    pub job_ids: Vec<String>,
    /// One row per process, by rank, then pid.
    pub processes: Vec<ProcessRow>,
    /// One row per machine GPU, in the order of their names.
    pub gpus: Vec<GpuRow>,
    /// Suspects matched across processes, ordered as a report orders its suspects: most
    /// definitely lost bytes first, then most live bytes, then the highest score (ties: in the
    /// order they first appear, by process, then in each report's order).
    pub suspects: Vec<SuspectGroup>,
    /// Allocations a rank made on a GPU that is not its own.
    pub foreign: Vec<Foreign>,
    /// Final reports of the directory that could not be read, and why: the view is of the
    /// others.
    pub unread: Vec<Unread>,
    /// What a reader should know of the view: the processes share no job id and no parent
    /// (separate runs in one directory, added up all the same).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One process of the job.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProcessRow {
    /// The report file.
    pub file: String,
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Global rank, when the launcher set one.
    pub rank: Option<u32>,
    /// Rank on the host, when set.
    pub local_rank: Option<u32>,
    /// The report's reason (`exit`, `killed`).
    pub reason: String,
    /// The command line.
    pub command: Vec<String>,
    /// Live bytes at the end, every kind.
    pub live_bytes: u64,
    /// Highest live bytes at any moment, bytes.
    pub peak_live_bytes: u64,
    /// Leak suspects of this process.
    pub suspects: usize,
    /// The device ordinal the rank calls its own (see the module doc); `None` when it made no
    /// device allocation and has no `LOCAL_RANK`.
    pub own_ordinal: Option<i32>,
    /// How `own_ordinal` was found: `LOCAL_RANK`, or `most bytes`.
    pub own_from: Option<&'static str>,
    /// Device and managed memory per device ordinal.
    pub devices: Vec<DeviceRow>,
}

/// One device of one process.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DeviceRow {
    /// The ordinal the process saw.
    pub ordinal: i32,
    /// The machine's GPU it maps to: the UUID the driver gave (`GPU-…`), else the
    /// `CUDA_VISIBLE_DEVICES` entry, else the ordinal.
    pub gpu: String,
    /// Live bytes at the end.
    pub live_bytes: u64,
    /// Allocations live at the end.
    pub live_count: u64,
    /// Highest live bytes at any moment, bytes.
    pub peak_live_bytes: u64,
}

/// One machine GPU across the job.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GpuRow {
    /// The machine's GPU (see [`DeviceRow::gpu`]).
    pub gpu: String,
    /// Sum of the processes' live bytes on it.
    pub live_bytes: u64,
    /// Sum of the processes' peaks on it, bytes: an upper bound of the GPU's own peak.
    pub peak_live_bytes_sum: u64,
    /// The processes that allocated on it (`rank N` or `pid N`).
    pub processes: Vec<String>,
}

/// A leak suspect site, matched across processes by its frames.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SuspectGroup {
    /// `every` (a suspect of every process: a code leak), `one` (of a single process among
    /// several: a data- or rank-specific leak) or `some`.
    pub scope: &'static str,
    /// The first user frame of the site.
    pub at: String,
    /// The processes it is a suspect of (`rank N` or `pid N`).
    pub processes: Vec<String>,
    /// Its live bytes, summed over those processes.
    pub live_bytes: u64,
    /// Its definitely lost bytes that move it up (`rank::lost_rank`), summed over those
    /// processes: 0 without a reachability scan.
    pub definitely_lost_bytes: u64,
    /// Its highest score in those processes (for the order only).
    #[serde(skip)]
    pub score: f64,
    /// Its reason in the first of those processes.
    pub reason: String,
}

/// Memory a rank allocated on a GPU that is not its own.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Foreign {
    /// `rank N` or `pid N`.
    pub process: String,
    /// Its pid.
    pub pid: u32,
    /// Its own device ordinal.
    pub own_ordinal: i32,
    /// The other device's ordinal.
    pub ordinal: i32,
    /// The machine GPU that ordinal maps to.
    pub gpu: String,
    /// Live bytes there at the end.
    pub live_bytes: u64,
    /// Live allocations there at the end.
    pub live_count: u64,
    /// Highest live bytes there, bytes.
    pub peak_live_bytes: u64,
}

/// A GPU for a person: `GPU 3` for an index, the `GPU-…`/`MIG-…` UUID as it is.
fn gpu_label(gpu: &str) -> String {
    if gpu.starts_with("GPU-") || gpu.starts_with("MIG-") {
        gpu.to_string()
    } else {
        format!("GPU {gpu}")
    }
}

/// `rank N`, else `pid N`.
fn who(rank: Option<u32>, pid: u32) -> String {
    match rank {
        Some(r) => format!("rank {r}"),
        None => format!("pid {pid}"),
    }
}

/// The final reports in `dir` (file names of [`identity::final_report_name`]), by name, and
/// those that could not be read, each with why (not a regular file, not a report, truncated…).
///
/// # Errors
/// If the directory cannot be read, holds no final report, or none of them can be read (then
/// the error names each and why).
pub fn read_dir(dir: &Path) -> Result<(Reports, Vec<Unread>)> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| anyhow!("cannot read directory {}: {}", dir.display(), crate::error::file_cause(&e)))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| identity::final_report_name(n).is_some())
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(crate::error::coded(
            crate::error::USAGE,
            format!(
                "{}: no final report (gpushim-PID.json or gpushim-rankR-PID.json) in this directory",
                dir.display()
            ),
        ));
    }
    let (mut reports, mut unread) = (Vec::new(), Vec::new());
    for n in names {
        let p = dir.join(&n);
        // A FIFO would block the read forever, a device (a link to /dev/zero) never end it.
        let read = match std::fs::metadata(&p) {
            Ok(m) if !m.is_file() => Err(anyhow!("not a regular file")),
            Err(e) => Err(anyhow!("{}", crate::error::file_cause(&e))),
            Ok(_) => Report::read(&p),
        };
        match read {
            Ok(r) => reports.push((p, r)),
            Err(e) => unread.push(Unread { file: p.display().to_string(), why: format!("{e:#}") }),
        }
    }
    if reports.is_empty() {
        let each: Vec<String> = unread.iter().map(|u| format!("cannot read report {}: {}", u.file, u.why)).collect();
        bail!("{}", each.join("; "));
    }
    Ok((reports, unread))
}

/// The reports read, each with its file.
pub type Reports = Vec<(PathBuf, Report)>;

/// A final report of the job's directory that could not be read, and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Unread {
    /// The file.
    pub file: String,
    /// Why it could not be read.
    pub why: String,
}

/// Builds the job view of `reports`.
pub fn build(reports: &[(PathBuf, Report)]) -> JobView {
    let mut order: Vec<&(PathBuf, Report)> = reports.iter().collect();
    let rank_of = |r: &Report| r.identity.as_ref().and_then(|i| i.rank);
    order.sort_by_key(|(_, r)| (rank_of(r).is_none(), rank_of(r), r.pid));
    let mut view = JobView { schema: SCHEMA, ..JobView::default() };
    let mut gpus: BTreeMap<String, GpuRow> = BTreeMap::new();
    // The suspect groups in the order they first appear, and each key's group.
    let mut groups: Vec<SuspectGroup> = Vec::new();
    let mut group_of: BTreeMap<String, usize> = BTreeMap::new();
    // A rank number that two reports carry (a restarted job's reports in one directory) names
    // each with its pid too: else the two count as one process in the suspects' scope.
    let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
    for (_, r) in &order {
        if let Some(k) = rank_of(r) {
            *seen.entry(k).or_default() += 1;
        }
    }
    for (path, r) in &order {
        let id = r.identity.as_ref();
        let name = match rank_of(r) {
            Some(k) if seen.get(&k).is_some_and(|&c| c > 1) => format!("rank {k} (pid {})", r.pid),
            k => who(k, r.pid),
        };
        if let Some(j) = id.and_then(|i| i.job_id.clone()) {
            if !view.job_ids.contains(&j) {
                view.job_ids.push(j);
            }
        }
        let devices: Vec<DeviceRow> = r
            .devices
            .iter()
            .map(|d| DeviceRow {
                ordinal: d.ordinal,
                gpu: identity::gpu_of(r, d.ordinal),
                live_bytes: d.live_bytes,
                live_count: d.live_count,
                peak_live_bytes: d.peak_live_bytes,
            })
            .collect();
        let (own_ordinal, own_from) = match identity::own_ordinal(id) {
            Some(o) => (Some(o), Some("LOCAL_RANK")),
            None => {
                match devices.iter().filter(|d| d.peak_live_bytes > 0).max_by_key(|d| (d.peak_live_bytes, -d.ordinal)) {
                    Some(d) => (Some(d.ordinal), Some("most bytes")),
                    None => (None, None),
                }
            }
        };
        for d in &devices {
            if d.peak_live_bytes == 0 {
                continue;
            }
            let g = gpus.entry(d.gpu.clone()).or_insert_with(|| GpuRow { gpu: d.gpu.clone(), ..GpuRow::default() });
            g.live_bytes += d.live_bytes;
            g.peak_live_bytes_sum += d.peak_live_bytes;
            if !g.processes.contains(&name) {
                g.processes.push(name.clone());
            }
            if let Some(own) = own_ordinal.filter(|&o| o != d.ordinal) {
                view.foreign.push(Foreign {
                    process: name.clone(),
                    pid: r.pid,
                    own_ordinal: own,
                    ordinal: d.ordinal,
                    gpu: d.gpu.clone(),
                    live_bytes: d.live_bytes,
                    live_count: d.live_count,
                    peak_live_bytes: d.peak_live_bytes,
                });
            }
        }
        for s in &r.suspects {
            let Some(site) = r.sites.iter().find(|x| x.id == s.site) else { continue };
            let i = *group_of.entry(site_key(site)).or_insert_with(|| {
                groups.push(SuspectGroup {
                    at: first_user_frame(site).map_or_else(|| "(no backtrace)".to_string(), frame_label),
                    reason: s.reason.clone(),
                    ..SuspectGroup::default()
                });
                groups.len() - 1
            });
            let g = &mut groups[i];
            if !g.processes.contains(&name) {
                g.processes.push(name.clone());
            }
            g.live_bytes += s.live_bytes;
            g.definitely_lost_bytes += rank::lost_rank(s);
            g.score = g.score.max(s.score);
        }
        view.processes.push(ProcessRow {
            file: path.display().to_string(),
            pid: r.pid,
            ppid: r.ppid,
            rank: rank_of(r),
            local_rank: id.and_then(|i| i.local_rank),
            reason: r.reason.name().to_string(),
            command: r.command.clone(),
            live_bytes: r.totals.gauge.live_bytes,
            peak_live_bytes: r.totals.gauge.peak_live_bytes,
            suspects: r.suspects.len(),
            own_ordinal,
            own_from,
            devices,
        });
    }
    let n = view.processes.len();
    view.gpus = gpus.into_values().collect();
    view.suspects = groups
        .into_iter()
        .map(|mut g| {
            g.scope = match g.processes.len() {
                k if k == n => "every",
                1 => "one",
                _ => "some",
            };
            g
        })
        .collect();
    // Stable: ties keep the order of first appearance (a job of one process: its report's).
    view.suspects.sort_by(|a, b| {
        b.definitely_lost_bytes
            .cmp(&a.definitely_lost_bytes)
            .then(b.live_bytes.cmp(&a.live_bytes))
            .then(b.score.total_cmp(&a.score))
    });
    // A job's processes share its launcher (a parent) or its launcher's job id; reports that
    // share neither are separate runs that happen to be in one directory.
    let parents: std::collections::BTreeSet<u32> = view.processes.iter().map(|p| p.ppid).collect();
    if view.processes.len() > 1 && view.job_ids.len() != 1 && parents.len() > 1 {
        view.notes.push(format!(
            "these {} processes share no parent and no job id: separate runs in one directory, perhaps (the view adds \
             them up all the same; `gpushim report FILE` shows one)",
            view.processes.len()
        ));
    }
    view
}

/// Writes the job view for a person.
///
/// # Errors
/// Those of `out`.
pub fn write_text(v: &JobView, out: &mut dyn Write) -> io::Result<()> {
    let ranks = v.processes.iter().filter(|p| p.rank.is_some()).count();
    write!(out, "job: {} process{}", v.processes.len(), if v.processes.len() == 1 { "" } else { "es" })?;
    if ranks > 0 {
        write!(out, " ({ranks} with a rank)")?;
    }
    if !v.job_ids.is_empty() {
        write!(out, ", job id {}", v.job_ids.join(", "))?;
    }
    writeln!(out)?;
    for n in &v.notes {
        writeln!(out, "note: {n}")?;
    }
    writeln!(out, "\nprocesses:")?;
    for p in &v.processes {
        let own = match (p.own_ordinal, p.own_from) {
            // In words: how the own GPU was found ("most bytes" is the JSON's value).
            (Some(o), Some("most bytes")) => format!(", its own GPU: GPU {o} (the one it allocated most bytes on)"),
            (Some(o), Some(from)) => format!(", its own GPU: GPU {o} (from {from})"),
            _ => String::new(),
        };
        // A process without a rank is named by its pid already.
        let pid = if p.rank.is_some() { format!(" pid {}", p.pid) } else { String::new() };
        writeln!(
            out,
            "  {:<10}{pid} (parent {}, {}): live {}, peak {}, {} suspect{}{own}",
            who(p.rank, p.pid),
            p.ppid,
            p.reason,
            fmt_bytes(p.live_bytes),
            fmt_bytes(p.peak_live_bytes),
            p.suspects,
            if p.suspects == 1 { "" } else { "s" }
        )?;
        for d in p.devices.iter().filter(|d| d.peak_live_bytes > 0) {
            writeln!(
                out,
                "    ordinal {} ({}): live {} in {} allocation{}, peak {}",
                d.ordinal,
                gpu_label(&d.gpu),
                fmt_bytes(d.live_bytes),
                d.live_count,
                if d.live_count == 1 { "" } else { "s" },
                fmt_bytes(d.peak_live_bytes)
            )?;
        }
    }
    if !v.gpus.is_empty() {
        writeln!(out, "\nGPUs (the sum of the processes' peaks bounds the GPU's peak):")?;
        for g in &v.gpus {
            writeln!(
                out,
                "  {}: live {}, peaks sum {}, used by {}",
                gpu_label(&g.gpu),
                fmt_bytes(g.live_bytes),
                fmt_bytes(g.peak_live_bytes_sum),
                g.processes.join(", ")
            )?;
        }
    }
    let section = |out: &mut dyn Write, scope: &str, title: &str| -> io::Result<()> {
        let gs: Vec<&SuspectGroup> = v.suspects.iter().filter(|g| g.scope == scope).collect();
        if gs.is_empty() {
            return Ok(());
        }
        writeln!(out, "\n{title}:")?;
        for g in gs {
            // The reason is one process's: said as such when the suspect is on several.
            let reason = match g.processes.as_slice() {
                [_] | [] => g.reason.clone(),
                [first, ..] => format!("on {first}: {}", g.reason),
            };
            writeln!(out, "  {}: {} live on {}; {reason}", g.at, fmt_bytes(g.live_bytes), g.processes.join(", "))?;
        }
        Ok(())
    };
    if v.processes.len() > 1 {
        section(out, "every", "suspects on every process (a code leak)")?;
        section(out, "some", "suspects on some processes")?;
        section(out, "one", "suspects on one process only (a data- or rank-specific leak)")?;
    } else {
        section(out, "every", "suspects")?;
    }
    if v.suspects.is_empty() {
        writeln!(out, "\nno leak suspects")?;
    }
    if !v.foreign.is_empty() {
        writeln!(out, "\nallocations on a GPU that is not the rank's own:")?;
        for f in &v.foreign {
            writeln!(
                out,
                "  {} (own ordinal {}): ordinal {} ({}): live {} in {} allocation{}, peak {}",
                f.process,
                f.own_ordinal,
                f.ordinal,
                gpu_label(&f.gpu),
                fmt_bytes(f.live_bytes),
                f.live_count,
                if f.live_count == 1 { "" } else { "s" },
                fmt_bytes(f.peak_live_bytes)
            )?;
        }
    }
    if !v.unread.is_empty() {
        writeln!(
            out,
            "
not read (the view above is of the other reports):"
        )?;
        for u in &v.unread {
            writeln!(out, "  {}: {}", u.file, u.why)?;
        }
    }
    Ok(())
}

/// Writes the job view as JSON (schema [`SCHEMA`]).
///
/// # Errors
/// Those of `out`.
pub fn write_json(v: &JobView, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v)?;
    out.write_all(b"\n")
}

/// The job summary `gpushim run` prints on `out` when several traced processes wrote final
/// reports (`paths`): the job view in text, headed `gpushim: job summary`. Reports that cannot
/// be read are named and skipped.
///
/// # Errors
/// Those of `out`.
pub fn print_run_summary(paths: &[PathBuf], out: &mut dyn Write) -> io::Result<()> {
    let mut reports = Vec::new();
    for p in paths {
        match Report::read(p) {
            Ok(r) => reports.push((p.clone(), r)),
            Err(e) => writeln!(out, "gpushim: cannot read report {}: {e:#}", p.display())?,
        }
    }
    writeln!(out, "gpushim: job summary of {} traced processes", reports.len())?;
    let mut text = Vec::new();
    write_text(&build(&reports), &mut text)?;
    for line in String::from_utf8_lossy(&text).lines() {
        writeln!(out, "gpushim: {line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{DeviceTotals, Frame, Site, Suspect};

    fn frame(function: &str, line: u32) -> Frame {
        Frame {
            function: function.into(),
            file: Some("/w/train.c".into()),
            line: Some(line),
            module: "/w/train".into(),
            address: "0x1".into(),
            ..Frame::default()
        }
    }

    /// A process with `rank`/`LOCAL_RANK` = `rank`, live bytes per device `devs`, and suspects
    /// at the functions `leaks` (each its own site, 1 MiB live).
    fn process(rank: u32, devs: &[(i32, u64)], leaks: &[&str]) -> (PathBuf, Report) {
        let mut r = crate::render::tests::sample();
        r.pid = 100 + rank;
        r.identity =
            Some(identity::from_vars(&[("RANK".into(), rank.to_string()), ("LOCAL_RANK".into(), rank.to_string())]));
        r.devices = devs
            .iter()
            .map(|&(o, b)| DeviceTotals { ordinal: o, live_bytes: b, live_count: 1, peak_live_bytes: b })
            .collect();
        r.totals.gauge.live_bytes = devs.iter().map(|d| d.1).sum();
        r.sites = leaks
            .iter()
            .enumerate()
            .map(|(i, f)| Site {
                id: i as u32,
                live_bytes: 1 << 20,
                frames: vec![frame(f, 10 + i as u32)],
                ..Site::default()
            })
            .collect();
        r.suspects = (0..leaks.len())
            .map(|i| Suspect { site: i as u32, live_bytes: 1 << 20, reason: "rising".into(), ..Suspect::default() })
            .collect();
        (PathBuf::from(identity::stem(r.pid, r.identity.as_ref()) + ".json"), r)
    }

    /// Reports that share neither a parent nor a job id (unrelated runs in one directory) get a
    /// note; a job's, whose processes share their launcher, none.
    #[test]
    fn processes_of_no_one_job_are_said_to_be_separate_runs() {
        let (a, b) = (process(0, &[(0, 1 << 20)], &[]), process(1, &[(0, 1 << 20)], &[]));
        let mut text = Vec::new();
        write_text(&build(&[a.clone(), b.clone()]), &mut text).unwrap();
        assert!(!String::from_utf8_lossy(&text).contains("note:"), "one launcher: no note");
        let (mut a, mut b) = (a, b);
        a.1.ppid = 10;
        b.1.ppid = 20;
        let v = build(&[a, b]);
        let mut text = Vec::new();
        write_text(&v, &mut text).unwrap();
        let text = String::from_utf8_lossy(&text).into_owned();
        assert!(text.contains("note: these 2 processes share no parent and no job id"), "{text}");
        assert_eq!(v.notes.len(), 1);
    }

    /// Two reports of rank 0 (a restarted job's, in one directory) and one of rank 1, all with
    /// the same suspect: a suspect of every process, and the two rank 0s named apart.
    #[test]
    fn two_reports_of_one_rank_are_two_processes() {
        let mut again = process(0, &[(0, 1 << 20)], &["step"]);
        again.1.pid = 900;
        let reports = vec![process(0, &[(0, 1 << 20)], &["step"]), again, process(1, &[(1, 1 << 20)], &["step"])];
        let v = build(&reports);
        assert_eq!(v.processes.len(), 3);
        assert_eq!(v.suspects.len(), 1);
        assert_eq!(v.suspects[0].scope, "every");
        assert_eq!(v.suspects[0].processes, ["rank 0 (pid 100)", "rank 0 (pid 900)", "rank 1"]);
        assert_eq!(v.suspects[0].live_bytes, 3 << 20);
        assert_eq!(v.gpus[0].processes, ["rank 0 (pid 100)", "rank 0 (pid 900)"]);
        // Two reports of rank 0 alone: on every process, not on one.
        let v = build(&reports[..2]);
        assert_eq!((v.suspects[0].scope, v.suspects[0].processes.len()), ("every", 2));
    }

    #[test]
    fn shared_and_single_suspects_and_a_foreign_gpu() {
        let reports = vec![
            process(2, &[(0, 1 << 20), (2, 3 << 20)], &["step", "odd_batch"]),
            process(0, &[(0, 3 << 20)], &["step"]),
            process(1, &[(1, 3 << 20)], &["step"]),
        ];
        let v = build(&reports);
        assert_eq!(v.processes.iter().map(|p| p.rank).collect::<Vec<_>>(), [Some(0), Some(1), Some(2)]);
        assert_eq!(v.processes[2].own_ordinal, Some(2));
        assert_eq!(
            v.gpus.iter().map(|g| (g.gpu.as_str(), g.live_bytes)).collect::<Vec<_>>(),
            [("0", 4 << 20), ("1", 3 << 20), ("2", 3 << 20)]
        );
        assert_eq!(v.gpus[0].processes, ["rank 0", "rank 2"]);
        assert_eq!(v.suspects.len(), 2);
        assert_eq!(
            (v.suspects[0].scope, v.suspects[0].processes.len(), v.suspects[0].live_bytes),
            ("every", 3, 3 << 20)
        );
        assert_eq!((v.suspects[1].scope, v.suspects[1].processes.clone()), ("one", vec!["rank 2".to_string()]));
        assert_eq!(v.foreign.len(), 1);
        let f = &v.foreign[0];
        assert_eq!((f.process.as_str(), f.own_ordinal, f.ordinal, f.live_bytes), ("rank 2", 2, 0, 1 << 20));
        let mut text = Vec::new();
        write_text(&v, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains(
                "suspects on every process (a code leak):\n  step (w/train.c:10): 3.0 MiB live on rank 0, rank 1, rank 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("  rank 2 (own ordinal 2): ordinal 0 (GPU 0): live 1.0 MiB in 1 allocation, peak 1.0 MiB"),
            "{text}"
        );
        let mut json = Vec::new();
        write_json(&v, &mut json).unwrap();
        let j: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(j["schema"], SCHEMA);
        assert_eq!(j["foreign"][0]["ordinal"], 0);
    }

    /// A job of one process lists its suspects in its report's order (definitely lost first,
    /// then most live bytes), in the JSON and in the text; a job of two orders them by the same
    /// rule over the sums, not by how many processes have them.
    #[test]
    fn suspects_are_ordered_as_a_report_orders_them() {
        let (p, mut r) = process(0, &[(0, 6 << 20)], &["held", "lost", "small"]);
        for (s, (live, lost)) in r.suspects.iter_mut().zip([(3u64 << 20, 0u64), (1 << 20, 1 << 20), (2 << 20, 0)]) {
            (s.live_bytes, s.definitely_lost_bytes, s.definitely_lost_count) = (live, lost, lost >> 20);
        }
        r.suspects.sort_by(rank::report_order);
        assert_eq!(r.suspects.iter().map(|s| s.site).collect::<Vec<_>>(), [1, 0, 2]);
        let v = build(&[(p.clone(), r.clone())]);
        let at: Vec<&str> = v.suspects.iter().map(|g| g.at.as_str()).collect();
        assert_eq!(at, ["lost (w/train.c:11)", "held (w/train.c:10)", "small (w/train.c:12)"]);
        assert_eq!(v.suspects[0].definitely_lost_bytes, 1 << 20);
        let mut text = Vec::new();
        write_text(&v, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let listed: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "suspects:")
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .map(|l| l.trim_start().split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(listed, ["lost (w/train.c", "held (w/train.c", "small (w/train.c"], "{text}");
        // Rank 1 has the two growing ones, none lost: the lost one of rank 0 alone still leads.
        let (p1, mut r1) = process(1, &[(1, 5 << 20)], &["held", "lost", "small"]);
        r1.suspects.remove(1);
        r1.suspects[0].live_bytes = 3 << 20;
        r1.suspects[1].live_bytes = 2 << 20;
        let v = build(&[(p, r), (p1, r1)]);
        let got: Vec<(&str, &str, u64)> = v.suspects.iter().map(|g| (g.at.as_str(), g.scope, g.live_bytes)).collect();
        assert_eq!(
            got,
            [
                ("lost (w/train.c:11)", "one", 1 << 20),
                ("held (w/train.c:10)", "every", 6 << 20),
                ("small (w/train.c:12)", "every", 4 << 20)
            ]
        );
    }

    #[test]
    fn own_gpu_without_local_rank_is_where_most_bytes_were() {
        let (p, mut r) = process(0, &[(0, 1 << 20), (3, 5 << 20)], &[]);
        r.identity = None;
        let v = build(&[(p, r)]);
        assert_eq!((v.processes[0].own_ordinal, v.processes[0].own_from), (Some(3), Some("most bytes")));
        assert_eq!(v.foreign.iter().map(|f| f.ordinal).collect::<Vec<_>>(), [0]);
        // Without a rank the process is named by its pid once ("pid N  pid N (parent …" before).
        let mut out = Vec::new();
        write_text(&v, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let pid = v.processes[0].pid;
        let line = text.lines().find(|l| l.contains("(parent ")).unwrap_or_default();
        let words: Vec<&str> = line.split_whitespace().take(3).collect();
        assert_eq!(words, ["pid", pid.to_string().as_str(), "(parent"], "{text}");
        // How its own GPU was found, in words.
        assert!(line.ends_with(", its own GPU: GPU 3 (the one it allocated most bytes on)"), "{text}");
    }
}
