//! `gpushim report FILE`: prints a report for a person, as JSON, as folded stacks, as a flame
//! graph (SVG), as a Perfetto trace, as an HTML page or as a PyTorch memory snapshot (pickle), on
//! standard output or into a file.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use super::{read_report, write_output};
use crate::render::format::{renderer, Format};
use crate::render::TextOptions;

/// Reads the report `file` (standard input for `-`) and writes it in `format` (with `opts` for the text, folded and SVG
/// formats) into `output`, created or truncated, or on standard output if `None`.
///
/// # Errors
/// If the report cannot be read, or the output cannot be created or written; the message names
/// the file.
pub fn run(file: &Path, format: Format, output: Option<&Path>, opts: TextOptions) -> Result<ExitCode> {
    if file.is_dir() {
        return job(file, format, output);
    }
    let report = read_report(file)?;
    let renderer = renderer(format, opts);
    write_output(output, &mut |out| renderer.render(&report, out))?;
    Ok(ExitCode::SUCCESS)
}

/// `gpushim report DIR`: the job view of every final report in `DIR` ([`crate::compare::job`]), as text
/// or JSON.
///
/// # Errors
/// Exit code 2 for another format, or a directory without a final report; those of
/// [`write_output`].
fn job(dir: &Path, format: Format, output: Option<&Path>) -> Result<ExitCode> {
    let write: fn(&crate::compare::job::JobView, &mut dyn std::io::Write) -> std::io::Result<()> = match format {
        Format::Text => crate::compare::job::write_text,
        Format::Json => crate::compare::job::write_json,
        _ => {
            return Err(crate::error::coded(
                crate::error::USAGE,
                format!("{}: a directory (the job view) is shown as text or json only", dir.display()),
            ))
        }
    };
    let (reports, unread) = crate::compare::job::read_dir(dir)?;
    let mut view = crate::compare::job::build(&reports);
    for u in &unread {
        eprintln!("gpushim: cannot read report {}: {}; the job view is of the other reports", u.file, u.why);
    }
    view.unread = unread;
    write_output(output, &mut |out| write(&view, out))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::diff;
    use crate::report::output::tests::TempDir;
    use clap::ValueEnum;

    /// `gpushim report FILE --format F -o OUT` for every format, and `gpushim diff --format
    /// json`, in-process on a small report (that the command line reaches these with those
    /// values is tested with the command line, in main.rs).
    #[test]
    fn report_formats_and_diff_write_files() {
        let d = TempDir::new("cli");
        let file = d.0.join("gpushim-1234.json");
        let r = crate::render::tests::sample();
        std::fs::write(&file, serde_json::to_vec(&r).unwrap()).unwrap();
        let out = |name: &str| d.0.join(name);
        for (format, name, want) in [
            ("text", "r.txt", "leak suspects:"),
            ("json", "r.json", "\"schema\": \"gpushim.report.v1\""),
            ("folded", "r.folded", "main;render_frame 4194304\n"),
            ("svg", "r.svg", "<svg"),
            ("perfetto", "r.trace.json", "\"traceEvents\""),
            ("html", "r.html", "<!DOCTYPE html>"),
        ] {
            let o = out(name);
            run(&file, Format::from_str(format, false).unwrap(), Some(&o), TextOptions::default()).unwrap();
            let text = std::fs::read_to_string(&o).unwrap();
            assert!(text.contains(want), "{format}: {text}");
        }
        let o = out("diff.json");
        let mut grown = r.clone();
        grown.sites[0].live_bytes *= 2;
        // Diff writes to stdout; check its JSON through the library call instead.
        let mut buf = Vec::new();
        diff::diff_json(&r, &grown, 20, &mut buf).unwrap();
        std::fs::write(&o, &buf).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["sites"][0]["growth_bytes"], 3 << 20);
        // A file that cannot be created is an error naming it.
        let bad = d.0.join("no/such/dir/x.svg");
        let e = run(&file, Format::Svg, Some(&bad), TextOptions::default()).unwrap_err();
        assert!(format!("{e:#}").starts_with(&format!("cannot create {}", bad.display())), "{e:#}");
    }
}
