//! The layers of the shim, the collector and the wire crate: every module uses only modules of
//! its own layer or below, and no two files use each other, directly or through others. The
//! order is written once, in docs/ARCHITECTURE.md ("Layers"), and read from there.
//!
//! Every path that names a module of the crate is read: `crate::a::b` and `$crate::a` (in `use`
//! lines, braced groups such as `crate::{a, b::{c, d}}`, and inline paths in code and macro
//! bodies), `super::x` and the bare name of a child module (`child::x`). Comments and string
//! literals are not code; neither are `#[cfg(test)]` modules (a test may use anything). A folder's
//! `mod.rs` and its own files use each other freely (the index holds what its rooms share), but
//! rooms of one folder, and files of different folders, never in a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The layer order of `krate` (`shim/src`, …) from ARCHITECTURE.md: its line in the "Layers"
/// block, top layer first, each layer's modules.
fn layers(doc: &str, krate: &str) -> Vec<Vec<String>> {
    let prefix = format!("{krate}:");
    let line = doc
        .lines()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("docs/ARCHITECTURE.md has no line `{krate}: top > … > bottom`"));
    line.split('>').map(|layer| layer.split_whitespace().map(str::to_string).collect()).collect()
}

/// A module of a crate: its path from the crate root (`["explain", "frames"]`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Module {
    path: Vec<String>,
}

impl Module {
    fn name(&self) -> String {
        self.path.join("::")
    }
}

/// Every `.rs` file under `dir`, as (module path, file), less the crate roots and test-only files.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap();
            let mut path: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            let file = path.pop().unwrap();
            match file.as_str() {
                "lib.rs" | "main.rs" if path.is_empty() => continue,
                "mod.rs" => {}
                f => path.push(f.trim_end_matches(".rs").to_string()),
            }
            out.insert(path, p);
        }
    }
    // Files declared only under `#[cfg(test)]` are tests.
    let test_only: Vec<Vec<String>> = out
        .iter()
        .flat_map(|(m, f)| {
            let text = std::fs::read_to_string(f).unwrap();
            test_only_children(&text).into_iter().map(|c| [m.clone(), vec![c]].concat()).collect::<Vec<_>>()
        })
        .collect();
    for t in test_only {
        out.remove(&t);
    }
    out
}

