//! The report (and a diff) as one self-contained HTML page: a header with the totals, live bytes
//! over time (uPlot), a flame graph of live bytes or allocations (d3-flame-graph), the suspects
//! with their stacks and holders, and a sortable table of all sites. Both pages give the
//! glossary's words ([`super::glossary`]) their meanings as tooltips.
//!
//! Everything the page needs is inlined: the vendored libraries and the page's own script and
//! style under `collector/assets/` (read at build time), and the data as one JSON block. The
//! page makes no network request. Its size is bounded: the timeline is cut to
//! [`MAX_TIMELINE_POINTS`], suspect series to [`MAX_SERIES_POINTS`], and only the suspects'
//! series are kept (the report's own caps bound the rest: 1000 sites, 1000 failures).

use std::io::{self, Write};

use serde_json::{json, Value};

use super::Render;
use crate::report::words::{first_user_frame, fmt_score, frame_label, shell_words, short_path};
use crate::report::{Report, Site, Timeline, TimelinePoint};

/// Most timeline points the page holds (the report holds up to 2001).
pub const MAX_TIMELINE_POINTS: usize = 600;
/// Most points per suspect series the page holds (the report holds up to 256).
pub const MAX_SERIES_POINTS: usize = 128;
/// Suspects drawn as their own lines in the chart.
pub const CHART_SUSPECTS: usize = 5;

const UPLOT_JS: &str = include_str!("../../assets/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../assets/vendor/uplot/uPlot.min.css");
const D3_SELECTION_JS: &str = include_str!("../../assets/vendor/d3-selection/d3-selection.min.js");
const FLAME_JS: &str = include_str!("../../assets/vendor/d3-flame-graph/d3-flamegraph.min.js");
const FRAMES_JS: &str = include_str!("../../assets/frames.js");
const FLAME_CSS: &str = include_str!("../../assets/vendor/d3-flame-graph/d3-flamegraph.css");
const PAGE_CSS: &str = include_str!("../../assets/page.css");
const TERMS_JS: &str = include_str!("../../assets/terms.js");
const REPORT_JS: &str = include_str!("../../assets/report.js");
const DIFF_JS: &str = include_str!("../../assets/diff.js");

/// What the sites table's site column shows for the allocations recorded without a backtrace
/// (they share the id `NO_STACK`, a number that means nothing to a reader).
pub const NO_BACKTRACE_CELL: &str = "\u{2014}";
/// The tooltip of [`NO_BACKTRACE_CELL`].
pub const NO_BACKTRACE_TITLE: &str = "no backtrace was recorded for these allocations";

/// The HTML format of `gpushim report`.
pub struct Html;

/// `n` evenly spread indices of `0..len`, the first and the last included (all when `len <= n`).
fn spread(len: usize, n: usize) -> Vec<usize> {
    if len <= n || n < 2 {
        return (0..len).collect();
    }
    (0..n).map(|i| i * (len - 1) / (n - 1)).collect()
}

/// The timeline cut to at most [`MAX_TIMELINE_POINTS`]: in each of that many equal slices of
/// the points, the point with most live bytes, so peaks stay visible.
pub fn downsample(t: &Timeline) -> Timeline {
    let n = t.points.len();
    if n <= MAX_TIMELINE_POINTS {
        return t.clone();
    }
    let total = |p: &TimelinePoint| p.kinds.iter().sum::<u64>();
    let mut points = Vec::with_capacity(MAX_TIMELINE_POINTS);
    for i in 0..MAX_TIMELINE_POINTS {
        let (lo, hi) =
            (i * n / MAX_TIMELINE_POINTS, ((i + 1) * n / MAX_TIMELINE_POINTS).max(i * n / MAX_TIMELINE_POINTS + 1));
        let best = t.points[lo..hi].iter().max_by_key(|p| total(p)).expect("slices are not empty");
        points.push(best.clone());
    }
    // The state at the end is always shown.
    if let (Some(last), Some(end)) = (points.last_mut(), t.points.last()) {
        if last.t_s < end.t_s {
            *last = end.clone();
        }
    }
    Timeline { devices: t.devices.clone(), points }
}

