//! Suppressions: sites a person has accepted, kept out of the leak suspects, in the spirit of
//! valgrind's suppression files (syntax in docs/suppressions.md).
//!
//! A file holds blocks:
//!
//! ```text
//! # a comment
//! {
//!    name-of-the-suppression
//!    ...
//!    fun:cublasCreate*
//!    obj:*/libcublas.so*
//! }
//! ```
//!
//! The first line inside the braces is the name. Each following line matches one frame of the
//! site's stack, starting at the innermost frame (internal frames included), in order: `fun:GLOB`
//! the function's name (demangled, with its parameters), `obj:GLOB` the module's path (for a
//! Python frame, its source file's), `src:GLOB` the frame's source file (`src:*/train.py:42`
//! with `:LINE` to also match the line), and `...` any number of frames, none included. A
//! block matches when its lines match from the innermost frame on; the frames after its last
//! line do not matter. Globs take `*` (any characters) and `?` (one).
//!
//! The collector reads the default file embedded in it (`default.supp`, unless
//! `GPUSHIM_DEFAULT_SUPPRESSIONS=0`) and each file of `GPUSHIM_SUPPRESSIONS` (paths separated
//! by `:`); a block it cannot read is skipped with a note in the report.

use std::sync::OnceLock;

use crate::explain::frames::glob;
use crate::report::Frame;

/// The default suppressions, embedded.
pub const DEFAULT: &str = include_str!("default.supp");

/// One line of a block.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Line {
    Fun(String),
    Obj(String),
    Src(String),
    Any,
}

/// One suppression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suppression {
    /// Its name.
    pub name: String,
    lines: Vec<Line>,
}

/// A set of suppressions, with the problems met reading them.
#[derive(Clone, Debug, Default)]
pub struct Suppressions {
    /// The suppressions, in the order read.
    pub list: Vec<Suppression>,
    /// One line per block or file that could not be read, for the report's notes.
    pub problems: Vec<String>,
}

impl Suppressions {
    /// Adds the blocks of `text`, read from `origin` (for messages).
    pub fn parse(&mut self, text: &str, origin: &str) {
        let mut block: Option<(usize, Vec<String>)> = None;
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match (&mut block, line) {
                (None, "{") => block = Some((n + 1, Vec::new())),
                (None, _) => self.problems.push(format!("{origin}:{}: expected '{{', found {line:?}", n + 1)),
                (Some(_), "}") => {
                    let (start, lines) = block.take().expect("in a block");
                    match parse_block(&lines) {
                        Ok(s) => self.list.push(s),
                        Err(e) => self.problems.push(format!("{origin}:{start}: {e}; the block is skipped")),
                    }
                }
                (Some((_, lines)), _) => lines.push(line.to_string()),
            }
        }
        if let Some((start, _)) = block {
            self.problems.push(format!("{origin}:{start}: block not closed with '}}'; it is skipped"));
        }
    }

    /// The defaults (unless `defaults` is false) and the files of `paths` (`:`-separated).
    pub fn load(defaults: bool, paths: Option<&str>) -> Suppressions {
        let mut s = Suppressions::default();
        if defaults {
            s.parse(DEFAULT, "default suppressions");
        }
        for p in paths.unwrap_or_default().split(':').filter(|p| !p.is_empty()) {
            match std::fs::read_to_string(p) {
                Ok(text) => s.parse(&text, p),
                Err(e) => s.problems.push(format!("cannot read suppressions file {p}: {e}")),
            }
        }
        s
    }

    /// The suppressions of this process's environment, read once.
    pub fn global() -> &'static Suppressions {
        static S: OnceLock<Suppressions> = OnceLock::new();
        S.get_or_init(|| {
            let s = crate::settings::Settings::global();
            let defaults = s.default_suppressions.as_deref().and_then(gpushim_wire::setting::switch) != Some(false);
            Suppressions::load(defaults, s.suppressions.as_deref())
        })
    }

    /// The first suppression matching a site whose stack is `frames` (innermost first).
    pub fn matching(&self, frames: &[Frame]) -> Option<&Suppression> {
        self.list.iter().find(|s| matches(&s.lines, frames))
    }
}

fn parse_block(lines: &[String]) -> Result<Suppression, String> {
    let (name, rest) = lines.split_first().ok_or("a block needs a name")?;
    if name.contains(':') || name == "..." {
        return Err(format!("the first line is the block's name, not {name:?}"));
    }
    let mut out = Vec::new();
    for l in rest {
        out.push(match l.split_once(':') {
            _ if l == "..." => Line::Any,
            Some(("fun", g)) => Line::Fun(g.to_string()),
            Some(("obj", g)) => Line::Obj(g.to_string()),
            Some(("src", g)) => Line::Src(g.to_string()),
            _ => return Err(format!("{l:?} is not fun:, obj:, src: or ...")),
        });
    }
    if out.iter().all(|l| *l == Line::Any) {
        return Err("a block needs a fun:, obj: or src: line".to_string());
    }
    Ok(Suppression { name: name.clone(), lines: out })
}

