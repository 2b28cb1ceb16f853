//! The C stand-ins use each other one way only: no two files of `standins/` call into each
//! other, directly or through others. Each file is compiled on its own (`cc -c`, the flags of
//! build.rs); `nm` says which symbols it defines and which it leaves undefined, and a file uses
//! the file that defines a symbol it leaves undefined. (Part of the integration-test binary:
//! tests/tests.rs includes this file.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use crate::util::TempDir;

/// Runs `cmd`, returning its standard output; panics with its standard error if it fails.
fn output(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The symbols of object `obj`: those it defines and those it leaves undefined.
fn symbols(obj: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let names = |flag: &str| -> BTreeSet<String> {
        output(Command::new("nm").arg(flag).arg(obj))
            .lines()
            .filter_map(|l| l.split_whitespace().last().map(str::to_string))
            .collect()
    };
    (names("--defined-only"), names("--undefined-only"))
}

/// Which stand-in file uses which others (by the symbols it calls or reads), by file name.
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("standins");
    let tmp = TempDir::new("standin-circles");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut defs = BTreeMap::new();
    let mut undefs = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let src = e.unwrap().path();
        if src.extension().is_none_or(|x| x != "c") {
            continue;
        }
        let name = src.file_name().unwrap().to_string_lossy().into_owned();
        let obj = tmp.path().join(format!("{name}.o"));
        output(
            Command::new(&cc)
                .args(["-std=gnu11", "-O0", "-fPIC", "-fvisibility=hidden", "-c", "-I"])
                .arg(&dir)
                .arg(&src)
                .arg("-o")
                .arg(&obj),
        );
        let (d, u) = symbols(&obj);
        defs.insert(name.clone(), d);
        undefs.insert(name, u);
    }
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, wanted) in &undefs {
        for (other, defined) in &defs {
            if other != file && !wanted.is_disjoint(defined) {
                uses.entry(file.clone()).or_default().insert(other.clone());
            }
        }
    }
    uses
}

/// A circle through `start`, if there is one: the files from `start` on.
fn circle_from(start: &str, uses: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((here, path)) = stack.pop() {
        for next in uses.get(&here).into_iter().flatten() {
            if next == start {
                return Some(path);
            }
            if seen.insert(next.clone()) {
                stack.push((next.clone(), [path.clone(), vec![next.clone()]].concat()));
            }
        }
    }
    None
}

#[test]
fn no_two_stand_in_files_use_each_other() {
    let uses = uses();
    // The driver's files are found and linked as build.rs links them.
    assert!(uses.get("cuda.c").is_some_and(|u| u.contains("cuda_table.c")), "{uses:?}");
    let circles: Vec<String> =
        uses.keys().filter_map(|f| circle_from(f, &uses)).map(|c| format!("{} → {}", c.join(" → "), c[0])).collect();
    assert!(circles.is_empty(), "stand-in files in a circle:\n  {}\nuses: {uses:#?}", circles.join("\n  "));
}