/// Where the page's chart ends: the report's end (its timeline's last point, if that is later).
pub fn chart_end(r: &Report) -> f64 {
    r.timeline.points.last().map_or(r.duration_s, |p| p.t_s.max(r.duration_s))
}

/// The timeline as the chart draws it: ending at `end_s` with the state at its last point (the
/// timeline's last point is the state at the report's end, but it may be older than the end
/// when nothing changed since), so that every series of the chart has a value at the end.
fn ended(t: &Timeline, end_s: f64) -> Timeline {
    let mut t = t.clone();
    if let Some(last) = t.points.last().filter(|p| p.t_s < end_s) {
        let end = TimelinePoint { t_s: end_s, ..last.clone() };
        t.points.push(end);
    }
    t
}

/// A site's series as the chart draws it: at most [`MAX_SERIES_POINTS`], the first and the last
/// kept, ending with the site's live bytes at `end_s` (the report's end). A site's series records
/// one change in 2, 4, … once it holds 256 points, so its last point may be older than the site's
/// last change and hold another value than the live bytes the report ends with.
pub fn chart_series(site: &Site, end_s: f64) -> Vec<(f64, u64)> {
    let mut points = site.series.clone();
    match points.last() {
        Some(&(t, v)) if v != site.live_bytes => points.push((t.max(end_s), site.live_bytes)),
        None if site.live_bytes > 0 => points.push((end_s, site.live_bytes)),
        _ => {}
    }
    spread(points.len(), MAX_SERIES_POINTS).into_iter().map(|i| points[i]).collect()
}

/// The data block of a report's page: the report itself (whatever fields it has, owners
/// included) with the timeline cut, series kept only for the charted suspects, the live
/// allocations list left out, a `label` (first user frame) and a `name` (what its site column
/// shows: the id, or [`NO_BACKTRACE_CELL`] with `no_backtrace` holding [`NO_BACKTRACE_TITLE`]) per
/// site, each frame's file named as the text report names it (`file_name`: its directory and
/// its name, [`short_path`]), the heap walk's holders when there was one, the reachability
/// scan's lines as the text report says them (`scan_lines`), each suspect's score and holder
/// lines as the text report writes them (`score_text`, `holder_lines`), and the glossary
/// ([`super::glossary::page_terms`]) for the page's tooltips. The timeline and the charted
/// series end at the report's end ([`chart_end`], [`chart_series`]).
pub fn page_data(r: &Report) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    // A suspect of several sites (one cause, or one line's union) is charted as the sum of
    // their series: each member's is kept.
    let charted: Vec<u32> = r
        .suspects
        .iter()
        .take(CHART_SUSPECTS)
        .flat_map(|s| std::iter::once(s.site).chain(s.sites.iter().copied()).chain(s.line_sites.iter().copied()))
        .collect();
    let end_s = chart_end(r);
    if let Some(o) = v.as_object_mut() {
        o.remove("allocations");
        o.insert(
            "timeline".into(),
            serde_json::to_value(downsample(&ended(&r.timeline, end_s))).unwrap_or(Value::Null),
        );
        o.insert("program".into(), Value::String(shell_words(&r.command)));
        o.insert("glossary".into(), super::glossary::page_terms());
        // The scan's lines as stderr and the text report say them.
        o.insert("scan_lines".into(), json!(super::text::scan_lines(r)));
        if let Some(Value::Array(suspects)) = o.get_mut("suspects") {
            for (v, s) in suspects.iter_mut().zip(&r.suspects) {
                if let Some(v) = v.as_object_mut() {
                    v.insert("score_text".into(), Value::String(fmt_score(s.score)));
                    // Who holds its memory, line by line as the text report says it (every
                    // member's holders for a suspect of the sites of one line).
                    v.insert("holder_lines".into(), json!(super::text::suspect_holder_lines(r, s, 5)));
                }
            }
        }
        if let Some(h) = &r.holders {
            o.insert("holders".into(), serde_json::to_value(h).unwrap_or(Value::Null));
        }
        if let Some(Value::Array(sites)) = o.get_mut("sites") {
            for (s, site) in sites.iter_mut().zip(&r.sites) {
                let label = first_user_frame(site).map_or_else(|| "(no backtrace)".to_string(), frame_label);
                let series: Vec<Value> = if charted.contains(&site.id) {
                    chart_series(site, end_s).into_iter().map(|p| json!(p)).collect()
                } else {
                    Vec::new()
                };
                if let Some(o) = s.as_object_mut() {
                    o.insert("label".into(), Value::String(label));
                    if site.no_backtrace() {
                        o.insert("name".into(), NO_BACKTRACE_CELL.into());
                        o.insert("no_backtrace".into(), NO_BACKTRACE_TITLE.into());
                    } else {
                        o.insert("name".into(), Value::String(site.id.to_string()));
                    }
                    o.insert("series".into(), Value::Array(series));
                    // Addresses make the page larger and mean nothing to a reader.
                    if let Some(Value::Array(frames)) = o.get_mut("frames") {
                        for (f, frame) in frames.iter_mut().filter_map(Value::as_object_mut).zip(&site.frames) {
                            f.remove("address");
                            if let Some(file) = &frame.file {
                                f.insert("file_name".into(), Value::String(short_path(file).into_owned()));
                            }
                        }
                    }
                }
            }
        }
    }
    v
}