fn frame_matches(line: &Line, f: &Frame) -> bool {
    match line {
        Line::Fun(g) => glob(g, &f.function),
        Line::Obj(g) => glob(g, if f.python { f.file.as_deref().unwrap_or("") } else { &f.module }),
        Line::Src(g) => {
            let file = f.file.as_deref().unwrap_or("");
            glob(g, file) || f.line.is_some_and(|n| glob(g, &format!("{file}:{n}")))
        }
        Line::Any => true,
    }
}

/// True if and only if `lines` match `frames` from the first frame on (`...`: any number).
fn matches(lines: &[Line], frames: &[Frame]) -> bool {
    match lines.split_first() {
        None => true,
        Some((Line::Any, rest)) => (0..=frames.len()).any(|i| matches(rest, &frames[i..])),
        Some((l, rest)) => frames.first().is_some_and(|f| frame_matches(l, f)) && matches(rest, &frames[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(function: &str, module: &str) -> Frame {
        Frame { function: function.into(), module: module.into(), ..Frame::default() }
    }

    #[test]
    fn blocks_match_from_the_innermost_frame() {
        let mut s = Suppressions::default();
        s.parse(
            "# accepted\n{\n  handles\n  fun:cudaMalloc\n  obj:*/libcublas.so*\n}\n\n{\n  pool\n  ...\n  fun:*HandlePool*\n}\n{\n  line\n  ...\n  src:*/train.py:42\n}\n",
            "t.supp",
        );
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        assert_eq!(s.list.iter().map(|x| x.name.as_str()).collect::<Vec<_>>(), ["handles", "pool", "line"]);
        let cublas = [f("cudaMalloc", "/c/libcudart.so.13"), f("??", "/c/libcublas.so.13"), f("main", "/w/app")];
        assert_eq!(s.matching(&cublas).unwrap().name, "handles");
        // Not from the innermost frame: no match without `...`.
        assert!(s.matching(&cublas[1..]).is_none());
        let pool = [
            f("cudaMalloc", "/c/libcudart.so.13"),
            f("at::cuda::DeviceThreadHandlePool<x>::reserve(int)", "/t/libtorch_cuda.so"),
        ];
        assert_eq!(s.matching(&pool).unwrap().name, "pool");
        let mut py = f("step", "python");
        py.python = true;
        py.file = Some("/home/u/train.py".into());
        py.line = Some(42);
        assert_eq!(s.matching(&[f("cudaMalloc", "/c/libcudart.so.13"), py.clone()]).unwrap().name, "line");
        py.line = Some(43);
        assert!(s.matching(&[py]).is_none());
    }

    #[test]
    fn bad_blocks_are_skipped_with_a_problem() {
        let mut s = Suppressions::default();
        s.parse("stray\n{\n  fun:x\n}\n{\n  n\n  bogus line\n}\n{\n  only\n  ...\n}\n{\n  open\n  fun:y\n", "u.supp");
        assert!(s.list.is_empty());
        assert_eq!(
            s.problems,
            [
                "u.supp:1: expected '{', found \"stray\"",
                "u.supp:2: the first line is the block's name, not \"fun:x\"; the block is skipped",
                "u.supp:5: \"bogus line\" is not fun:, obj:, src: or ...; the block is skipped",
                "u.supp:9: a block needs a fun:, obj: or src: line; the block is skipped",
                "u.supp:13: block not closed with '}'; it is skipped",
            ]
        );
        let s = Suppressions::load(false, Some("/nonexistent/x.supp"));
        assert!(s.problems[0].starts_with("cannot read suppressions file /nonexistent/x.supp"), "{:?}", s.problems);
    }

    #[test]
    fn the_default_file_reads_and_spares_a_programs_own_handles() {
        let s = Suppressions::load(true, None);
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        assert_eq!(s.list.len(), 1);
        let torch = [
            f("cudaMalloc", "/c/libcudart.so.13"),
            f("cublasCreate_v2", "/c/libcublas.so.13"),
            f("at::cuda::(anonymous namespace)::createCublasHandle(cublasContext**)", "/t/libtorch_cuda.so"),
            f("at::cuda::DeviceThreadHandlePool<cublasContext*, &createCublasHandle, &destroyCublasHandle>::PoolWindow::reserve(int)", "/t/libtorch_cuda.so"),
            f("at::cuda::getCurrentCUDABlasHandle()", "/t/libtorch_cuda.so"),
        ];
        assert_eq!(s.matching(&torch).unwrap().name, "pytorch-library-handle-pool");
        let own = [
            f("cudaMalloc", "/c/libcudart.so.13"),
            f("cublasCreate_v2", "/c/libcublas.so.13"),
            f("worker_gemm", "/w/app"),
        ];
        assert!(s.matching(&own).is_none());
    }
}
