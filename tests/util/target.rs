//! Running to completion: a target under the shim (`Target` → `Outcome`), and the `gpushim`
//! command line.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::{collector, names_in, read_json, shim, standin, standins, try_names_in, TempDir};

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
    /// The same command run by `wrapper` (`unshare --pid --fork --mount-proc`, `sh -c …`),
    /// which gets the environment, the shim included.
    pub fn command_under(&self, wrapper: &[&str]) -> Command {
        let mut c = Command::new(wrapper[0]);
        c.args(&wrapper[1..]).arg(&self.program).args(&self.args).envs(&self.env).env_remove("LD_PRELOAD");
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
        write!(
            f,
            "\n--- command\n{}\n--- status\n{:?}\n--- stdout\n{}\n--- stderr\n{}\n--- output dir {}\n{:?}\n",
            self.desc,
            self.status,
            self.stdout,
            self.stderr,
            self.dir.path().display(),
            try_names_in(self.dir.path()).unwrap_or_default()
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
        names_in(self.dir.path())
    }
    /// Every final report (`gpushim-<pid>.json`, `gpushim-rank<R>-<pid>.json`), by pid.
    pub fn reports(&self) -> BTreeMap<u32, Value> {
        let mut m = BTreeMap::new();
        for f in self.files() {
            let Some(pid) = f.strip_prefix("gpushim-").and_then(|r| r.strip_suffix(".json")) else { continue };
            // `gpushim-rank<R>-<pid>.json` for a process with a rank.
            let pid = pid.strip_prefix("rank").and_then(|r| r.split_once('-')).map_or(pid, |(_, p)| p);
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
    /// The JSON file `name` of the output directory.
    pub fn read(&self, name: &str) -> Value {
        read_json(&self.dir.path().join(name), self)
    }
}

/// Runs the `gpushim` command line with `args` (outside the shim) to its end.
pub fn gpushim<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(collector()).args(args).env_remove("LD_PRELOAD").output().unwrap()
}

/// `gpushim snapshot <pid>`, which must succeed; returns the path it prints. When it returns,
/// the collector holds every event the process queued before.
pub fn take_snapshot(pid: i32) -> String {
    let o = gpushim(["snapshot", &pid.to_string()]);
    assert!(o.status.success(), "gpushim snapshot {pid} failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}