/// Writes the page: `title`, the inlined libraries and the glossary's tooltips (`terms.js`), the
/// data as JSON, then `script`.
fn page(out: &mut dyn Write, title: &str, data: &Value, script: &str) -> io::Result<()> {
    // `</` inside the JSON would end the script element: write it as `<\/` (same JSON).
    let json = serde_json::to_string(data).map_err(io::Error::other)?.replace("</", "<\\/");
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{UPLOT_CSS}\n{FLAME_CSS}\n{PAGE_CSS}\n</style>\n</head>\n<body>\n\
         <main id=\"app\"></main>\n\
         <script>\n{UPLOT_JS}\n</script>\n<script>\n{D3_SELECTION_JS}\n</script>\n<script>\n{FRAMES_JS}\n</script>\n<script>\n{FLAME_JS}\n</script>\n<script>\n{TERMS_JS}\n</script>\n\
         <script type=\"application/json\" id=\"data\">{json}</script>\n<script>\n{script}\n</script>\n</body>\n</html>\n",
        escape(title)
    )
}

/// `s` with the characters that mean something in HTML escaped.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

impl Render for Html {
    fn render(&self, r: &Report, out: &mut dyn Write) -> io::Result<()> {
        page(out, &super::svg::title(r), &page_data(r), REPORT_JS)
    }
}

