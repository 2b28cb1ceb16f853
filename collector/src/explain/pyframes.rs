//! Python frames in reports: the code objects and Python stacks the shim sends (`PyRuntime`,
//! `PyCode`, `PyStack`), line numbers decoded from the copied line tables, and the merge of a
//! stack's Python frames into its native frames.
//!
//! Where Python frames go: each native call of the interpreter loop (`_PyEval_EvalFrameDefault`)
//! runs one or more Python frames (3.10: exactly one; 3.11+: a Python-to-Python call stays in
//! the same native call). The shim marks the outermost Python frame of each native call
//! (`PyFrame::entry`), which splits the Python frames into groups, innermost first. When the
//! native stack has as many `_PyEval_EvalFrameDefault` frames as there are groups, each of those
//! native frames is replaced by its group. Otherwise (a truncated stack, a custom frame
//! evaluator, stripped symbols) all Python frames go, innermost first, just before the innermost
//! `_PyEval_EvalFrameDefault` frame and every native frame stays; with no such frame they go
//! before the first frame of libpython (or at the end).

use std::collections::HashMap;

use gpushim_wire::{LineTableFormat, PyCode, PyFrame, PyStack, PY_NO_OFFSET};

use crate::report::Frame;

/// The value of [`Frame::module`] for Python frames.
pub const MODULE: &str = "python";

/// Native function of the interpreter loop (one call per group of Python frames).
const EVAL_FRAME: &str = "_PyEval_EvalFrameDefault";

/// True if and only if `filename` is not the user's Python code: a GPU framework's package, the
/// standard library (the table of `frames.rs`).
pub fn is_internal_file(filename: &str) -> bool {
    crate::explain::frames::Table::global().classify(filename, "") != crate::report::Class::User
}

struct Code {
    filename: String,
    name: String,
    firstlineno: i32,
    format: LineTableFormat,
    linetable: Vec<u8>,
    internal: bool,
}

/// The Python side of one stream.
#[derive(Default)]
pub struct Python {
    version: Option<u32>,
    codes: HashMap<u32, Code>,
    stacks: HashMap<u32, Vec<PyFrame>>,
    lines: HashMap<(u32, u32), Option<u32>>,
    /// The program's working directory (Hello's), against which a relative `co_filename` is
    /// read; empty when unknown.
    cwd: String,
}

impl Python {
    /// The target runs CPython `version` (`PY_VERSION_HEX`) and its frames are recorded.
    pub fn set_runtime(&mut self, version: u32) {
        self.version = Some(version);
    }

    /// True if and only if the stream said the target runs CPython ([`Python::set_runtime`]).
    pub fn has_runtime(&self) -> bool {
        self.version.is_some()
    }

    /// The program's working directory, which a relative file name is read against (Hello's
    /// `cwd`; [`crate::report::words::resolve_path`]).
    pub fn set_cwd(&mut self, cwd: &str) {
        self.cwd = cwd.to_string();
    }

    /// A Python file's path as the report keeps it: made absolute against the program's
    /// working directory and without `.` and `..` ([`crate::report::words::resolve_path`]), so
    /// that frames and holders name one file alike however the program was started.
    pub fn resolve(&self, file: &str) -> String {
        crate::report::words::resolve_path(file, &self.cwd)
    }

    /// Remembers a code object.
    pub fn add_code(&mut self, mut c: PyCode) {
        c.filename = self.resolve(&c.filename);
        let internal = is_internal_file(&c.filename);
        self.lines.retain(|&(id, _), _| id != c.id);
        self.codes.insert(
            c.id,
            Code {
                filename: c.filename,
                name: c.name,
                firstlineno: c.firstlineno,
                format: c.linetable_format,
                linetable: c.linetable,
                internal,
            },
        );
    }

    /// Remembers the Python frames of a stack.
    pub fn add_stack(&mut self, s: PyStack) {
        // A stream with Python stacks runs Python even if its PyRuntime event was lost.
        self.version.get_or_insert(0);
        self.stacks.insert(s.id, s.frames);
    }

