//! Wording shared by everything the collector says to a person: sizes, durations and periods,
//! counts, command lines, frame labels, and the frame a site is best named by. The text and
//! Perfetto formats, the collector's stderr summary, the suspects' reasons and `gpushim diff`
//! all say these things the same way through this module.

use std::borrow::Cow;

use crate::report::{Frame, Site};

/// The site's id as a report shows it (see [`site_id_name`]).
pub fn site_name(s: &Site) -> String {
    site_id_name(s.id)
}

/// How a site id reads in a report: its number, or for the allocations recorded without a
/// backtrace (`GPUSHIM_BACKTRACE=0`, or a stack the shim does not walk), which share the
/// id `NO_STACK`, a phrase in place of that number.
pub fn site_id_name(id: u32) -> String {
    if id == gpushim_wire::NO_STACK {
        "without backtrace".to_string()
    } else {
        id.to_string()
    }
}

/// The innermost frame that is the user's code (not internal), else the innermost frame.
pub fn first_user_frame(site: &Site) -> Option<&Frame> {
    site.frames.iter().find(|f| !f.internal).or(site.frames.first())
}

/// A frame for a person: `function (file:line)`, `function (module+0xoffset)`,
/// `module+0xoffset`, or the bare address. Control characters (names come from the traced
/// program's files: an escape sequence could drive the terminal) are shown as `?`.
pub fn frame_label(f: &Frame) -> String {
    frame_label_raw(f).chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

fn frame_label_raw(f: &Frame) -> String {
    if let Some(cell) = &f.cell {
        return format!("{} ({cell})", f.function);
    }
    let place = match (&f.file, f.line) {
        (Some(file), Some(line)) => Some(format!("{}:{line}", short_path(file))),
        (Some(file), None) => Some(short_path(file).into_owned()),
        _ if !f.module.is_empty() => Some(format!("{}+{}", f.module_name(), f.offset.as_deref().unwrap_or(&f.address))),
        _ => None,
    };
    match (f.function.as_str(), place) {
        ("??", Some(p)) if f.file.is_none() => p,
        (func, Some(p)) => format!("{func} ({p})"),
        ("??", None) => f.address.clone(),
        (func, None) => format!("{func} ({})", f.address),
    }
}

/// How a report names a file, in a frame and in a holder alike (`ws4/train.py:66`, `ws4/train.py
/// global 'history'`, `function 'main' (ws4/train.py:57) local 'model'`): by its directory and
/// its name, the last two components of the path once `.` and `..` are taken out
/// ([`normal_path`]; CPython names a script started as `python3 ../train.py` by
/// `/home/u/ws4/sub/../train.py`). A Python file's relative path is first made absolute
/// against the program's working directory ([`resolve_path`], when the collector reads it), so
/// that one file reads the same however the program was started.
pub fn short_path(p: &str) -> Cow<'_, str> {
    let p = normal_path(p);
    match p.rmatch_indices('/').nth(1) {
        Some((i, _)) => match p {
            Cow::Borrowed(b) => Cow::Borrowed(&b[i + 1..]),
            Cow::Owned(o) => Cow::Owned(o[i + 1..].to_string()),
        },
        None => p,
    }
}

/// `p` without its `.` components and with each `..` taking out the component before it
/// (lexically, as Python's `os.path.normpath` does; a `..` at the start of a relative path,
/// or after the root, stays), and without repeated or trailing slashes; `p` itself when there
/// is nothing to take out.
pub fn normal_path(p: &str) -> Cow<'_, str> {
    let absolute = p.starts_with('/');
    let parts: Vec<&str> = p.split('/').collect();
    let clean =
        parts.iter().enumerate().all(|(i, c)| *c != "." && *c != ".." && (!c.is_empty() || (i == 0 && absolute)));
    if clean {
        return Cow::Borrowed(p);
    }
    let mut out: Vec<&str> = Vec::new();
    for c in parts {
        match c {
            "" | "." => {}
            ".." => match out.last() {
                Some(&last) if last != ".." => {
                    out.pop();
                }
                _ if absolute => {}
                _ => out.push(".."),
            },
            c => out.push(c),
        }
    }
    let joined = out.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => Cow::Owned(format!("/{joined}")),
        (false, true) => Cow::Borrowed("."),
        (false, false) => Cow::Owned(joined),
    }
}

