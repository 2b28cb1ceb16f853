//! How reports are laid out as JSON: indented like serde_json's pretty printer, except that an
//! array whose first element is a number, string, boolean or null stays on one line
//! (`"series": [\n [0.01, 1048576],\n …]`, `"apis": ["cudaMalloc"]`). A report with a
//! thousand sites of 256-point series is then less than half the size, and easier to read.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::{Formatter, Serializer};

/// Writes `value` to `out` in the layout above, without a trailing newline.
///
/// # Errors
/// Errors of `out`, or of serializing `value`.
pub fn to_writer<T: Serialize + ?Sized>(out: &mut dyn Write, value: &T) -> io::Result<()> {
    let mut ser = Serializer::with_formatter(out, Layout::default());
    value.serialize(&mut ser).map_err(io::Error::from)
}

/// The layout of one open array or object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    /// An array whose first element has not been seen yet.
    Array,
    /// An array of scalars, on one line.
    Flat,
    /// An array of arrays or objects, one element per line.
    Tall,
    /// An object, one member per line.
    Object { empty: bool },
}

/// The formatter behind [`to_writer`].
#[derive(Debug, Default)]
struct Layout {
    open: Vec<Open>,
    /// An array's first element is about to be written; its kind decides the array's layout.
    first_pending: bool,
}

impl Layout {
    fn newline<W: ?Sized + Write>(w: &mut W, depth: usize) -> io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..depth {
            w.write_all(b"  ")?;
        }
        Ok(())
    }

    /// Called before any value: settles the enclosing array's layout at its first element.
    fn value<W: ?Sized + Write>(&mut self, w: &mut W, scalar: bool) -> io::Result<()> {
        if !std::mem::take(&mut self.first_pending) {
            return Ok(());
        }
        let depth = self.open.len();
        if let Some(top) = self.open.last_mut() {
            if scalar {
                *top = Open::Flat;
            } else {
                *top = Open::Tall;
                Layout::newline(w, depth)?;
            }
        }
        Ok(())
    }
}

macro_rules! scalar {
    ($($name:ident: $t:ty),*) => {$(
        fn $name<W: ?Sized + Write>(&mut self, w: &mut W, v: $t) -> io::Result<()> {
            self.value(w, true)?;
            serde_json::ser::CompactFormatter.$name(w, v)
        }
    )*};
}

impl Formatter for Layout {
    scalar!(write_bool: bool, write_i8: i8, write_i16: i16, write_i32: i32, write_i64: i64,
            write_i128: i128, write_u8: u8, write_u16: u16, write_u32: u32, write_u64: u64,
            write_u128: u128, write_f32: f32, write_f64: f64, write_number_str: &str);

    fn write_null<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.value(w, true)?;
        w.write_all(b"null")
    }

    fn begin_string<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.value(w, true)?;
        w.write_all(b"\"")
    }

    fn write_byte_array<W: ?Sized + Write>(&mut self, w: &mut W, v: &[u8]) -> io::Result<()> {
        self.value(w, false)?;
        serde_json::ser::CompactFormatter.write_byte_array(w, v)
    }

    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.value(w, false)?;
        self.open.push(Open::Array);
        w.write_all(b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.first_pending = false;
        let top = self.open.pop();
        if top == Some(Open::Tall) {
            Layout::newline(w, self.open.len())?;
        }
        w.write_all(b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            self.first_pending = true;
            return Ok(());
        }
        match self.open.last() {
            Some(Open::Tall) => {
                w.write_all(b",")?;
                Layout::newline(w, self.open.len())
            }
            _ => w.write_all(b", "),
        }
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.value(w, false)?;
        self.open.push(Open::Object { empty: true });
        w.write_all(b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        let top = self.open.pop();
        if top == Some(Open::Object { empty: false }) {
            Layout::newline(w, self.open.len())?;
        }
        w.write_all(b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if let Some(top) = self.open.last_mut() {
            *top = Open::Object { empty: false };
        }
        if !first {
            w.write_all(b",")?;
        }
        Layout::newline(w, self.open.len())
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: &serde_json::Value) -> String {
        let mut out = Vec::new();
        to_writer(&mut out, v).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn scalar_arrays_stay_on_one_line() {
        let v = json!({
            "a": [1, 2.5, "x\"y", null, true],
            "series": [[0.5, 7], [1.0, 8]],
            "empty": [], "none": {},
            "objs": [{"k": 1}, {"k": [2]}],
            "nested": {"deep": {"z": -3}}
        });
        let t = text(&v);
        assert_eq!(
            t,
            "{\n  \"a\": [1, 2.5, \"x\\\"y\", null, true],\n  \"empty\": [],\n  \"nested\": {\n    \"deep\": {\n      \"z\": -3\n    }\n  },\n  \"none\": {},\n  \"objs\": [\n    {\n      \"k\": 1\n    },\n    {\n      \"k\": [2]\n    }\n  ],\n  \"series\": [\n    [0.5, 7],\n    [1.0, 8]\n  ]\n}"
        );
        let back: serde_json::Value = serde_json::from_str(&t).unwrap();
        assert_eq!(back, v);
        assert_eq!(text(&json!([])), "[]");
        assert_eq!(text(&json!(5)), "5");
        assert_eq!(text(&json!([[]])), "[\n  []\n]");
    }
}