    /// Forgets the Python frames of stack `id` (the collector evicted it).
    pub fn forget_stack(&mut self, id: u32) {
        self.stacks.remove(&id);
    }

    /// For a site's `python` field: `None` if the target runs no Python whose frames are
    /// recorded, else whether stack `id` has Python frames.
    pub fn site_flag(&self, id: u32) -> Option<bool> {
        self.version?;
        Some(self.stacks.get(&id).is_some_and(|f| !f.is_empty()))
    }

    /// The report frame of one Python frame.
    fn frame(&mut self, f: &PyFrame) -> Frame {
        let Some(c) = self.codes.get(&f.code) else {
            return Frame { function: "??".into(), module: MODULE.into(), python: true, ..Frame::default() };
        };
        let line = *self.lines.entry((f.code, f.offset)).or_insert_with(|| line_of(c, f.offset));
        Frame {
            function: c.name.clone(),
            file: Some(c.filename.clone()),
            line,
            module: MODULE.into(),
            address: String::new(),
            offset: None,
            internal: c.internal,
            inlined: false,
            python: true,
            class: Default::default(),
            cell: None,
        }
    }

    /// The report frame of a Python frame that PyTorch recorded for a block (`file`, `line`,
    /// `function`: `co_filename`, the line, `co_name`): named by the qualified name of the code
    /// object of this stream in that file that starts nearest above the line, when its name is
    /// `function` (PyTorch records `co_name`; the shim's frames give `co_qualname`), and
    /// classed as a frame of the stack would be ([`crate::explain::frames::mark`]).
    pub fn block_frame(&self, file: &str, line: u32, function: &str) -> Frame {
        let file = self.resolve(file);
        let file = file.as_str();
        // The code of this file that starts nearest above the line, whatever its name: when it
        // is another function (the block's own code was never seen), the recorded name stays.
        let qualname = self
            .codes
            .values()
            .filter(|c| c.filename == file && c.firstlineno <= line as i32)
            .max_by(|a, b| a.firstlineno.cmp(&b.firstlineno).then(b.name.cmp(&a.name)))
            .filter(|c| c.name == function || c.name.rsplit('.').next() == Some(function))
            .map(|c| c.name.clone());
        let mut f = Frame {
            function: qualname.unwrap_or_else(|| function.to_string()),
            file: Some(file.to_string()),
            line: Some(line),
            module: MODULE.into(),
            internal: is_internal_file(file),
            python: true,
            ..Frame::default()
        };
        crate::explain::frames::mark(std::slice::from_mut(&mut f));
        f
    }

    /// `native` (the symbolized frames of stack `id`, innermost first) with the stack's Python
    /// frames merged in (see the module docs); `native` unchanged if it has none. Native frames
    /// inner to the first Python frame of the user's own code (not a framework package) that
    /// belong to the interpreter, ctypes or a framework package are marked internal, so that
    /// the first frame shown is the user's Python line: with PyTorch, `nn.Module.__call__`
    /// runs through `_PyObject_Call_Prepend` between the model's frames.
    pub fn merge(&mut self, id: u32, native: Vec<Frame>) -> Vec<Frame> {
        let mut out = self.merge_frames(id, native);
        let first_user = out.iter().position(|f| f.python && !f.internal);
        if let Some(first) = first_user.or_else(|| out.iter().position(|f| f.python)) {
            for f in &mut out[..first] {
                f.internal |= is_interpreter_or_framework(&f.module);
            }
        }
        out
    }