/// A piece of a label of the diff page: words, or a glossary word (the glossary's `word`, and
/// the text shown) that the page shows with its meaning as a tooltip.
enum Piece {
    Words(&'static str),
    Term(&'static str, &'static str),
}

use Piece::{Term, Words};

/// The rows of the diff page's totals: each field of the diff's `totals`, and its label.
const DIFF_TOTALS: &[(&str, &[Piece])] = &[
    ("live_bytes", &[Term("live", "live"), Words(" memory")]),
    ("live_count", &[Term("live", "live"), Words(" allocations")]),
    ("peak_live_bytes", &[Words("peak "), Term("live", "live"), Words(" memory")]),
    ("alloc_count", &[Words("allocations made")]),
    ("free_count", &[Words("frees")]),
    ("failed_count", &[Words("failed allocations")]),
];

/// The columns of the diff page's table of the sites that changed.
const DIFF_COLUMNS: &[&[Piece]] = &[
    &[Words("status")],
    &[Term("site", "site"), Words(" (first user frame)")],
    &[Words("old "), Term("live", "live")],
    &[],
    &[Words("new "), Term("live", "live")],
    &[],
    &[Words("growth")],
];

/// A label as the page reads it: an array of strings and `{"term", "shown"}` objects.
fn label(pieces: &[Piece]) -> Value {
    Value::Array(
        pieces
            .iter()
            .map(|p| match p {
                Words(w) => json!(w),
                Term(word, shown) => json!({ "term": word, "shown": shown }),
            })
            .collect(),
    )
}

/// A side of a diff (its document's `old` or `new`) in words, as the page's heading names it:
/// `pid 7 snapshot 1 "half" (10.000 s)`, `pid 7 exit (12.500 s)`; a snapshot with a label is
/// named with it, as `gpushim diff`'s text names it ([`crate::report::words::snapshot_name`]).
fn diff_side(r: &Value) -> String {
    let what = match r["snapshot"].as_u64().and_then(|n| u32::try_from(n).ok()) {
        Some(n) => crate::report::words::snapshot_name(n, r["label"].as_str()),
        None => r["reason"].as_str().unwrap_or("?").to_string(),
    };
    format!("pid {} {what} ({:.3} s)", r["pid"].as_u64().unwrap_or(0), r["duration_s"].as_f64().unwrap_or(0.0))
}

/// The data block of a diff's page: the diff's document with the glossary
/// ([`super::glossary::page_terms`]), the page's `labels`: the totals' rows (`[field, label]`)
/// and the sites table's columns, in words, and `sides`: the old and the new report in words
/// ([`diff_side`]).
pub fn diff_page_data(diff: &Value) -> Value {
    let mut v = diff.clone();
    if let Some(o) = v.as_object_mut() {
        o.insert("sides".into(), json!({ "old": diff_side(&diff["old"]), "new": diff_side(&diff["new"]) }));
        o.insert("glossary".into(), super::glossary::page_terms());
        let totals: Vec<Value> = DIFF_TOTALS.iter().map(|(field, l)| json!([field, label(l)])).collect();
        let columns: Vec<Value> = DIFF_COLUMNS.iter().map(|l| label(l)).collect();
        o.insert("labels".into(), json!({ "totals": totals, "columns": columns }));
    }
    v
}

/// Writes the page of a diff: `diff` is the document of `gpushim diff --format json`.
///
/// # Errors
/// Only errors of `out`.
pub fn diff_page(diff: &Value, out: &mut dyn Write) -> io::Result<()> {
    let title = format!(
        "gpushim diff: pid {} \u{2192} pid {}",
        diff["old"]["pid"].as_u64().unwrap_or(0),
        diff["new"]["pid"].as_u64().unwrap_or(0)
    );
    page(out, &title, &diff_page_data(diff), DIFF_JS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::{render, sample};

    #[test]
    fn page_is_self_contained_and_holds_the_data() {
        let mut r = sample();
        r.command = vec!["./app".into(), "</script><b>".into()];
        let html = render(&Html, &r);
        assert!(html.starts_with("<!DOCTYPE html>"));
        // No reference to anything outside the page.
        for outside in ["src=\"http", "href=\"http", "<link", "src=\"//", "@import"] {
            assert!(!html.contains(outside), "{outside}");
        }
        assert!(html.contains("uPlot") && html.contains("flamegraph"));
        // The data block parses back, and a `</script>` in the data cannot end it early.
        let start = html.find("id=\"data\">").unwrap() + "id=\"data\">".len();
        let end = start + html[start..].find("</script>").unwrap();
        let data: Value = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(data["program"], "./app </script><b>");
        assert_eq!(data["sites"][0]["label"], "render_frame (app+0x200)");
        assert_eq!(data["sites"][0]["live_bytes"], 3 << 20);
        assert_eq!(data["sites"][0]["series"].as_array().unwrap().len(), 3, "a suspect keeps its series");
        assert!(data["sites"][0]["frames"][0].get("address").is_none());
        assert_eq!(data["suspects"][0]["site"], 1);
        assert_eq!(data["timeline"]["points"].as_array().unwrap().len(), 3);
        assert_eq!(data["glossary"], super::super::glossary::page_terms());
        // The score as the text report writes it, and no scan's lines without a scan.
        assert_eq!(data["suspects"][0]["score_text"], "1.00");
        assert_eq!(data["scan_lines"], json!([]));
        let mut r = sample();
        r.reachability = Some(crate::report::Reachability {
            status: "complete".into(),
            definitely_lost_count: 2,
            definitely_lost_bytes: 2 << 20,
            ..Default::default()
        });
        let data = page_data(&r);
        assert_eq!(data["scan_lines"], json!(super::super::text::scan_lines(&r)));
        assert!(data["scan_lines"][0].as_str().unwrap().starts_with("reachability scan complete: 2 lost, "));
        assert_eq!(data["reachability"]["definitely_lost_bytes"], 2 << 20, "the page's definitely lost card reads it");
    }

    /// The JSON in the page's data block, and the page without it.
    fn split_page(html: &str) -> (Value, String) {
        let start = html.find("id=\"data\">").unwrap() + "id=\"data\">".len();
        let end = start + html[start..].find("</script>").unwrap();
        (serde_json::from_str(&html[start..end]).unwrap(), format!("{}{}", &html[..start], &html[end..]))
    }

    /// The site of the allocations recorded without a backtrace (id `NO_STACK`, 4294967295) is
    /// shown as a dash that says why as its tooltip; the number is only in the data, as in the
    /// JSON report.
    #[test]
    fn the_site_without_backtrace_is_a_dash_with_a_tooltip() {
        let r = sample();
        assert_eq!(r.sites[2].id, gpushim_wire::NO_STACK);
        let (data, rest) = split_page(&render(&Html, &r));
        let bare = &data["sites"][2];
        assert_eq!(bare["id"], 4_294_967_295u64, "the data keeps the report's id");
        assert_eq!(bare["name"], "\u{2014}");
        assert_eq!(bare["no_backtrace"], "no backtrace was recorded for these allocations");
        assert_eq!(bare["label"], "(no backtrace)");
        assert_eq!(data["sites"][0]["name"], "1");
        assert!(data["sites"][0].get("no_backtrace").is_none());
        assert!(!rest.contains("4294967295"), "the page's scripts name no site by the sentinel");
    }

    /// The diff page's heading names a labelled snapshot with its label, as the text does: the
    /// API's snapshot 1 "half" and `gpushim top`'s snapshot 1 "top" read apart.
    #[test]
    fn the_diff_pages_sides_name_a_snapshots_label() {
        let mut old = sample();
        (old.reason, old.snapshot, old.label, old.duration_s) =
            (crate::report::Reason::Snapshot, Some(1), Some("half".into()), 10.0);
        let mut new = old.clone();
        (new.label, new.duration_s) = (Some("top".into()), 17.0);
        let mut doc = Vec::new();
        crate::compare::diff::diff_json(&old, &new, 10, &mut doc).unwrap();
        let data = diff_page_data(&serde_json::from_slice(&doc).unwrap());
        assert_eq!(
            data["sides"],
            json!({ "old": "pid 1234 snapshot 1 \"half\" (10.000 s)", "new": "pid 1234 snapshot 1 \"top\" (17.000 s)" })
        );
    }

    /// The words of the diff page have the glossary's meanings as tooltips: the glossary comes
    /// with the data, every glossary word the page places is one of the glossary, and every row
    /// of the totals is labelled in words, not by its JSON field.
    #[test]
    fn the_diff_page_has_the_glossary_tooltips_and_labels_in_words() {
        let old = sample();
        let mut new = sample();
        new.pid = 1235;
        new.sites[0].live_bytes += 1 << 20;
        new.totals.gauge.live_bytes += 1 << 20;
        let mut doc = Vec::new();
        crate::compare::diff::diff_json(&old, &new, 10, &mut doc).unwrap();
        let doc: Value = serde_json::from_slice(&doc).unwrap();
        let mut html = Vec::new();
        diff_page(&doc, &mut html).unwrap();
        let (data, rest) = split_page(&String::from_utf8(html).unwrap());
        assert!(rest.contains("<title>gpushim diff: pid 1234 \u{2192} pid 1235</title>"));
        // The heading's sides, as the script shows them.
        assert_eq!(data["sides"]["old"], format!("pid 1234 exit ({:.3} s)", old.duration_s));
        assert!(rest.contains("D.sides.old") && rest.contains("D.sides.new"));
        // terms.js, which makes the tooltips, comes before the diff's script.
        let (terms, diff) =
            (rest.find("function gpushimTerms(").unwrap(), rest.find("gpushimTerms(D.glossary").unwrap());
        assert!(terms < diff);
        assert_eq!(data["glossary"], super::super::glossary::page_terms());
        let words: Vec<&str> = super::super::glossary::GLOSSARY.iter().map(|t| t.word).collect();
        let plain = |w: &str| w.replace('`', "");
        let is_word = |w: &str| words.iter().any(|g| plain(g) == w);

        // A label's text, and the glossary words it shows.
        let read = |l: &Value| -> (String, Vec<String>) {
            let (mut text, mut used) = (String::new(), Vec::new());
            for p in l.as_array().unwrap() {
                match p.as_str() {
                    Some(w) => text.push_str(w),
                    None => {
                        text.push_str(p["shown"].as_str().unwrap());
                        used.push(p["term"].as_str().unwrap().to_string());
                    }
                }
            }
            (text, used)
        };
        let mut used = Vec::new();
        let fields: Vec<&String> = doc["totals"].as_object().unwrap().keys().collect();
        assert_eq!(fields.len(), 6);
        let rows = data["labels"]["totals"].as_array().unwrap();
        let mut labels = Vec::new();
        for field in fields {
            let row = rows.iter().find(|r| r[0] == **field).unwrap_or_else(|| panic!("no label for {field}"));
            let (text, terms) = read(&row[1]);
            assert!(!text.is_empty() && !text.contains('_') && text != *field, "{field}: {text}");
            labels.push(text);
            used.extend(terms);
        }
        labels.sort();
        assert_eq!(
            labels,
            ["allocations made", "failed allocations", "frees", "live allocations", "live memory", "peak live memory"]
        );
        let columns: Vec<(String, Vec<String>)> =
            data["labels"]["columns"].as_array().unwrap().iter().map(read).collect();
        let heads: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(heads, ["status", "site (first user frame)", "old live", "", "new live", "", "growth"]);
        used.extend(columns.into_iter().flat_map(|c| c.1));
        // The words the script places itself: `term("word", ...)`.
        used.extend(DIFF_JS.split("term(\"").skip(1).map(|t| t[..t.find('"').unwrap()].to_string()));
        for w in &used {
            assert!(is_word(w), "{w:?} is not a word of the glossary: the page would show it without a tooltip");
        }
        for w in ["site", "live", "holders, held by:"] {
            assert!(used.iter().any(|u| u == w), "the diff page does not explain {w:?}");
        }
        // The script labels no row by a JSON field's name: its labels are the data's.
        for field in doc["totals"].as_object().unwrap().keys() {
            assert!(!DIFF_JS.contains(&format!("\"{field}\"")) && !DIFF_JS.contains(&format!("{field}:")), "{field}");
        }
    }

    /// A site's series thinned by the collector may miss the site's last change (its last point
    /// says 2 MiB, the site ends with 3 MiB): the chart's series ends with the live bytes at the
    /// report's end, the number the suspect's card gives, and the timeline reaches that moment.
    #[test]
    fn a_charted_series_ends_with_the_live_bytes_at_the_reports_end() {
        let mut r = sample();
        r.duration_s = 1.5;
        r.sites[0].series = vec![(0.0, 1 << 20), (0.5, 2 << 20)];
        assert_eq!(r.sites[0].live_bytes, 3 << 20);
        assert_eq!(r.suspects[0].live_bytes, 3 << 20);
        let data = page_data(&r);
        assert_eq!(data["sites"][0]["series"], json!([[0.0, 1 << 20], [0.5, 2 << 20], [1.5, 3 << 20]]));
        let points = data["timeline"]["points"].as_array().unwrap();
        assert_eq!(points.len(), 4);
        assert_eq!(points[3], json!({"t_s": 1.5, "kinds": [3 << 20, 0, 0], "devices": [2 << 20, 1 << 20]}));
        // A series that already ends with the live bytes is kept as it is, and the timeline is
        // not lengthened when its last point is the report's end.
        let mut r = sample();
        r.duration_s = 1.000_002;
        let data = page_data(&r);
        assert_eq!(data["sites"][0]["series"], json!([[0.0, 1 << 20], [0.5, 2 << 20], [1.0, 3 << 20]]));
        assert_eq!(data["timeline"]["points"].as_array().unwrap().len(), 3);
        // A long series is cut to MAX_SERIES_POINTS with its first point and the end kept.
        let mut site = r.sites[0].clone();
        site.series = (0..256u64).map(|i| (i as f64 / 256.0, i << 20)).collect();
        site.live_bytes = 300 << 20;
        let cut = chart_series(&site, 2.0);
        assert_eq!(cut.len(), MAX_SERIES_POINTS);
        assert_eq!((cut[0], cut[MAX_SERIES_POINTS - 1]), ((0.0, 0), (2.0, 300 << 20)));
    }

    /// A suspect of the sites of one line gets the holder lines the text report gives it: every
    /// member site's, each headed by its site.
    #[test]
    fn a_union_suspect_has_the_holder_lines_of_the_text_report() {
        let mut r = sample();
        crate::render::tests::union_with_holders(&mut r);
        let data = page_data(&r);
        let lines = [
            "site 1: Python objects hold all 3.0 MiB live (3 objects, 3.0 MiB)",
            "held by: train.py global 'history' \u{2192} 3 objects",
            "site 5: Python objects hold all 1.0 MiB live (2 objects, 1.0 MiB)",
            "held by: train.py global 'cache' \u{2192} 2 objects",
        ];
        assert_eq!(data["suspects"][0]["holder_lines"], json!(lines));
        let text = render(&super::super::text::Text(crate::render::TextOptions::default()), &r);
        for l in lines {
            assert!(text.contains(&format!("      {l}\n")), "the text report says {l:?}: {text}");
        }
        // Without a heap walk, no lines.
        assert_eq!(page_data(&sample())["suspects"][0]["holder_lines"], json!([]));
    }

    /// A frame's file is named by its directory and its name, as the text report names it; the
    /// data keeps the full path.
    #[test]
    fn frames_name_their_file_by_its_directory_and_its_name() {
        let mut r = sample();
        r.sites[0].frames[1].file = Some("/home/u/proj/render.cu".into());
        r.sites[0].frames[1].line = Some(57);
        let data = page_data(&r);
        let frame = &data["sites"][0]["frames"][1];
        assert_eq!(frame["file"], "/home/u/proj/render.cu");
        assert_eq!(frame["file_name"], "proj/render.cu");
        assert_eq!(frame_label(&r.sites[0].frames[1]), "render_frame (proj/render.cu:57)");
        assert!(data["sites"][0]["frames"][0].get("file_name").is_none(), "a frame without a file has none");
    }

    #[test]
    fn timeline_is_cut_keeping_peaks_and_the_end() {
        let points: Vec<TimelinePoint> = (0..5000u64)
            .map(|i| TimelinePoint {
                t_s: i as f64,
                kinds: [if i == 1234 { 1 << 40 } else { i }, 0, 0],
                devices: vec![i],
            })
            .collect();
        let t = downsample(&Timeline { devices: vec![0], points });
        assert_eq!(t.points.len(), MAX_TIMELINE_POINTS);
        assert!(t.points.iter().any(|p| p.kinds[0] == 1 << 40), "the peak stays");
        assert_eq!(t.points.last().unwrap().t_s, 4999.0);
        assert!(t.points.windows(2).all(|w| w[0].t_s < w[1].t_s));
        assert_eq!(spread(256, 128).len(), 128);
        assert_eq!(spread(3, 128), [0, 1, 2]);
    }
}