/// A Python file's path as the report keeps it: a relative one (`co_filename` of a script
/// started as `python3 sub/train.py` before Python 3.9, `__file__` of a module imported
/// relatively) joined to `cwd`, the program's working directory when tracing started (Hello's
/// `cwd`), when that is absolute; then [`normal_path`]. A name in angle brackets (`<stdin>`,
/// `<frozen importlib._bootstrap>`) is no path and is kept.
pub fn resolve_path(file: &str, cwd: &str) -> String {
    if file.starts_with('<') {
        return file.to_string();
    }
    if !file.starts_with('/') && cwd.starts_with('/') && !file.is_empty() {
        return normal_path(&format!("{cwd}/{file}")).into_owned();
    }
    normal_path(file).into_owned()
}

/// A command line for display, arguments with spaces quoted.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"\\$`".contains(c)) {
                format!("'{}'", a.replace('\'', r"'\''"))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A size of `n` bytes for a person: `512 B`, `1.5 KiB`, `14.0 MiB`, `2.3 GiB`. A tenth exactly
/// half-way rounds up (232.25 MiB is `232.3 MiB`), as the HTML page's `toFixed(1)` does, so that
/// the text, stderr and the page print one figure for one value: `n` over a power of 1024, times
/// ten, is exact below 2^50 bytes, so `round` sees the true value.
pub fn fmt_bytes(n: u64) -> String {
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < 4 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{:.1} {}", (v * 10.0).round() / 10.0, ["B", "KiB", "MiB", "GiB", "TiB"][unit])
}

/// A signed size difference of `d` bytes: `+1.0 MiB`, `-512 B`, `0 B`.
pub fn fmt_bytes_delta(d: i128) -> String {
    let mag = fmt_bytes(u64::try_from(d.unsigned_abs()).unwrap_or(u64::MAX));
    match d.signum() {
        1 => format!("+{mag}"),
        -1 => format!("-{mag}"),
        _ => mag,
    }
}

/// The change from `a` to `b` bytes, as a person reads it beside `fmt_bytes(a) -> fmt_bytes(b)`:
/// when both are said in one unit, the difference of the two numbers shown (`142.8 MiB -> 330.5
/// MiB` is `+187.7 MiB`, not the exact `+187.8 MiB`, so that the line adds up); else the exact
/// change, as [`fmt_bytes_delta`].
pub fn fmt_bytes_change(a: u64, b: u64) -> String {
    if a == b {
        return "0 B".to_string();
    }
    let (sa, sb) = (fmt_bytes(a), fmt_bytes(b));
    let shown = |s: &str| -> Option<(i64, String)> {
        let (num, unit) = s.split_once(' ')?;
        let (whole, tenth) = num.split_once('.')?;
        Some((whole.parse::<i64>().ok()? * 10 + tenth.parse::<i64>().ok()?, unit.to_string()))
    };
    match (shown(&sa), shown(&sb)) {
        (Some((x, ua)), Some((y, ub))) if ua == ub => {
            let d = y - x;
            let sign = match d.signum() {
                1 => "+",
                -1 => "-",
                _ => "",
            };
            if d == 0 {
                // Equal as shown, not equal: the exact change, in the smaller unit it needs.
                return fmt_bytes_delta(i128::from(b) - i128::from(a));
            }
            format!("{sign}{}.{} {ua}", d.abs() / 10, d.abs() % 10)
        }
        _ => fmt_bytes_delta(i128::from(b) - i128::from(a)),
    }
}

/// A duration of `s` seconds for a person: `350 µs`, `870 ms`, `2.5 s`, `95 s`.
pub fn fmt_seconds(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return format!("{s} s");
    }
    if s >= 10.0 {
        format!("{s:.0} s")
    } else if s >= 1.0 {
        format!("{s:.1} s")
    } else if s >= 1e-3 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// The unit a period of `s` seconds is best said in: (seconds per unit, its name).
fn period_unit(s: f64) -> (f64, &'static str) {
    if s < 1e-3 {
        (1e-6, "µs")
    } else if s < 1.0 {
        (1e-3, "ms")
    } else if s < 120.0 {
        (1.0, "s")
    } else if s < 7200.0 {
        (60.0, "min")
    } else {
        (3600.0, "h")
    }
}

