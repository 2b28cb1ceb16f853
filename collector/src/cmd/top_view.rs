//! The full-screen view of `gpushim top` (ratatui over crossterm): a frame from the collector
//! about every second, drawn as a header, a sparkline of live bytes and the top sites. A job
//! (several traced processes) first shows one row per process (live, peak, growth, suspects and
//! the suspect growing fastest); Enter goes into the selected one, Esc comes back.
//!
//! Keys: `t` sorts by live bytes or by growth, `g` cycles the growth window, Up/Down select a
//! site, Enter shows its stack (Enter or Esc back), `s` takes a snapshot and shows its path, `d`
//! takes another and shows what changed since the last one (`gpushim diff`'s text, wrapped at
//! the terminal's width; Up/Down scroll it, Esc back),
//! `q` (or Ctrl-C) quits. The terminal is restored on every way out, a panic's included.

use std::io::{self, Stdout};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::terminal::{self, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::backend::CrosstermBackend;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Sparkline, Table, TableState, Wrap};
use ratatui::{Frame as Screen, Terminal};

use super::top_text::{clean, failure, header, headline, job_cells, rate, site_ids, sites_live, sorted, Sort};
use crate::compare::diff::diff;
use crate::control::client;
use crate::control::frame::Frame;
use crate::error::{coded, OK, USAGE};
use crate::report::words::fmt_bytes;
use crate::report::Report;

/// The smallest terminal drawn in, columns and rows.
const MIN_SIZE: (u16, u16) = (60, 14);

/// Time between two frames.
const REFRESH: Duration = Duration::from_secs(1);

/// What the view shows now.
struct View {
    /// The processes watched: one, or a job's.
    pids: Vec<u32>,
    /// In a job, each process's latest frame, or why there is none.
    job: Vec<Result<Frame, String>>,
    /// The job's selected row.
    rows: TableState,
    /// The process shown, `None` on a job's first screen.
    pid: Option<u32>,
    frame: Option<Frame>,
    sort: Sort,
    windows: Vec<f64>,
    window: usize,
    table: TableState,
    stack: bool,
    message: String,
    /// The process's latest snapshot taken here, for `d`.
    last_snapshot: Option<PathBuf>,
    /// What `d` showed: the diff's lines, while they are shown.
    diff: Option<Vec<String>>,
    /// The diff's first row shown (of its lines as wrapped at the terminal's width).
    diff_scroll: u16,
}

/// Restores the terminal when dropped.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = terminal::disable_raw_mode();
        let _ = crossterm::execute!(io::stdout(), LeaveAlternateScreen, crossterm::cursor::Show);
    }
}

/// Runs the view of traced `pids` (one process, or a job's) until `q`.
///
/// # Errors
/// Exit code 2 when standard output is no terminal, or the first frame cannot be had.
pub fn run(pids: &[u32], window: f64) -> Result<ExitCode> {
    use std::io::IsTerminal;
    if !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return Err(coded(USAGE, "gpushim top needs a terminal: --once prints one text frame, --json one JSON frame"));
    }
    let mut windows = vec![10.0, 30.0, 60.0, 300.0];
    if !windows.contains(&window) {
        windows.insert(0, window);
    }
    let at = windows.iter().position(|&w| w == window).unwrap_or(0);
    let one = (pids.len() == 1).then(|| pids[0]);
    let mut view = View {
        pids: pids.to_vec(),
        job: Vec::new(),
        rows: TableState::default().with_selected(Some(0)),
        pid: one,
        frame: None,
        sort: Sort::Live,
        windows,
        window: at,
        table: TableState::default().with_selected(Some(0)),
        stack: false,
        message: String::new(),
        last_snapshot: None,
        diff: None,
        diff_scroll: 0,
    };
    if let Some(pid) = one {
        view.frame = Some(client::frame(pid, window).map_err(|f| failure(pid, f))?);
    } else {
        view.refresh();
    }
    terminal::enable_raw_mode().map_err(|e| coded(USAGE, format!("cannot use the terminal: {e}")))?;
    let _restore = Restore;
    crossterm::execute!(io::stdout(), EnterAlternateScreen, crossterm::cursor::Hide)?;
    let mut term = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    view.run(&mut term)?;
    Ok(ExitCode::from(OK))
}

