//! `gpushim diff OLD NEW`: reads two reports (and their heap walks' companion files, when there)
//! and prints which sites and which holders grew from one to the other, as text or JSON; the
//! comparison itself is [`crate::compare::diff`].

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use super::{read_report, write_output};
use crate::compare::diff::{self, DiffFormat};

/// Compares the reports `old` and `new` and writes up to `top` changed sites in `format` on
/// standard output; what looks wrong about the comparison ([`diff::warnings`]: two programs,
/// OLD newer than NEW) is said on standard error, one line each.
///
/// # Errors
/// If a report cannot be read (the message names it), or standard output cannot be written.
pub fn run(old: &Path, new: &Path, top: usize, format: DiffFormat) -> Result<ExitCode> {
    let a = read_report(old)?;
    let b = read_report(new)?;
    for w in diff::warnings(&a, &b) {
        eprintln!("gpushim: warning: {w}");
    }
    write_output(None, &mut |out| match format {
        DiffFormat::Text => diff::diff(&a, &b, top, out),
        DiffFormat::Json => diff::diff_json(&a, &b, top, out),
        DiffFormat::Html => {
            let mut json = Vec::new();
            diff::diff_json(&a, &b, top, &mut json)?;
            let doc: serde_json::Value = serde_json::from_slice(&json).map_err(std::io::Error::other)?;
            crate::render::html::diff_page(&doc, out)
        }
    })?;
    Ok(ExitCode::SUCCESS)
}