/// `s` seconds rounded to two significant digits in the unit [`fmt_period`] says it in (an
/// integer from 10 up): 0.01234 → 0.012, 1.234 → 1.2, 150 → 150.
fn round_period(s: f64) -> f64 {
    if !s.is_finite() || s <= 0.0 {
        return s;
    }
    let (unit, _) = period_unit(s);
    let v = s / unit;
    let r = if v >= 10.0 { v.round() } else { (v * 10.0).round() / 10.0 };
    r * unit
}

/// A period of `s` seconds for a person, with up to two significant digits: `350 µs`,
/// `1.5 ms`, `12 ms`, `2 s`, `95 s`, `2.5 min`, `3 h`.
pub fn fmt_period(s: f64) -> String {
    if !s.is_finite() || s <= 0.0 {
        return format!("{s} s");
    }
    let (unit, name) = period_unit(s);
    let v = round_period(s) / unit;
    if v >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0} {name}")
    } else {
        format!("{v:.1} {name}")
    }
}

/// `n` and `noun`, with an "s" unless `n` is 1: "1 allocation", "3 frees".
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A suspect's score for a person, the same in every format (the text report, the HTML page):
/// two decimals, `1.00`, `0.75`.
pub fn fmt_score(score: f64) -> String {
    format!("{score:.2}")
}

