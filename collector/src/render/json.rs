//! The JSON format: the report itself, in the layout the collector writes it in.

use std::io::{self, Write};

use super::Render;
use crate::report::Report;

/// The report as pretty-printed JSON (the same document the collector writes).
pub struct Json;

impl Render for Json {
    fn render(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        crate::report::json::to_writer(out, report)?;
        writeln!(out)
    }
}
