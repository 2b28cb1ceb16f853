//! `gpushim diff OLD NEW`: reads two reports (and their heap walks' companion files, when there)
//! and prints which sites and which holders grew from one to the other, as text or JSON; the
//! comparison itself is [`crate::diff`].

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::write_output;
use crate::diff::{self, DiffFormat};
use crate::report::Report;

/// Compares the reports `old` and `new` and writes up to `top` changed sites in `format` on
/// standard output.
///
/// # Errors
/// If a report cannot be read (the message names it), or standard output cannot be written.
pub fn run(old: &Path, new: &Path, top: usize, format: DiffFormat) -> Result<ExitCode> {
    let mut a = Report::read(old).with_context(|| format!("cannot read report {}", old.display()))?;
    let mut b = Report::read(new).with_context(|| format!("cannot read report {}", new.display()))?;
    a.holders = crate::holders::read_beside(old)?;
    b.holders = crate::holders::read_beside(new)?;
    write_output(None, &mut |out| match format {
        DiffFormat::Text => diff::diff(&a, &b, top, out),
        DiffFormat::Json => diff::diff_json(&a, &b, top, out),
    })?;
    Ok(ExitCode::SUCCESS)
}
