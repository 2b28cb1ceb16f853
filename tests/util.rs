//! Helpers: where the built artifacts are, a unique directory per test, running a target under
//! the shim, and reading its reports. On failure, assertions print the whole run (command,
//! environment, status, stdout, stderr) through `Outcome`'s Display.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

pub const MIB: u64 = 1 << 20;

/// Directory holding the C stand-ins and test programs (built by build.rs).
pub fn standins() -> PathBuf {
    PathBuf::from(env!("GPUSHIM_STANDINS"))
}

/// A stand-in program or library by file name.
pub fn standin(name: &str) -> PathBuf {
    standins().join(name)
}

/// The target directory of this profile (`target/debug`), found from this test binary's path
/// (`target/debug/deps/tests-*`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("test binary lives in target/<profile>/deps").to_path_buf()
}

fn built(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(p.exists(), "{} is missing: run `cargo build --workspace` before `cargo test`", p.display());
    p
}

/// `libgpushim.so`.
pub fn shim() -> PathBuf {
    built("libgpushim.so")
}

/// The `gpushim` binary.
pub fn collector() -> PathBuf {
    built("gpushim")
}

/// A fresh empty directory, removed when dropped unless the test panicked.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "gpushim-test-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A program to run, with or without the shim.
pub struct Target {
    program: PathBuf,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    preload: Option<String>,
    pub dir: TempDir,
}

impl Target {
    /// `program` (a stand-in name or a path) under the shim, reports going to a fresh directory.
    pub fn new(program: impl AsRef<Path>, test: &str) -> Target {
        let p = program.as_ref();
        let program = if p.components().count() == 1 { standin(p.to_str().unwrap()) } else { p.to_path_buf() };
        let dir = TempDir::new(test);
        let mut env = BTreeMap::new();
        env.insert("GPUSHIM_OUTPUT".into(), dir.path().display().to_string());
        env.insert("GPUSHIM_COLLECTOR".into(), collector().display().to_string());
        env.insert("LD_LIBRARY_PATH".into(), standins().display().to_string());
        Target { program, args: vec![], env, preload: Some(shim().display().to_string()), dir }
    }
    pub fn args(mut self, a: &[&str]) -> Self {
        self.args.extend(a.iter().map(|s| s.to_string()));
        self
    }
    pub fn env(mut self, k: &str, v: impl ToString) -> Self {
        self.env.insert(k.into(), v.to_string());
        self
    }
    /// Sets LD_PRELOAD exactly (None: no preload at all).
    pub fn preload(mut self, p: Option<String>) -> Self {
        self.preload = p;
        self
    }
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.env {
            s += &format!("{k}={v} ");
        }
        if let Some(p) = &self.preload {
            s += &format!("LD_PRELOAD={p} ");
        }
        s += &self.program.display().to_string();
        for a in &self.args {
            s += &format!(" {a}");
        }
        s
    }
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args).envs(&self.env).env_remove("LD_PRELOAD");
        if let Some(p) = &self.preload {
            c.env("LD_PRELOAD", p);
        }
        c
    }
    /// Runs to completion. Reading stderr to its end also waits for the collector, which
    /// inherits the target's stderr and holds it until its report is written.
    pub fn run(self) -> Outcome {
        let out = self.command().stdin(Stdio::null()).output().expect("spawn target");
        Outcome {
            desc: self.describe(),
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            dir: self.dir,
        }
    }
}

/// A finished run.
pub struct Outcome {
    pub desc: String,
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub dir: TempDir,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files: Vec<String> = std::fs::read_dir(self.dir.path())
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        write!(
            f,
            "\n--- command\n{}\n--- status\n{:?}\n--- stdout\n{}\n--- stderr\n{}\n--- output dir {}\n{:?}\n",
            self.desc,
            self.status,
            self.stdout,
            self.stderr,
            self.dir.path().display(),
            files
        )
    }
}

impl Outcome {
    pub fn success(&self) -> &Self {
        assert!(self.status.success(), "target failed{self}");
        self
    }
    /// File names in the output directory, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
    /// Every final report (`gpushim-<pid>.json`), by pid.
    pub fn reports(&self) -> BTreeMap<u32, Value> {
        let mut m = BTreeMap::new();
        for f in self.files() {
            let Some(pid) = f.strip_prefix("gpushim-").and_then(|r| r.strip_suffix(".json")) else { continue };
            let Ok(pid) = pid.parse::<u32>() else { continue };
            m.insert(pid, self.read(&f));
        }
        m
    }
    /// The one final report.
    pub fn report(&self) -> Value {
        let r = self.reports();
        assert_eq!(r.len(), 1, "expected exactly one final report{self}");
        r.into_values().next().unwrap()
    }
    /// Snapshot `n` of process `pid`.
    pub fn snapshot(&self, pid: u64, n: u32) -> Value {
        self.read(&format!("gpushim-{pid}-snapshot-{n}.json"))
    }
    pub fn read(&self, name: &str) -> Value {
        let p = self.dir.path().join(name);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}{self}", p.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}{self}", p.display()))
    }
}

/// `report.kinds.<kind>.<field>`.
pub fn kind(r: &Value, kind: &str, field: &str) -> u64 {
    r["kinds"][kind][field].as_u64().unwrap_or_else(|| panic!("kinds.{kind}.{field} missing in {r:#}"))
}

/// `report.totals.<field>`.
pub fn total(r: &Value, field: &str) -> u64 {
    r["totals"][field].as_u64().unwrap_or_else(|| panic!("totals.{field} missing in {r:#}"))
}

/// True if and only if some frame of `site` names `function`.
pub fn site_has(site: &Value, function: &str) -> bool {
    site["frames"].as_array().is_some_and(|fs| fs.iter().any(|f| f["function"].as_str() == Some(function)))
}

/// The sites whose stacks contain `function`.
pub fn sites_with<'a>(r: &'a Value, function: &str) -> Vec<&'a Value> {
    r["sites"].as_array().unwrap().iter().filter(|s| site_has(s, function)).collect()
}