/// A snapshot's name: `snapshot 3`, followed by its label when it has one: `snapshot 1 "half"`
/// (the Python API's `gpushim.snapshot("half")`, file `…-snapshot-1-half.json`) and
/// `snapshot 1 "top"` (one `gpushim top` asked for, file `…-snapshot-top-1.json`, numbered
/// apart from the program's own): snapshots whose files differ by their label read apart.
pub fn snapshot_name(n: u32, label: Option<&str>) -> String {
    match label {
        Some(l) => format!("snapshot {n} \"{l}\""),
        None => format!("snapshot {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One file, three ways of starting the program: by absolute path, as `python3
    /// ../myleak2.py` from a subdirectory (CPython's `/home/u/proj/sub/../myleak2.py`), and a
    /// relative `co_filename` resolved against the working directory: one name.
    #[test]
    fn a_file_is_named_by_its_directory_and_its_name_however_it_was_reached() {
        assert_eq!(short_path("/home/u/proj/myleak2.py"), "proj/myleak2.py");
        assert_eq!(short_path("/home/u/proj/sub/../myleak2.py"), "proj/myleak2.py");
        assert_eq!(short_path(&resolve_path("../myleak2.py", "/home/u/proj/sub")), "proj/myleak2.py");
        assert_eq!(short_path(&resolve_path("./myleak2.py", "/home/u/proj")), "proj/myleak2.py");
        assert_eq!(short_path(&resolve_path("myleak2.py", "/home/u/proj")), "proj/myleak2.py");
        assert_eq!(resolve_path("/home/u/proj/./sub/../myleak2.py", "/elsewhere"), "/home/u/proj/myleak2.py");
        assert_eq!(resolve_path("../myleak2.py", ""), "../myleak2.py", "no working directory known");
        assert_eq!(resolve_path("<stdin>", "/home/u"), "<stdin>");
        assert_eq!(short_path("examples/leak.c"), "examples/leak.c");
        assert_eq!(short_path("leak.c"), "leak.c");
        assert_eq!(normal_path("/../a//b/"), "/a/b");
        assert_eq!(normal_path("../../a/./b"), "../../a/b");
        assert_eq!(normal_path("a/.."), ".");
        assert!(matches!(short_path("/home/u/ws4/train.py"), Cow::Borrowed("ws4/train.py")));
    }

    #[test]
    fn a_score_has_two_decimals() {
        assert_eq!(fmt_score(1.0), "1.00");
        assert_eq!(fmt_score(0.754), "0.75");
        assert_eq!(fmt_score(0.0), "0.00");
    }

    #[test]
    fn the_site_without_backtrace_has_a_name_not_a_number() {
        assert_eq!(site_id_name(7), "7");
        assert_eq!(site_id_name(gpushim_wire::NO_STACK), "without backtrace");
    }

    #[test]
    fn sizes_and_times() {
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(1536), "1.5 KiB");
        assert_eq!(fmt_bytes(14 << 20), "14.0 MiB");
        assert_eq!(fmt_bytes(3 << 30), "3.0 GiB");
        // Half-way tenths round up, as the page's toFixed(1) does.
        assert_eq!(fmt_bytes((232 << 20) + (256 << 10)), "232.3 MiB");
        assert_eq!(fmt_bytes(1280), "1.3 KiB");
        assert_eq!(fmt_bytes((1 << 20) + 52428), "1.0 MiB");
        assert_eq!(fmt_bytes(5 << 40), "5.0 TiB");
        assert_eq!(fmt_bytes_delta(-(1 << 20)), "-1.0 MiB");
        assert_eq!(fmt_bytes_delta(5), "+5 B");
        assert_eq!(fmt_bytes_delta(0), "0 B");
        // In one unit the change is that of the numbers shown, so the line adds up.
        let mib = |x: f64| (x * 1048576.0) as u64;
        assert_eq!((fmt_bytes(mib(142.76)), fmt_bytes(mib(330.54))), ("142.8 MiB".into(), "330.5 MiB".into()));
        assert_eq!(fmt_bytes_change(mib(142.76), mib(330.54)), "+187.7 MiB");
        assert_eq!(fmt_bytes_change(mib(76.8), mib(133.0)), "+56.2 MiB");
        assert_eq!(fmt_bytes_change(mib(10.0), mib(2.0)), "-8.0 MiB");
        assert_eq!(fmt_bytes_change(100, 700), "+600 B");
        assert_eq!(fmt_bytes_change(512, 4096), "+3.5 KiB");
        assert_eq!(fmt_bytes_change(mib(1.0), mib(1.0)), "0 B");
        assert_eq!(fmt_bytes_change(mib(1.0), mib(1.0) + 10), "+10 B");
        assert_eq!(fmt_seconds(0.3), "300 ms");
        assert_eq!(fmt_seconds(2.25), "2.2 s");
        assert_eq!(fmt_seconds(95.0), "95 s");
        for (s, want) in [
            (0.000_25, "250 µs"),
            (0.001_54, "1.5 ms"),
            (0.012_4, "12 ms"),
            (0.01, "10 ms"),
            (0.87, "870 ms"),
            (2.0, "2 s"),
            (2.04, "2 s"),
            (2.46, "2.5 s"),
            (95.0, "95 s"),
            (150.0, "2.5 min"),
            (7200.0, "2 h"),
        ] {
            assert_eq!(fmt_period(s), want, "{s}");
        }
        assert!((round_period(0.012_4) - 0.012).abs() < 1e-12);
    }

    #[test]
    fn frame_labels() {
        let mut f = Frame {
            function: "render_frame".into(),
            file: Some("/home/u/proj/src/target.c".into()),
            line: Some(42),
            module: "/home/u/proj/app".into(),
            address: "0x401234".into(),
            offset: Some("0x1234".into()),
            internal: false,
            inlined: false,
            python: false,
            class: Default::default(),
            cell: None,
        };
        assert_eq!(frame_label(&f), "render_frame (src/target.c:42)");
        // A notebook cell, named as the notebook names it (the magic writes `cell`).
        let py = Frame {
            function: "<module>".into(),
            file: Some("/tmp/ipykernel_4711/2849048635.py".into()),
            line: Some(2),
            python: true,
            cell: Some("In [4] line 2".into()),
            ..Frame::default()
        };
        assert_eq!(frame_label(&py), "<module> (In [4] line 2)");
        f.file = None;
        f.line = None;
        assert_eq!(frame_label(&f), "render_frame (app+0x1234)");
        f.function = "??".into();
        assert_eq!(frame_label(&f), "app+0x1234");
        f.module.clear();
        f.offset = None;
        assert_eq!(frame_label(&f), "0x401234");
        f.function = "evil\x1b]0;title\x07name".into();
        assert_eq!(frame_label(&f), "evil?]0;title?name (0x401234)");
        assert_eq!(shell_words(&["python".into(), "a b.py".into()]), "python 'a b.py'");
    }
}