    fn merge_frames(&mut self, id: u32, native: Vec<Frame>) -> Vec<Frame> {
        let Some(py) = self.stacks.get(&id).cloned() else {
            return native;
        };
        if py.is_empty() {
            return native;
        }
        // Groups of Python frames, one per native interpreter call, innermost first.
        let mut groups: Vec<Vec<Frame>> = vec![Vec::new()];
        for f in &py {
            let frame = self.frame(f);
            groups.last_mut().expect("never empty").push(frame);
            if f.entry {
                groups.push(Vec::new());
            }
        }
        if groups.last().is_some_and(Vec::is_empty) {
            groups.pop();
        }
        let evals: Vec<usize> = native.iter().enumerate().filter(|(_, f)| is_eval_frame(f)).map(|(i, _)| i).collect();
        if evals.len() == groups.len() {
            let mut out = Vec::with_capacity(native.len() + py.len());
            let mut groups = groups.into_iter();
            for f in native {
                if is_eval_frame(&f) {
                    out.extend(groups.next().expect("as many groups as interpreter frames"));
                } else {
                    out.push(f);
                }
            }
            return out;
        }
        let at = evals.first().copied().unwrap_or_else(|| {
            native.iter().position(|f| f.module_name().starts_with("libpython")).unwrap_or(native.len())
        });
        let mut out = native;
        out.splice(at..at, groups.into_iter().flatten());
        out
    }
}

/// True if and only if `module` is the Python interpreter (`python*` executable, `libpython*`),
/// ctypes' native parts (`_ctypes*`, `libffi*`) or a framework package's native library.
fn is_interpreter_or_framework(module: &str) -> bool {
    let name = module.rsplit('/').next().unwrap_or(module);
    ["python", "libpython", "_ctypes", "libffi"].iter().any(|p| name.starts_with(p)) || is_internal_file(module)
}

/// True if and only if `f` is a native frame of the interpreter loop (`.cold` parts included).
fn is_eval_frame(f: &Frame) -> bool {
    !f.python && f.function.strip_prefix(EVAL_FRAME).is_some_and(|r| r.is_empty() || r.starts_with('.'))
}

fn line_of(c: &Code, offset: u32) -> Option<u32> {
    match c.format {
        LineTableFormat::Pep626 => line_pep626(&c.linetable, c.firstlineno, offset),
        LineTableFormat::Pep657 => line_pep657(&c.linetable, c.firstlineno, offset),
    }
}

fn to_line(line: i64) -> Option<u32> {
    u32::try_from(line).ok()
}

/// The line of the instruction at byte `offset` from a CPython 3.10 line table (PEP 626,
/// `Objects/lnotab_notes.txt`): (start delta: unsigned byte, line delta: signed byte) pairs; each
/// pair ends a range of bytecode `[end, end + start delta)` and adds its line delta to the line
/// (starting at `firstlineno`), except a line delta of -128, which means the range has no line.
/// `None` for no line or an offset past the table; `firstlineno` for [`PY_NO_OFFSET`].
pub fn line_pep626(table: &[u8], firstlineno: i32, offset: u32) -> Option<u32> {
    if offset == PY_NO_OFFSET {
        return to_line(i64::from(firstlineno));
    }
    let off = u64::from(offset);
    let mut line = i64::from(firstlineno);
    let mut end = 0u64;
    for pair in table.chunks_exact(2) {
        let start = end;
        end += u64::from(pair[0]);
        let delta = pair[1] as i8;
        let here = if delta == -128 {
            None
        } else {
            line += i64::from(delta);
            Some(line)
        };
        if start <= off && off < end {
            return here.and_then(to_line);
        }
    }
    None
}

/// Reads a location-table varint at `*i`: 6-bit chunks, least significant first, bit 6 set on
/// every chunk but the last.
fn varint(t: &[u8], i: &mut usize) -> Option<u64> {
    let mut shift = 0u32;
    let mut v = 0u64;
    loop {
        let b = *t.get(*i)?;
        *i += 1;
        v |= u64::from(b & 63).checked_shl(shift)?;
        if b & 64 == 0 {
            return Some(v);
        }
        shift += 6;
        if shift > 60 {
            return None;
        }
    }
}

/// A signed varint: the unsigned value shifted left once, bit 0 the sign.
fn svarint(t: &[u8], i: &mut usize) -> Option<i64> {
    let v = varint(t, i)?;
    let m = (v >> 1) as i64;
    Some(if v & 1 != 0 { -m } else { m })
}

