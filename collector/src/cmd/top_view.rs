//! The full-screen view of `gpushim top` (ratatui over crossterm): a frame from the collector
//! about every second, drawn as a header, a sparkline of live bytes and the top sites. A job
//! (several traced processes) first shows one row per process (live, peak, growth, suspects and
//! the suspect growing fastest); Enter goes into the selected one, Esc comes back.
//!
//! Keys: `t` sorts by live bytes or by growth, `g` cycles the growth window, Up/Down select a
//! site, Enter shows its stack (Up/Down scroll it, Enter or Esc back), `s` takes a snapshot and
//! shows its path, `d` takes another and shows what changed since the last one (`gpushim diff`'s
//! text, wrapped at the terminal's width; Up/Down scroll it, Esc back), or, without an earlier
//! one, takes the first and says so,
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
    /// The stack view's first line shown.
    stack_scroll: usize,
    message: String,
    /// The process's latest snapshot taken here, for `d`.
    last_snapshot: Option<PathBuf>,
    /// What `d` showed: the diff's lines, while they are shown.
    diff: Option<Vec<String>>,
    /// The diff's first row shown (of its lines as wrapped at the terminal's width).
    diff_scroll: u16,
}

/// `line` cut to `width` characters, its last one `…` when it was wider.
fn cut(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_string();
    }
    let mut s: String = line.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// `lines` wrapped at `width` columns between words (a word wider than a row is broken; the
/// rows that continue a line are indented by 2), in at most `rows` rows: when they need more,
/// the last row shown ends with `…`, so that nothing is cut silently.
fn fit(lines: &[String], width: usize, rows: usize) -> Vec<String> {
    let width = width.max(4);
    let mut out: Vec<String> = Vec::new();
    for line in lines {
        let mut row = String::new();
        let mut fresh = true;
        for word in line.split(' ') {
            let (used, len) = (row.chars().count(), word.chars().count());
            if !fresh && used + 1 + len > width {
                out.push(std::mem::replace(&mut row, "  ".to_string()));
                fresh = true;
            }
            if !fresh {
                row.push(' ');
            }
            row.push_str(word);
            fresh = false;
            // A word wider than the row: broken at the width.
            while row.chars().count() > width {
                let head: String = row.chars().take(width).collect();
                let tail: String = row.chars().skip(width).collect();
                out.push(head);
                row = format!("  {tail}");
            }
        }
        out.push(row);
    }
    if out.len() > rows {
        out.truncate(rows);
        if let Some(last) = out.last_mut() {
            *last = cut(&format!("{last} …"), width);
        }
    }
    out
}

/// The rows of the stack view for a box of `rows` rows and `width` columns: `lines` from
/// `*scroll` on (clamped, so that the last line is at most at the bottom), each cut with `…`
/// when wider, and, when more follow than fit, a last row `… N more lines (↓ to scroll)`.
fn stack_rows(lines: &[String], rows: usize, width: usize, scroll: &mut usize) -> Vec<String> {
    *scroll = (*scroll).min(lines.len().saturating_sub(rows));
    let rest = &lines[*scroll..];
    if rest.len() <= rows {
        return rest.iter().map(|l| cut(l, width)).collect();
    }
    let shown = rows.saturating_sub(1);
    let mut out: Vec<String> = rest[..shown].iter().map(|l| cut(l, width)).collect();
    let n = rest.len() - shown;
    out.push(cut(&format!("… {n} more {} (↓ to scroll)", if n == 1 { "line" } else { "lines" }), width));
    out
}