/// Child modules declared as `#[cfg(test)] mod x;`.
fn test_only_children(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut out = Vec::new();
    for w in lines.windows(2) {
        if w[0] == "#[cfg(test)]" {
            let l = w[1].trim_start_matches("pub(crate) ").trim_start_matches("pub ");
            if let Some(name) = l.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// Rust source with comments and the contents of string and character literals blanked out.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if (c == b'r' || (c == b'b' && b.get(i + 1) == Some(&b'r')))
            && !prev_is_ident(b, i)
            && raw_string_start(b, i + usize::from(c == b'b') + 1).is_some()
        {
            let start = i + usize::from(c == b'b') + 1;
            let hashes = raw_string_start(b, start).unwrap();
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            i = start + hashes + 1;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if let Some(len) =
                std::str::from_utf8(&b[i + 1..]).ok().and_then(|s| s.chars().next()).map(char::len_utf8)
            {
                if b.get(i + 1 + len) == Some(&b'\'') {
                    i += len + 2;
                    out.push_str("' '");
                } else {
                    out.push('\'');
                    i += 1;
                }
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn prev_is_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// The number of `#` of a raw string whose `"`/`#`s start at `i`, if one does.
fn raw_string_start(b: &[u8], i: usize) -> Option<usize> {
    let hashes = b[i..].iter().take_while(|&&c| c == b'#').count();
    (b.get(i + hashes) == Some(&b'"')).then_some(hashes)
}

/// A token of the code: an identifier (with `$crate` as `crate`), `::`, or one other character.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Path,
    Punct(char),
}

fn tokens(code: &str) -> Vec<Tok> {
    let cs: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_alphabetic() || c == '_' || (c == '$' && cs.get(i + 1).is_some_and(|n| n.is_alphabetic())) {
            let start = if c == '$' { i + 1 } else { i };
            i = start;
            while i < cs.len() && (cs[i].is_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(cs[start..i].iter().collect()));
        } else if c == ':' && cs.get(i + 1) == Some(&':') {
            out.push(Tok::Path);
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            while i < cs.len() && (cs[i].is_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    out
}

/// The tokens less `#[cfg(test)]` modules with a body.
fn without_test_modules(toks: Vec<Tok>) -> Vec<Tok> {
    let is = |t: &Tok, s: &str| matches!(t, Tok::Ident(x) if x == s);
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        // `# [ cfg ( test ) ]`
        let cfg_test = toks.len() > i + 6
            && toks[i] == Tok::Punct('#')
            && toks[i + 1] == Tok::Punct('[')
            && is(&toks[i + 2], "cfg")
            && toks[i + 3] == Tok::Punct('(')
            && is(&toks[i + 4], "test")
            && toks[i + 5] == Tok::Punct(')')
            && toks[i + 6] == Tok::Punct(']');
        if cfg_test {
            let mut j = i + 7;
            // Further attributes.
            while toks.get(j) == Some(&Tok::Punct('#')) {
                let mut depth = 0;
                loop {
                    match &toks[j] {
                        Tok::Punct('[') => depth += 1,
                        Tok::Punct(']') => {
                            depth -= 1;
                            if depth == 0 {
                                j += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
            }
            // `pub`, `pub(crate)`
            if is(&toks[j], "pub") {
                j += 1;
                if toks.get(j) == Some(&Tok::Punct('(')) {
                    j += 3;
                }
            }
            if is(&toks[j], "mod") && toks.get(j + 2) == Some(&Tok::Punct('{')) {
                let mut depth = 0;
                let mut k = j + 2;
                loop {
                    match toks[k] {
                        Tok::Punct('{') => depth += 1,
                        Tok::Punct('}') => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    k += 1;
                }
                i = k + 1;
                continue;
            }
        }
        out.push(toks[i].clone());
        i += 1;
    }
    out
}

/// The paths a file's code names: `crate::…` (absolute), `super::…` and child modules'
/// (resolved against `here`, the file's module, and the inline modules around each path).
fn paths(toks: &[Tok], here: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // Inline modules open around the current token: (name, brace depth at its opening).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Tok::Ident(m) if m == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Punct('{'))) = (toks.get(i + 1), toks.get(i + 2)) {
                    inline.push((name.clone(), depth));
                }
            }
            Tok::Ident(first) if toks.get(i + 1) == Some(&Tok::Path) => {
                let after_path = i > 0 && (toks[i - 1] == Tok::Path || toks[i - 1] == Tok::Punct('.'));
                let module: Vec<String> = here.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect();
                let base: Option<Vec<String>> = if after_path {
                    None
                } else if first == "crate" {
                    Some(Vec::new())
                } else if first == "super" || (inline.is_empty() && children.contains(first)) {
                    Some(module.clone())
                } else {
                    None
                };
                if let Some(base) = base {
                    let (trees, next) = tree(toks, i);
                    for t in trees {
                        let mut p = base.clone();
                        for seg in t {
                            match seg.as_str() {
                                "crate" => p.clear(),
                                "super" => {
                                    p.pop();
                                }
                                "self" => {}
                                s => p.push(s.to_string()),
                            }
                        }
                        out.push(p);
                    }
                    i = next;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The paths of the path (or `use` tree) starting at token `i`, and the token after it.
fn tree(toks: &[Tok], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    loop {
        match toks.get(i) {
            Some(Tok::Ident(s)) => {
                prefix.push(s.clone());
                i += 1;
                if toks.get(i) == Some(&Tok::Path) {
                    i += 1;
                    // `a::*`
                    if toks.get(i) == Some(&Tok::Punct('*')) {
                        return (vec![prefix], i + 1);
                    }
                    continue;
                }
                return (vec![prefix], i);
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                let mut all = Vec::new();
                loop {
                    match toks.get(i) {
                        Some(Tok::Punct('}')) => return (all, i + 1),
                        Some(Tok::Punct(',')) => i += 1,
                        Some(Tok::Punct('*')) => {
                            all.push(prefix.clone());
                            i += 1;
                        }
                        Some(_) => {
                            let (sub, next) = tree(toks, i);
                            all.extend(sub.into_iter().map(|s| [prefix.clone(), s].concat()));
                            i = next;
                            // `a as b`
                            if toks.get(i) == Some(&Tok::Ident("as".into())) {
                                i += 2;
                            }
                        }
                        None => return (all, i),
                    }
                }
            }
            _ => return (vec![prefix], i),
        }
    }
}

/// The module of `known` that `path` names: its longest prefix that is one.
fn resolve(path: &[String], known: &BTreeMap<Vec<String>, PathBuf>) -> Option<Vec<String>> {
    (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| known.contains_key(p))
}

/// Every breach of the layer order and every circle between the files of `krate`.
fn check(krate: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let order = layers(&doc, krate);
    let layer_of: BTreeMap<String, usize> =
        order.iter().enumerate().flat_map(|(n, l)| l.iter().map(move |m| (m.clone(), n))).collect();
    let src = root().join(krate);
    let known = modules(&src);
    let mut problems = Vec::new();
    let tops: BTreeSet<String> = known.keys().map(|m| m[0].clone()).collect();
    for t in &tops {
        if !layer_of.contains_key(t) {
            problems.push(format!("{krate}: module `{t}` is in no layer of docs/ARCHITECTURE.md"));
        }
    }
    for m in layer_of.keys() {
        if !tops.contains(m) {
            problems.push(format!("{krate}: docs/ARCHITECTURE.md names `{m}`, which is no module"));
        }
    }
    // Edges between files.
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (m, file) in &known {
        let text = std::fs::read_to_string(file).unwrap();
        let toks = without_test_modules(tokens(&code_only(&text)));
        let children: BTreeSet<String> = known
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .map(|k| k.last().unwrap().clone())
            .collect();
        for p in paths(&toks, m, &children) {
            let Some(target) = resolve(&p, &known) else { continue };
            if &target == m {
                continue;
            }
            let (from, to) = (&m[0], &target[0]);
            if let (Some(a), Some(b)) = (layer_of.get(from), layer_of.get(to)) {
                if b < a {
                    problems.push(format!(
                        "{krate}: {} ({}) uses {}, which is in a layer above it",
                        Module { path: m.clone() }.name(),
                        file.strip_prefix(root()).unwrap().display(),
                        Module { path: p.clone() }.name()
                    ));
                }
            }
            // A folder's index and its own files: one room.
            let parent_child = (target.len() == m.len() + 1 && target.starts_with(m))
                || (m.len() == target.len() + 1 && m.starts_with(&target));
            if !parent_child {
                edges.entry(m.clone()).or_default().insert(target);
            }
        }
    }
    for cycle in cycles(&edges) {
        let names: Vec<String> = cycle.iter().map(|p| Module { path: p.clone() }.name()).collect();
        problems.push(format!("{krate}: a circle: {} → {}", names.join(" → "), names[0]));
    }
    problems
}

/// The circles through the files: from each file, a depth-first search for a way back to it
/// (the graphs are small), each circle once, as the files in the order they use each other.
fn cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    let mut found: Vec<Vec<Vec<String>>> = Vec::new();
    let mut seen_sets: BTreeSet<Vec<Vec<String>>> = BTreeSet::new();
    for start in edges.keys() {
        let mut path = vec![start.clone()];
        if let Some(c) = find_cycle_back_to(start, edges, &mut path, &mut BTreeSet::new()) {
            let mut set = c.clone();
            set.sort();
            if seen_sets.insert(set) {
                found.push(c);
            }
        }
    }
    found
}

fn find_cycle_back_to(
    start: &Vec<String>,
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    path: &mut Vec<Vec<String>>,
    visited: &mut BTreeSet<Vec<String>>,
) -> Option<Vec<Vec<String>>> {
    let here = path.last().unwrap().clone();
    for next in edges.get(&here).into_iter().flatten() {
        if next == start {
            return Some(path.clone());
        }
        if visited.insert(next.clone()) {
            path.push(next.clone());
            if let Some(c) = find_cycle_back_to(start, edges, path, visited) {
                return Some(c);
            }
            path.pop();
        }
    }
    None
}

fn report(problems: &[String]) -> String {
    let mut s = String::new();
    for p in problems {
        let _ = writeln!(s, "  {p}");
    }
    s
}

#[test]
fn the_shim_uses_no_module_above_its_layer_and_has_no_circle() {
    let problems = check("shim/src");
    assert!(problems.is_empty(), "\n{}", report(&problems));
}

#[test]
fn the_collector_uses_no_module_above_its_layer_and_has_no_circle() {
    let problems = check("collector/src");
    assert!(problems.is_empty(), "\n{}", report(&problems));
}

#[test]
fn the_wire_crate_uses_no_module_above_its_layer_and_has_no_circle() {
    let problems = check("wire/src");
    assert!(problems.is_empty(), "\n{}", report(&problems));
}

/// The reader of paths finds what the test relies on: braced groups, inline paths, `$crate`,
/// `super` and child modules; comments, strings and test modules are not read.
#[test]
fn every_kind_of_path_is_read() {
    let src = r##"
        use crate::{a, b::{c, d as e}, f::*};
        // crate::commented::out
        /* crate::block /* nested */ crate::still_comment */
        fn x() { crate::g::h(); let _ = "crate::in_string"; let _ = r#"crate::raw"#; let _ = 'x'; }
        fn y<'a>(_: &'a str) { $crate::i::j!(); super::k::l(); child::m(); }
        mod inner { fn z() { super::n(); } }
        #[cfg(test)]
        mod tests { use crate::o; }
    "##;
    let toks = without_test_modules(tokens(&code_only(src)));
    let here = vec!["p".to_string(), "q".to_string()];
    let children = BTreeSet::from(["child".to_string()]);
    let got: Vec<String> = paths(&toks, &here, &children).iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["a", "b::c", "b::d", "f", "g::h", "i::j", "p::k::l", "p::q::child::m", "p::q::n"]);
}