impl View {
    fn run(&mut self, term: &mut Terminal<CrosstermBackend<Stdout>>) -> Result<()> {
        let mut next = Instant::now() + REFRESH;
        loop {
            term.draw(|s| self.draw(s))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Release {
                        continue;
                    }
                    let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    match k.code {
                        KeyCode::Char('q') => return Ok(()),
                        _ if ctrl_c => return Ok(()),
                        KeyCode::Char('t') => {
                            self.sort = if self.sort == Sort::Live { Sort::Growth } else { Sort::Live };
                        }
                        KeyCode::Char('g') => {
                            self.window = (self.window + 1) % self.windows.len();
                            next = Instant::now();
                        }
                        KeyCode::Char('s') => {
                            if let Some(pid) = self.pid {
                                self.message = "taking a snapshot…".into();
                                term.draw(|s| self.draw(s))?;
                                self.message = match client::snapshot(pid) {
                                    Ok(p) => {
                                        let line = format!("snapshot written to {}", p.display());
                                        self.last_snapshot = Some(p);
                                        line
                                    }
                                    Err(f) => format!("no snapshot: {}", failure(pid, f)),
                                };
                            }
                        }
                        KeyCode::Char('d') => {
                            if let Some(pid) = self.pid {
                                self.message = "taking a snapshot…".into();
                                term.draw(|s| self.draw(s))?;
                                self.diff_since_last(pid);
                            }
                        }
                        KeyCode::Esc if self.diff.is_some() => self.diff = None,
                        KeyCode::Down if self.diff.is_some() => self.diff_scroll = self.diff_scroll.saturating_add(1),
                        KeyCode::Up if self.diff.is_some() => self.diff_scroll = self.diff_scroll.saturating_sub(1),
                        KeyCode::Enter if self.pid.is_none() => {
                            let at = self.rows.selected().unwrap_or(0);
                            self.pid = self.pids.get(at).copied();
                            (self.last_snapshot, self.diff) = (None, None);
                            self.frame = self.job.get(at).and_then(|f| f.as_ref().ok()).cloned();
                            self.table.select(Some(0));
                            next = Instant::now();
                        }
                        KeyCode::Enter => self.stack = !self.stack,
                        KeyCode::Esc if self.stack => self.stack = false,
                        KeyCode::Esc if self.pids.len() > 1 => {
                            self.pid = None;
                            self.message.clear();
                            next = Instant::now();
                        }
                        KeyCode::Down if self.pid.is_none() => self.rows.select_next(),
                        KeyCode::Up if self.pid.is_none() => self.rows.select_previous(),
                        KeyCode::Down => self.table.select_next(),
                        KeyCode::Up => self.table.select_previous(),
                        _ => {}
                    }
                }
                continue;
            }
            next = Instant::now() + REFRESH;
            self.refresh();
        }
    }

    /// `d`: a snapshot now, and what changed since the last one taken here (`gpushim diff`'s
    /// text), shown in place of the sites.
    fn diff_since_last(&mut self, pid: u32) {
        let Some(old) = self.last_snapshot.clone() else {
            self.message = "d shows what changed since the last snapshot: take one first with s".into();
            return;
        };
        let new = match client::snapshot(pid) {
            Ok(p) => p,
            Err(f) => {
                self.message = format!("no snapshot: {}", failure(pid, f));
                return;
            }
        };
        let mut text = Vec::new();
        let done = match (Report::read(&old), Report::read(&new)) {
            (Ok(a), Ok(b)) => diff(&a, &b, 20, &mut text).map_err(|e| e.to_string()),
            (Err(e), _) | (_, Err(e)) => Err(format!("{e:#}")),
        };
        self.message = match done {
            Ok(()) => {
                self.diff = Some(String::from_utf8_lossy(&text).lines().map(clean).collect());
                self.diff_scroll = 0;
                format!("since {}: snapshot written to {}", old.display(), new.display())
            }
            Err(why) => format!("no diff: {why}"),
        };
        self.last_snapshot = Some(new);
    }

    /// Asks for the frames shown: the process's, or on a job's first screen every process's.
    fn refresh(&mut self) {
        let window = self.windows[self.window];
        match self.pid {
            Some(pid) => match client::frame(pid, window) {
                Ok(f) => self.frame = Some(f),
                Err(f) => self.message = format!("{}", failure(pid, f)),
            },
            None => {
                self.job = self
                    .pids
                    .iter()
                    .map(|&p| client::frame(p, window).map_err(|f| format!("{}", failure(p, f))))
                    .collect();
            }
        }
    }

    /// A job's first screen: one row per process.
    fn draw_job(&mut self, s: &mut Screen<'_>, area: Rect) {
        let [body, foot] = Layout::vertical([Constraint::Min(4), Constraint::Length(1)]).areas(area);
        let rows = self.job.iter().zip(&self.pids).map(|(f, pid)| match f {
            Ok(f) => Row::new(job_cells(f).to_vec()),
            Err(why) => Row::new(vec![
                format!("pid {pid}"),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                why.clone(),
            ]),
        });
        let title = format!(" {} traced processes, growth over {:.0} s ", self.pids.len(), self.windows[self.window]);
        let table = Table::new(
            rows,
            [
                Constraint::Length(22),
                Constraint::Length(10),
                Constraint::Length(10),
                Constraint::Length(13),
                Constraint::Length(9),
                Constraint::Min(10),
            ],
        )
        .header(
            Row::new(vec!["PROCESS", "LIVE", "PEAK", "GROWTH", "SUSPECTS", "FASTEST SUSPECT"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::default().borders(Borders::ALL).title(title));
        s.render_stateful_widget(table, body, &mut self.rows);
        s.render_widget(Paragraph::new("q quit  g window  Enter into a process (Esc: back)"), foot);
    }

    fn draw(&mut self, s: &mut Screen<'_>) {
        let area = s.area();
        if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
            let line = format!(
                "gpushim top: the terminal is {}x{}; it needs {}x{} (q quits)",
                area.width, area.height, MIN_SIZE.0, MIN_SIZE.1
            );
            s.render_widget(Paragraph::new(line), Rect { height: 1, ..area });
            return;
        }
        if self.pid.is_none() {
            self.draw_job(s, area);
            return;
        }
        let Some(f) = &self.frame else { return };
        let [head, spark, body, foot] =
            Layout::vertical([Constraint::Length(3), Constraint::Length(5), Constraint::Min(4), Constraint::Length(1)])
                .areas(area);
        let lines: Vec<Line> = header(f).into_iter().map(Line::from).collect();
        s.render_widget(Paragraph::new(lines), head);
        // One point per sample, the latest at the right edge.
        let width = usize::from(spark.width.saturating_sub(2));
        let shown = &f.series[f.series.len().saturating_sub(width)..];
        let points: Vec<u64> = shown.iter().map(|p| p.live_bytes).collect();
        let peak = points.iter().copied().max().unwrap_or(0);
        let span = match (shown.first(), shown.last()) {
            (Some(a), Some(b)) => b.t_s - a.t_s,
            _ => 0.0,
        };
        let title = format!(
            " live bytes over the last {span:.0} s (highest {}, now {}) ",
            fmt_bytes(peak),
            fmt_bytes(f.totals.live_bytes)
        );
        s.render_widget(
            Sparkline::default().block(Block::default().borders(Borders::ALL).title(title)).data(&points),
            spark,
        );
        let sites = sorted(f, self.sort);
        let selected = self.table.selected().unwrap_or(0).min(sites.len().saturating_sub(1));
        self.table.select(Some(selected));
        if let Some(lines) = &self.diff {
            // Wrapped at the box's width, so that no line is cut; scrolled when the rows wrapped
            // are more than the box holds.
            let lines: Vec<Line> = lines.iter().map(|l| Line::from(l.as_str())).collect();
            let text = Paragraph::new(lines).wrap(Wrap { trim: false });
            let rows = text.line_count(body.width.saturating_sub(2));
            let last =
                u16::try_from(rows.saturating_sub(usize::from(body.height.saturating_sub(2)))).unwrap_or(u16::MAX);
            self.diff_scroll = self.diff_scroll.min(last);
            let more = if last > 0 { "; Up/Down: scroll" } else { "" };
            let block = Block::default()
                .borders(Borders::ALL)
                .title(format!(" what changed since the last snapshot (Esc: back{more}) "));
            s.render_widget(text.block(block).scroll((self.diff_scroll, 0)), body);
        } else if self.stack {
            let mut lines = Vec::new();
            if let Some(site) = sites.get(selected) {
                let name =
                    if site.headline.is_empty() { String::new() } else { format!(": {}", clean(&site.headline)) };
                lines.push(Line::from(format!("{}{name}", site_ids(site))));
                lines.extend(site.frames.iter().map(|fr| Line::from(format!("  {}", clean(fr)))));
                if !site.held_by.is_empty() {
                    let from = f.holders_from.as_deref().unwrap_or("a snapshot");
                    lines.push(Line::from(""));
                    lines.push(Line::from(format!("who held it at {from}'s heap walk:")));
                    lines.extend(site.held_by.iter().map(|l| Line::from(format!("  {}", clean(l)))));
                }
            }
            let block = Block::default().borders(Borders::ALL).title(" stack (Enter or Esc: back) ");
            s.render_widget(Paragraph::new(lines).block(block), body);
        } else {
            let rows = sites.iter().map(|site| {
                Row::new(vec![
                    fmt_bytes(site.live_bytes),
                    site.live_count.to_string(),
                    rate(site.growth_bytes_per_s),
                    if site.suspect { "suspect".into() } else { String::new() },
                    headline(site),
                ])
            });
            let by = if self.sort == Sort::Live { "live bytes" } else { "growth" };
            let title = format!(
                " sites by {by}, growth over {:.0} s ({}, {}) ",
                self.windows[self.window],
                sites_live(f, false),
                crate::report::words::count(f.suspects, "suspect")
            );
            let table = Table::new(
                rows,
                [
                    Constraint::Length(10),
                    Constraint::Length(8),
                    Constraint::Length(13),
                    Constraint::Length(8),
                    Constraint::Min(10),
                ],
            )
            .header(
                Row::new(vec!["LIVE", "COUNT", "GROWTH", "", "SITE"]).style(Style::new().add_modifier(Modifier::BOLD)),
            )
            .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
            .block(Block::default().borders(Borders::ALL).title(title));
            s.render_stateful_widget(table, body, &mut self.table);
        }
        let keys = if self.pids.len() > 1 {
            "q quit  t sort  g window  s snapshot  d diff  Enter stack  Esc processes"
        } else {
            "q quit  t sort  g window  s snapshot  d diff  Enter stack"
        };
        let text = if self.message.is_empty() { keys.to_string() } else { format!("{}  |  {keys}", self.message) };
        s.render_widget(Paragraph::new(text), foot);
    }
}