/// The line of `d` without an earlier snapshot: the one it wrote is the first.
fn first_snapshot(path: &std::path::Path) -> String {
    format!("first snapshot written to {}; press d again to see what changes from it", path.display())
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
    let mut view = View::new(pids.to_vec(), one, windows, at);
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
    /// The view of `pids` (in one process's view when `pid`), with growth windows `windows`
    /// (seconds), the one at `window` chosen; nothing fetched or drawn yet.
    fn new(pids: Vec<u32>, pid: Option<u32>, windows: Vec<f64>, window: usize) -> View {
        View {
            pids,
            job: Vec::new(),
            rows: TableState::default().with_selected(Some(0)),
            pid,
            frame: None,
            sort: Sort::Live,
            windows,
            window,
            table: TableState::default().with_selected(Some(0)),
            stack: false,
            stack_scroll: 0,
            message: String::new(),
            last_snapshot: None,
            diff: None,
            diff_scroll: 0,
        }
    }

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
                        KeyCode::Enter => (self.stack, self.stack_scroll) = (!self.stack, 0),
                        KeyCode::Esc if self.stack => self.stack = false,
                        KeyCode::Down if self.stack => self.stack_scroll = self.stack_scroll.saturating_add(1),
                        KeyCode::Up if self.stack => self.stack_scroll = self.stack_scroll.saturating_sub(1),
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
    /// text), shown in place of the sites; without an earlier one, the snapshot is the first,
    /// and the line says so.
    fn diff_since_last(&mut self, pid: u32) {
        let new = match client::snapshot(pid) {
            Ok(p) => p,
            Err(f) => {
                self.message = format!("no snapshot: {}", failure(pid, f));
                return;
            }
        };
        let Some(old) = self.last_snapshot.replace(new.clone()) else {
            self.message = first_snapshot(&new);
            return;
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
        // The header wrapped at the terminal's width, in at most 6 rows and what leaves the
        // sites 4 (with the sparkline's 5 and the keys' 1).
        // The keys' line, after what the last key did (a snapshot's path), wrapped in 2 rows
        // at most.
        let keys = if self.pids.len() > 1 {
            "q quit  t sort  g window  s snapshot  d diff  Enter stack  Esc processes"
        } else {
            "q quit  t sort  g window  s snapshot  d diff  Enter stack"
        };
        let text = if self.message.is_empty() { keys.to_string() } else { format!("{}  |  {keys}", self.message) };
        let foot_lines = fit(&[text], usize::from(area.width), 2);
        let foot_rows = u16::try_from(foot_lines.len()).unwrap_or(1);
        // The header wrapped at the terminal's width, in at most 6 rows and what leaves the
        // sites 4 (with the sparkline's 5 and the keys' rows).
        let head_rows = usize::from(area.height.saturating_sub(9 + foot_rows)).min(6);
        let head_lines = fit(&header(f), usize::from(area.width), head_rows);
        let [head, spark, body, foot] = Layout::vertical([
            Constraint::Length(u16::try_from(head_lines.len()).unwrap_or(3)),
            Constraint::Length(5),
            Constraint::Min(4),
            Constraint::Length(foot_rows),
        ])
        .areas(area);
        let lines: Vec<Line> = head_lines.into_iter().map(Line::from).collect();
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
                lines.push(format!("{}{name}", site_ids(site)));
                lines.extend(site.frames.iter().map(|fr| format!("  {}", clean(fr))));
                if !site.held_by.is_empty() {
                    let from = f.holders_from.as_deref().unwrap_or("a snapshot");
                    lines.push(String::new());
                    lines.push(format!("who held it at {from}'s heap walk:"));
                    lines.extend(site.held_by.iter().map(|l| format!("  {}", clean(l))));
                }
            }
            let (rows, width) = (usize::from(body.height.saturating_sub(2)), usize::from(body.width.saturating_sub(2)));
            let more = if lines.len() > rows { "; Up/Down: scroll" } else { "" };
            let shown: Vec<Line> =
                stack_rows(&lines, rows, width, &mut self.stack_scroll).into_iter().map(Line::from).collect();
            let block = Block::default().borders(Borders::ALL).title(format!(" stack (Enter or Esc: back{more}) "));
            s.render_widget(Paragraph::new(shown).block(block), body);
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
        s.render_widget(Paragraph::new(foot_lines.into_iter().map(Line::from).collect::<Vec<_>>()), foot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::frame::SiteLine;
    use ratatui::backend::TestBackend;

    /// The view of one process showing `f`, not yet drawn.
    fn view(f: Frame) -> View {
        let mut v = View::new(vec![f.pid], Some(f.pid), vec![10.0], 0);
        v.frame = Some(f);
        v
    }

    /// The screen's rows after drawing `v` in `w`x`h`.
    fn screen(v: &mut View, w: u16, h: u16) -> Vec<String> {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|s| v.draw(s)).unwrap();
        let buf = term.backend().buffer().clone();
        (0..h).map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>()).collect()
    }

    /// A frame of one site with a stack of 30 frames, and a driver line longer than 100 columns.
    fn deep() -> Frame {
        let frames: Vec<String> = (0..30).map(|i| format!("f{i} (deep.c:{})", i + 1)).collect();
        Frame {
            pid: 7,
            command: vec!["./deep".into()],
            driver_unavailable: Some(
                "no NVML (no NVIDIA driver): nvmlInit_v2 failed (9: the NVIDIA driver is not loaded), so no figure"
                    .into(),
            ),
            gpus: vec![crate::control::frame::GpuLine { ordinal: 0, gauge: Default::default() }],
            sites_live: 1,
            rows_live: 1,
            sites: vec![SiteLine {
                id: "1".into(),
                sites: vec!["1".into()],
                headline: "f0 (deep.c:1)".into(),
                frames,
                ..SiteLine::default()
            }],
            ..Frame::default()
        }
    }

    /// Lines wider than the terminal wrap between words; past the rows given, the last row
    /// ends with `…`.
    #[test]
    fn the_header_wraps_and_says_when_it_is_cut() {
        let lines = vec!["pid 7: ./a".to_string(), "GPU 0 1 B; driver: no NVML (no NVIDIA driver) here".to_string()];
        assert_eq!(fit(&lines, 29, 6), ["pid 7: ./a", "GPU 0 1 B; driver: no NVML", "  (no NVIDIA driver) here"]);
        assert_eq!(fit(&lines, 29, 2), ["pid 7: ./a", "GPU 0 1 B; driver: no NVML …"]);
        // A word wider than the row is broken.
        assert_eq!(fit(&["abcdefghij".to_string()], 6, 6), ["abcdef", "  ghij"]);
    }

    /// 30 frames in a box of 10 rows: 9 lines and `… 22 more lines (↓ to scroll)`; scrolled
    /// down, the rest; scrolled past the end, clamped so the last frame is at the bottom.
    #[test]
    fn a_long_stack_says_more_follow_and_scrolls() {
        let lines: Vec<String> = (0..31).map(|i| format!("line {i}")).collect();
        let mut scroll = 0;
        let rows = stack_rows(&lines, 10, 40, &mut scroll);
        assert_eq!((rows.len(), rows[8].as_str(), rows[9].as_str()), (10, "line 8", "… 22 more lines (↓ to scroll)"));
        scroll = 20;
        let rows = stack_rows(&lines, 10, 40, &mut scroll);
        assert_eq!((rows[0].as_str(), rows[9].as_str()), ("line 20", "… 2 more lines (↓ to scroll)"));
        scroll = 100;
        let rows = stack_rows(&lines, 10, 40, &mut scroll);
        assert_eq!((scroll, rows[0].as_str(), rows[9].as_str()), (21, "line 21", "line 30"));
        // A line wider than the box is cut with `…`.
        let mut scroll = 0;
        assert_eq!(stack_rows(&["abcdefgh".to_string()], 3, 5, &mut scroll), ["abcd…"]);
    }

    /// Drawn in 100x24: the header's driver line wraps (its end shown), the stack view of 30
    /// frames ends with the count of lines below and its title says it scrolls; Down scrolls.
    #[test]
    fn the_stack_view_drawn_says_it_scrolls() {
        let mut v = view(deep());
        let rows = screen(&mut v, 100, 24);
        let text = rows.join("\n");
        assert!(text.contains("is not loaded), so no figure"), "{text}");
        v.stack = true;
        let rows = screen(&mut v, 100, 24);
        let text = rows.join("\n");
        assert!(text.contains(" stack (Enter or Esc: back; Up/Down: scroll) "), "{text}");
        // Head 4 rows, sparkline 5, keys 1: the stack's box has 14, 12 inside: the site's line,
        // 10 frames, and the 20 frames below counted.
        let last = rows.iter().rev().find(|r| r.contains("more lines")).unwrap_or_else(|| panic!("{text}"));
        assert!(last.contains("… 20 more lines (↓ to scroll)"), "{text}");
        assert!(text.contains("f9 (deep.c:10)") && !text.contains("f10 (deep.c:11)"), "{text}");
        v.stack_scroll = 1;
        let text = screen(&mut v, 100, 24).join("\n");
        assert!(text.contains("f10 (deep.c:11)") && text.contains("… 19 more lines"), "{text}");
    }

    #[test]
    fn d_without_an_earlier_snapshot_says_it_wrote_the_first() {
        assert_eq!(
            first_snapshot(std::path::Path::new("/o/gpushim-7-snapshot-top-1.json")),
            "first snapshot written to /o/gpushim-7-snapshot-top-1.json; press d again to see what changes from it"
        );
    }
}
