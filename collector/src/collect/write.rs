//! Where the reports of one stream go: one writer for the kinds of report (snapshot,
//! out-of-memory, interval, final), with the files written beside them (who holds the memory,
//! reachability, the HTML page) and the lines said on stderr about each.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use crate::explain::holders::Holders;
use crate::render::text;
use crate::report::output::{self, in_a_line};
use crate::report::Report;

/// Which report [`Writer::report`] writes, with what that kind says or does besides the file.
pub(super) enum Kind<'k> {
    /// Snapshot number `n` (its number in its directory); `api`: asked for through the
    /// shim's C API, so answered on the socket (and not said on stderr) rather than by signal,
    /// under `asked`, its number in the stream.
    Snapshot { n: u32, asked: u32, api: bool },
    /// A snapshot asked for by `gpushim top`: its client gets the path, stderr nothing.
    TopSnapshot,
    /// Out-of-memory report; `what`: the failed request in words.
    Oom { what: &'k str },
    /// Interval report number `n`, of which the latest `keep` files are kept.
    Interval { n: u32, keep: usize },
    /// The final report of process `pid`, with the exit heap walk's holders (written beside
    /// it, then shown in its HTML page and summary).
    Final { pid: u32, holders: Option<Box<Holders>> },
}

/// Writes report files into one directory and says on stderr what went where.
pub(super) struct Writer<'a> {
    /// Where the reports go.
    pub(super) dir: PathBuf,
    /// Also write each report as an HTML page beside its JSON.
    html: bool,
    /// The collector's stderr (the program's, or `gpushim run`'s).
    pub(super) err: &'a mut dyn Write,
    /// Where API snapshots are answered (the socket back to the shim).
    answers: &'a mut dyn Write,
    /// Snapshot files written, in order.
    pub(super) snapshots: Vec<PathBuf>,
    /// Out-of-memory reports written, in order.
    pub(super) ooms: Vec<PathBuf>,
    /// The interval reports kept, oldest first.
    interval_files: VecDeque<PathBuf>,
}