/// The line of the instruction at byte `offset` from a CPython 3.11+ location table (PEP 657,
/// `Objects/locations.md`). Each entry starts with a byte whose bit 7 is set, bits 3..6 the code
/// and bits 0..2 the number of 2-byte code units it covers, minus one. The line starts at
/// `firstlineno`; codes 0 to 9 (short forms) keep it; 10, 11, 12 (one-line forms) add 0, 1, 2;
/// 13 (no columns) and 14 (long form) add a signed varint that follows; 15 means no location
/// (no line, the line is kept for the next entry). The rest of an entry (columns) is skipped:
/// its bytes all have bit 7 clear. `None` for no line or an offset past the table;
/// `firstlineno` for [`PY_NO_OFFSET`].
pub fn line_pep657(table: &[u8], firstlineno: i32, offset: u32) -> Option<u32> {
    if offset == PY_NO_OFFSET {
        return to_line(i64::from(firstlineno));
    }
    let off = u64::from(offset);
    let mut line = i64::from(firstlineno);
    let mut start = 0u64;
    let mut i = 0usize;
    while i < table.len() {
        let head = table[i];
        if head & 0x80 == 0 {
            return None;
        }
        let code = (head >> 3) & 15;
        let end = start + 2 * (u64::from(head & 7) + 1);
        i += 1;
        let here = match code {
            15 => None,
            13 | 14 => {
                line += svarint(table, &mut i)?;
                Some(line)
            }
            10..=12 => {
                line += i64::from(code - 10);
                Some(line)
            }
            _ => Some(line),
        };
        if start <= off && off < end {
            return here.and_then(to_line);
        }
        while i < table.len() && table[i] & 0x80 == 0 {
            i += 1;
        }
        start = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pep626_ranges_and_no_line() {
        // firstlineno 10; (6, +1): [0, 6) line 11; (4, 0): [6, 10) line 11; (2, -128): [10, 12)
        // no line; (8, +2): [12, 20) line 13.
        let t = [6, 1, 4, 0, 2, 0x80, 8, 2];
        let want = [
            (0, Some(11)),
            (5, Some(11)),
            (6, Some(11)),
            (9, Some(11)),
            (10, None),
            (11, None),
            (12, Some(13)),
            (19, Some(13)),
            (20, None),
        ];
        for (off, line) in want {
            assert_eq!(line_pep626(&t, 10, off), line, "offset {off}");
        }
        assert_eq!(line_pep626(&t, 10, PY_NO_OFFSET), Some(10));
        // An empty range still moves the line: (0, +3) then (4, 0) is [0, 4) at line 4.
        assert_eq!(line_pep626(&[0, 3, 4, 0], 1, 2), Some(4));
        // Negative deltas (0xFE is -2) and long ranges split as (254, d), (n, 0).
        assert_eq!(line_pep626(&[2, 5, 2, 0xFE], 1, 2), Some(4));
        assert_eq!(line_pep626(&[254, 1, 10, 0], 1, 260), Some(2));
        assert_eq!(line_pep626(&[], 1, 0), None);
    }

    #[test]
    fn pep657_every_entry_kind() {
        #[rustfmt::skip]
        let t = [
            0xE9, 0x02,             // code 13, 2 units, line +1: [0, 4) line 6
            0x98, 0x12,             // code 3 (short form), 1 unit: [4, 6) line 6
            0xDA, 0x04, 0x09,       // code 11 (one line, +1), 3 units: [6, 12) line 7
            0xF8,                   // code 15 (no location), 1 unit: [12, 14) no line
            0xF0, 0x07, 0x00, 0x01, 0x05, // code 14 (long), line -3, 1 unit: [14, 16) line 4
            0xE8, 0x48, 0x03,       // code 13, line +100 (varint 200 = 8 | 3 << 6): [16, 18) line 104
            0xD0, 0x00, 0x03,       // code 10 (one line, +0), 1 unit: [18, 20) line 104
            0xE0, 0x00,             // code 12 (one line, +2), 1 unit ... payload cut short
        ];
        let want = [
            (0, Some(6)),
            (3, Some(6)),
            (4, Some(6)),
            (5, Some(6)),
            (6, Some(7)),
            (11, Some(7)),
            (12, None),
            (13, None),
            (14, Some(4)),
            (15, Some(4)),
            (16, Some(104)),
            (18, Some(104)),
            (20, Some(106)),
            (22, None),
        ];
        for (off, line) in want {
            assert_eq!(line_pep657(&t, 5, off), line, "offset {off}");
        }
        assert_eq!(line_pep657(&t, 5, PY_NO_OFFSET), Some(5));
        // A table that does not start with an entry byte is corrupt.
        assert_eq!(line_pep657(&[0x02, 0xE9], 5, 0), None);
        // A varint that never ends.
        assert_eq!(line_pep657(&[0xE8, 0x40], 5, 0), None);
    }

    #[test]
    fn varints() {
        let mut i = 0;
        assert_eq!(varint(&[0x48, 0x03], &mut i), Some(200));
        assert_eq!(i, 2);
        let mut i = 0;
        assert_eq!(svarint(&[0x07], &mut i), Some(-3));
        let mut i = 0;
        assert_eq!(svarint(&[0x0A], &mut i), Some(5));
    }

    #[test]
    fn interpreter_and_framework_modules() {
        assert!(is_interpreter_or_framework("/usr/bin/python3.12"));
        assert!(is_interpreter_or_framework("/p/lib/libpython3.11.so.1.0"));
        assert!(is_interpreter_or_framework("/p/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so"));
        assert!(is_interpreter_or_framework("/usr/lib/x86_64-linux-gnu/libffi.so.8"));
        assert!(is_interpreter_or_framework("/v/lib/python3.12/site-packages/torch/lib/libtorch_python.so"));
        assert!(!is_interpreter_or_framework("/w/build/libmyext.so"));
    }

    #[test]
    fn framework_files_are_internal() {
        assert!(is_internal_file("/venv/lib/python3.12/site-packages/torch/nn/modules/module.py"));
        assert!(is_internal_file("/usr/lib/python3/dist-packages/jax/_src/api.py"));
        assert!(is_internal_file("/x/site-packages/cupy/_creation/basic.py"));
        assert!(!is_internal_file("/home/u/torch/train.py"));
        assert!(!is_internal_file("/x/site-packages/torchvision/models/resnet.py"));
        assert!(!is_internal_file("/home/u/train.py"));
    }

    fn native(function: &str) -> Frame {
        Frame {
            function: function.into(),
            module: "/usr/lib/libpython3.12.so.1.0".into(),
            address: "0x1".into(),
            ..Frame::default()
        }
    }

    fn code(id: u32, name: &str, firstlineno: i32) -> PyCode {
        // One 3.11+ entry per line: code 13 (+1 line), 4 code units each.
        PyCode {
            id,
            filename: "/w/t.py".into(),
            name: name.into(),
            firstlineno,
            linetable_format: LineTableFormat::Pep657,
            linetable: vec![0xEB, 0x02, 0xEB, 0x02, 0xEB, 0x02],
        }
    }

    fn python() -> Python {
        let mut p = Python::default();
        p.set_runtime(0x030B_07F0);
        p.add_code(code(0, "inner", 10));
        p.add_code(code(1, "outer", 20));
        p.add_code(code(2, "<module>", 0));
        p
    }

    fn names(frames: &[Frame]) -> Vec<String> {
        frames
            .iter()
            .map(|f| match f.line {
                Some(l) if f.python => format!("{}:{l}", f.function),
                _ => f.function.clone(),
            })
            .collect()
    }

    /// PyTorch's shape, from S1 (docs/gpu-matrix.md): a framework Python frame (internal), then the
    /// interpreter's `_PyObject_Call_Prepend` of `nn.Module.__call__`, then the user's line.
    #[test]
    fn first_shown_frame_is_the_users_python_line() {
        let mut p = python();
        p.add_code(PyCode {
            filename: "/v/site-packages/torch/nn/modules/activation.py".into(),
            ..code(3, "ReLU.forward", 140)
        });
        p.add_stack(PyStack {
            id: 7,
            frames: vec![PyFrame { code: 3, offset: 8, entry: true }, PyFrame { code: 1, offset: 0, entry: true }],
        });
        let n = vec![
            native("THPVariable_relu"),
            native(EVAL_FRAME),
            native("_PyObject_Call_Prepend"),
            native(EVAL_FRAME),
            native("main"),
        ];
        let got = p.merge(7, n);
        let first_shown = got.iter().find(|f| !f.internal).unwrap();
        assert_eq!(names(std::slice::from_ref(first_shown)), ["outer:21"], "{:#?}", names(&got));
        assert!(got.iter().any(|f| f.function == "_PyObject_Call_Prepend" && f.internal));
        assert!(!got.last().unwrap().internal, "frames outer to the user's line stay as they are");
    }

    #[test]
    fn groups_replace_interpreter_frames_in_order() {
        let mut p = python();
        // inner and outer run in one native call (3.11+), <module> in another.
        p.add_stack(PyStack {
            id: 4,
            frames: vec![
                PyFrame { code: 0, offset: 8, entry: false },
                PyFrame { code: 1, offset: 0, entry: true },
                PyFrame { code: 2, offset: PY_NO_OFFSET, entry: true },
            ],
        });
        let n = vec![
            native("cudaMalloc"),
            native("ffi_call"),
            native(EVAL_FRAME),
            native("PyObject_Call"),
            native(EVAL_FRAME),
            native("main"),
        ];
        let got = p.merge(4, n.clone());
        assert_eq!(
            names(&got),
            ["cudaMalloc", "ffi_call", "inner:12", "outer:21", "PyObject_Call", "<module>:0", "main"]
        );
        let f = &got[2];
        assert_eq!(
            (f.module.as_str(), f.address.as_str(), f.offset.as_deref(), f.file.as_deref()),
            (MODULE, "", None, Some("/w/t.py"))
        );
        // Interpreter frames inner to the first Python frame are internal; outer ones are not.
        assert!(got[1].internal && !got[4].internal && !got[6].internal);
        assert!(f.python && !f.internal && !f.inlined);
        assert_eq!(p.site_flag(4), Some(true));
        assert_eq!(p.site_flag(5), Some(false));
        // A stack without Python frames is unchanged.
        assert_eq!(p.merge(5, n.clone()), n);

        // Counts that do not match: all Python frames before the innermost interpreter frame.
        let got = p.merge(4, vec![native("cudaMalloc"), native(EVAL_FRAME), native("main")]);
        assert_eq!(names(&got), ["cudaMalloc", "inner:12", "outer:21", "<module>:0", EVAL_FRAME, "main"]);
        // No interpreter frame: before the first libpython frame, else at the end.
        let mut n = vec![Frame { function: "cudaMalloc".into(), ..Frame::default() }, native("PyObject_Call")];
        assert_eq!(
            names(&p.merge(4, n.clone())),
            ["cudaMalloc", "inner:12", "outer:21", "<module>:0", "PyObject_Call"]
        );
        n.truncate(1);
        assert_eq!(names(&p.merge(4, n)), ["cudaMalloc", "inner:12", "outer:21", "<module>:0"]);
    }

    #[test]
    fn no_runtime_means_no_flag_and_unknown_codes_are_marked() {
        let mut p = Python::default();
        assert_eq!(p.site_flag(0), None);
        p.add_stack(PyStack { id: 0, frames: vec![PyFrame { code: 9, offset: 0, entry: true }] });
        assert_eq!(p.site_flag(0), Some(true));
        let got = p.merge(0, vec![native(EVAL_FRAME)]);
        assert_eq!(got.len(), 1);
        assert!(got[0].python && got[0].function == "??" && got[0].file.is_none());
        assert!(is_eval_frame(&native("_PyEval_EvalFrameDefault.cold")));
        assert!(!is_eval_frame(&native("_PyEval_EvalFrameDefaultX")));
    }
}