impl<'a> Writer<'a> {
    /// A writer into `dir`.
    pub(super) fn new(dir: PathBuf, html: bool, err: &'a mut dyn Write, answers: &'a mut dyn Write) -> Writer<'a> {
        Writer { dir, html, err, answers, snapshots: Vec::new(), ooms: Vec::new(), interval_files: VecDeque::new() }
    }

    /// Writes `report` as `stem.json` (or the next free name, [`output::write_new_with`]), then
    /// what its kind asks for. A failure is said on stderr and collection goes on, except for the
    /// final report, whose failure is returned.
    pub(super) fn report(&mut self, stem: &str, kind: Kind<'_>, report: &mut Report) -> Result<PathBuf> {
        let written = self.json(&*report, stem);
        match kind {
            Kind::Snapshot { n, asked, api } => {
                match &written {
                    Ok(path) => {
                        // An API snapshot's caller gets the path back: no line for it.
                        if !api {
                            let _ = writeln!(self.err, "gpushim: snapshot {n} written to {}", in_a_line(path));
                        }
                        self.html_beside(report, path);
                        self.snapshots.push(path.clone());
                    }
                    Err(e) => {
                        let _ = writeln!(self.err, "gpushim: cannot write snapshot {n}: {e:#}");
                    }
                }
                if api {
                    self.answer(asked, written.as_ref().map_err(|e| format!("{e:#}")));
                }
            }
            Kind::TopSnapshot => {
                if let Ok(path) = &written {
                    self.html_beside(report, path);
                    self.snapshots.push(path.clone());
                }
            }
            Kind::Oom { what } => match &written {
                Ok(path) => {
                    let _ = writeln!(
                        self.err,
                        "gpushim: out of memory: {what} failed; report written to {}",
                        in_a_line(path)
                    );
                    self.html_beside(report, path);
                    self.ooms.push(path.clone());
                }
                Err(e) => {
                    let _ = writeln!(self.err, "gpushim: out of memory: {what} failed; cannot write its report: {e:#}");
                }
            },
            Kind::Interval { n, keep } => {
                match &written {
                    Ok(path) => self.interval_files.push_back(path.clone()),
                    Err(e) => {
                        let _ = writeln!(self.err, "gpushim: cannot write interval report {n}: {e:#}");
                    }
                }
                while self.interval_files.len() > keep.max(1) {
                    if let Some(old) = self.interval_files.pop_front() {
                        let _ = std::fs::remove_file(old);
                    }
                }
            }
            Kind::Final { pid, holders } => {
                if written.is_err() {
                    // The totals at least, before the line that says where nothing went.
                    let _ = text::summary_lines(report, self.err);
                }
                let path = written.with_context(|| format!("cannot write the report of pid {pid}"))?;
                if let Some(h) = holders {
                    let stem = format!("{stem}.holders");
                    if let Err(e) = self.json(&*h, &stem) {
                        let _ = writeln!(self.err, "gpushim: cannot write {stem}.json: {e:#}");
                    }
                    report.holders = Some(*h);
                }
                self.html_beside(report, &path);
                let _ = text::summary(report, &path, self.err);
                return Ok(path);
            }
        }
        written
    }

    /// Runs `f` with the files going into `dir`, when given, rather than the writer's own
    /// directory (an API snapshot that named one).
    pub(super) fn in_dir<R>(&mut self, dir: Option<&Path>, f: impl FnOnce(&mut Self) -> R) -> R {
        let Some(dir) = dir else { return f(self) };
        let home = std::mem::replace(&mut self.dir, dir.to_path_buf());
        let r = f(self);
        self.dir = home;
        r
    }

    /// Writes `doc` as `stem.json` in the directory, with the fallbacks of
    /// [`output::write_new_with`]; tells stderr where it went if not where asked.
    pub(super) fn json<T: serde::Serialize>(&mut self, doc: &T, stem: &str) -> Result<PathBuf> {
        let w = output::write_new_with(&self.dir, stem, "json", &mut |out| {
            crate::report::json::to_writer(out, doc)?;
            out.write_all(b"\n")
        })?;
        for m in w.messages() {
            let _ = writeln!(self.err, "gpushim: {m}");
        }
        Ok(w.path)
    }

    /// With HTML pages asked for, writes `report` as one beside its JSON file `json` (`X.json` →
    /// `X.html`, or the next free name); a failure is said on stderr and is no error of the
    /// collection.
    fn html_beside(&mut self, report: &Report, json: &Path) {
        if !self.html {
            return;
        }
        let dir = json.parent().unwrap_or(Path::new("."));
        let stem = json.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let page = crate::render::html::Html;
        match output::write_new_with(dir, &stem, "html", &mut |out| crate::render::Render::render(&page, report, out)) {
            Ok(w) => {
                for m in w.messages() {
                    let _ = writeln!(self.err, "gpushim: {m}");
                }
                let _ = writeln!(self.err, "gpushim: HTML report written to {}", in_a_line(&w.path));
            }
            Err(e) => {
                let _ = writeln!(self.err, "gpushim: cannot write {stem}.html: {e:#}");
            }
        }
    }

    /// Tells the shim that API snapshot `n` is written or why not, in the answer protocol of
    /// the wire crate. Errors are ignored: the program may be gone.
    /// Asks the shim for a snapshot of the program, as its signal would (`wire::ASK_SNAPSHOT`).
    pub(super) fn ask_snapshot(&mut self) {
        let _ = self
            .answers
            .write_all(gpushim_wire::ASK_SNAPSHOT)
            .and_then(|()| self.answers.write_all(b"\n"))
            .and_then(|()| self.answers.flush());
    }

    fn answer(&mut self, n: u32, written: Result<&PathBuf, String>) {
        use std::os::unix::ffi::OsStrExt;
        let line =
            gpushim_wire::answer_line(n, written.as_ref().map(|p| p.as_os_str().as_bytes()).map_err(|e| e.as_str()));
        let _ = self.answers.write_all(&line).and_then(|()| self.answers.flush());
    }
}
