//! Prometheus / OpenMetrics: with `GPUSHIM_METRICS=HOST:PORT` the collector (never the traced
//! program: the shim opens no socket for this) serves `/metrics` while it reads the stream.
//!
//! The flow: the collector's event loop owns a [`Publisher`]. It copies what the metrics show
//! into a [`Snapshot`] behind a mutex, cheaply and rarely: at most every [`PUBLISH_EVERY_NS`]
//! of event time while events stream in, and when the loop has read everything sent so far
//! (it is about to wait for the program anyway). Leak suspects are recomputed at most every
//! [`SUSPECTS_EVERY`] (the ranking without symbolized hints: [`rank::suspects`]), and a site's
//! `at` label (its first user frame) is symbolized once, when the site first enters the top
//! sites, then cached. Threads of their own ([`tiny_http`]; one responder per connection with
//! requests pending) answer each scrape from the latest snapshot: a scrape never waits for the
//! event loop, the event loop waits for a scrape only while the snapshot is copied, and a
//! client that does not read its answers holds up only its own connection.
//!
//! Ports: with a local rank known (`LOCAL_RANK`, `SLURM_LOCALID` or
//! `OMPI_COMM_WORLD_LOCAL_RANK`, from the stream's `Identity` event) the collector listens on
//! PORT + local rank; a port in use (a forked worker of a rank, a second job) gives way to a
//! free port, said in one line on stderr; port 0 is a free port. Each collector writes its
//! address into a Prometheus file-based service-discovery file of its own in the output
//! directory, `<report stem>.sd.json` (`gpushim-rank00003-4242.sd.json`), written whole under
//! a temporary name and renamed, and removed when the collector ends: one scrape config with
//! `files: [DIR/gpushim-*.sd.json]` finds every process of a job (docs/metrics.md).

pub mod expose;
mod serve;

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpushim_wire::NO_STACK;

use crate::account::live::State;
use crate::account::rank;
use crate::explain::frames;
use crate::explain::symbolize::Symbolizer;
use crate::report::Class;
use crate::report::Gauge;
use crate::report::{Identity, PhysicalDevice, Totals};
use serve::{readable, serve, write_sd};

/// Sites shown by `gpushim_site_live_bytes` when `GPUSHIM_METRICS_TOP` is not set.
pub const DEFAULT_TOP: usize = 20;

/// Most sites `GPUSHIM_METRICS_TOP` may ask for: label cardinality stays bounded.
pub const MAX_TOP: usize = 1000;

/// Event time between two snapshots while events stream in, ns (250 ms).
pub const PUBLISH_EVERY_NS: u64 = 250_000_000;

/// Wall time between two rankings of the leak suspects.
pub const SUSPECTS_EVERY: Duration = Duration::from_secs(2);

/// What `GPUSHIM_METRICS` (and `GPUSHIM_METRICS_TOP`) asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The address asked for; its port is raised by the local rank.
    pub addr: SocketAddr,
    /// The text the address was given as, for messages.
    pub given: String,
    /// Sites shown by `gpushim_site_live_bytes` (1 to [`MAX_TOP`]).
    pub top: usize,
    /// The descriptor the stream is read from when it comes from a running program (the
    /// shim's socket): polled to tell when the loop has read all that was sent. `None` for a
    /// recorded stream: snapshots then follow event time alone.
    pub input_fd: Option<i32>,
}

/// Reads `GPUSHIM_METRICS` (`HOST:PORT`, like `127.0.0.1:9464`; `None` or empty: no metrics)
/// and `GPUSHIM_METRICS_TOP`. A bad value is said in one line on `err`: no metrics then (or
/// the default number of sites).
pub fn config(metrics: Option<&str>, top: Option<&str>, err: &mut dyn Write) -> Option<Config> {
    let given = metrics.map(str::trim).filter(|v| !v.is_empty())?;
    let addr = given.to_socket_addrs().ok().and_then(|mut a| a.next());
    let Some(addr) = addr else {
        let _ = writeln!(
            err,
            "gpushim: GPUSHIM_METRICS={given} is not HOST:PORT (like 127.0.0.1:9464); tracing goes on without metrics"
        );
        return None;
    };
    let top = match top.map(str::trim).filter(|v| !v.is_empty()).map(str::parse::<usize>) {
        None => DEFAULT_TOP,
        Some(Ok(n)) if (1..=MAX_TOP).contains(&n) => n,
        Some(_) => {
            let _ = writeln!(
                err,
                "gpushim: GPUSHIM_METRICS_TOP={} is not a number of sites from 1 to {MAX_TOP}; showing {DEFAULT_TOP}",
                top.unwrap_or_default()
            );
            DEFAULT_TOP
        }
    };
    Some(Config { addr, given: given.to_string(), top, input_fd: None })
}

/// One GPU's gauge in a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuSample {
    /// The device ordinal the process saw.
    pub ordinal: i32,
    /// The machine's name for it: the driver's UUID, else the `CUDA_VISIBLE_DEVICES` entry,
    /// else the ordinal.
    pub gpu: String,
    /// Its device and managed memory (bytes).
    pub gauge: Gauge,
}

/// One of the top sites in a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteSample {
    /// The site's id (its stack id; `none` for allocations without a stack).
    pub id: String,
    /// Its first user frame (`render (app/main.c:42)`), else its headline, else empty.
    pub at: String,
    /// Live bytes.
    pub live_bytes: u64,
    /// Live allocations.
    pub live_count: u64,
}

/// The most likely leak suspect in a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopSuspect {
    /// Its site id.
    pub id: String,
    /// Its first user frame, as [`SiteSample::at`].
    pub at: String,
    /// Its slope (`slope_bytes_per_s` of the report): bytes per second.
    pub growth_bytes_per_s: f64,
}

/// What a scrape shows: a copy of the collector's counters as of one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Labels of every series, in order: `pid`, then `rank`, `local_rank`, `world_size` and
    /// `job_id` when known.
    pub labels: Vec<(String, String)>,
    /// Per kind (device, managed, pinned host).
    pub kinds: [Gauge; 3],
    /// The process's counters, as a report's (`lost_events` as of the latest event).
    pub totals: Totals,
    /// Per GPU ordinal, ascending.
    pub gpus: Vec<GpuSample>,
    /// The sites with most live bytes, most first (at most [`Config::top`]).
    pub sites: Vec<SiteSample>,
    /// Live bytes of all other sites.
    pub other_sites_live_bytes: u64,
    /// Sites with live allocations.
    pub sites_live: u64,
    /// Leak suspects as of the latest ranking.
    pub suspects: u64,
    /// The first of them.
    pub top_suspect: Option<TopSuspect>,
}

/// The labels every series carries: `pid`, and from `identity` the rank, local rank, world size
/// and job id that are known.
pub fn labels(pid: u32, identity: Option<&Identity>) -> Vec<(String, String)> {
    let mut l = vec![("pid".to_string(), pid.to_string())];
    if let Some(i) = identity {
        let num = |k: &str, v: Option<u32>| v.map(|v| (k.to_string(), v.to_string()));
        l.extend(num("rank", i.rank));
        l.extend(num("local_rank", i.local_rank));
        l.extend(num("world_size", i.world_size));
        l.extend(i.job_id.as_ref().map(|j| ("job_id".to_string(), j.clone())));
    }
    l
}

/// The port to listen on: `addr`'s port plus the local rank, when both are set (and the sum
/// is a port).
pub fn port_for(addr: SocketAddr, local_rank: Option<u32>) -> Option<SocketAddr> {
    let mut a = addr;
    if let (p @ 1.., Some(r)) = (addr.port(), local_rank) {
        a.set_port(u16::try_from(u32::from(p) + r).ok()?);
    }
    Some(a)
}

/// Listens on `addr`, or on a free port of the same host when `addr`'s port is in use.
/// Returns the listener and, when it is not on `addr`'s port, a line to say so; an error line
/// when nothing can be listened on.
fn listen(cfg: &Config, addr: SocketAddr) -> Result<(TcpListener, Option<String>), String> {
    let cannot = |a: SocketAddr, e: std::io::Error| {
        format!("gpushim: GPUSHIM_METRICS={}: cannot listen on {a}: {e}; tracing goes on without metrics", cfg.given)
    };
    match TcpListener::bind(addr) {
        Ok(l) if addr.port() != 0 => Ok((l, None)),
        Ok(l) => {
            let got = l.local_addr().map_err(|e| cannot(addr, e))?;
            Ok((l, Some(format!("gpushim: metrics of this process at http://{got}/metrics (a free port)"))))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let mut any = addr;
            any.set_port(0);
            let l = TcpListener::bind(any).map_err(|e| cannot(any, e))?;
            let got = l.local_addr().map_err(|e| cannot(any, e))?;
            Ok((l, Some(format!("gpushim: metrics: port {} is in use; serving on http://{got}/metrics", addr.port()))))
        }
        Err(e) => Err(cannot(addr, e)),
    }
}

/// The metrics server once it runs.
struct Running {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    /// The service-discovery file written for it.
    sd_file: Option<PathBuf>,
    addr: SocketAddr,
}

/// The event loop's side: decides when to copy the counters into the shared [`Snapshot`],
/// and starts and stops the server.
pub struct Publisher {
    cfg: Config,
    shared: Arc<Mutex<Snapshot>>,
    running: Option<Running>,
    /// Whether starting was tried (once).
    tried: bool,
    /// Event time at or after which the next snapshot is due while events stream in.
    next_ts: u64,
    /// Events were applied since the latest snapshot.
    dirty: bool,
    /// Allocations or frees were applied since the latest ranking.
    suspects_dirty: bool,
    last_suspects: Option<Instant>,
    /// The `at` label of each site labelled so far.
    at: HashMap<u32, String>,
    /// The latest ranking's result, kept between rankings.
    suspects: (u64, Option<TopSuspect>),
    labels: Vec<(String, String)>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("cfg", &self.cfg).field("addr", &self.addr()).finish_non_exhaustive()
    }
}

/// What the publisher reads besides the live set: the collector's other state.
pub struct Sources<'a> {
    /// The symbolizer, for the `at` labels.
    pub sym: &'a mut Symbolizer,
    /// Stacks by id.
    pub stacks: &'a HashMap<u32, Vec<u64>>,
    /// The machine's GPUs by ordinal.
    pub physical: &'a std::collections::BTreeMap<i32, PhysicalDevice>,
    /// The process's identity.
    pub identity: Option<&'a Identity>,
    /// Events given up as lost so far.
    pub lost: u64,
}

impl Publisher {
    /// A publisher for `cfg`; nothing listens until [`Publisher::start`].
    pub fn new(cfg: Config) -> Publisher {
        Publisher {
            cfg,
            shared: Arc::new(Mutex::new(Snapshot::default())),
            running: None,
            tried: false,
            next_ts: 0,
            dirty: true,
            suspects_dirty: true,
            last_suspects: None,
            at: HashMap::new(),
            suspects: (0, None),
            labels: Vec::new(),
        }
    }

    /// Whether [`Publisher::start`] was called.
    pub fn started(&self) -> bool {
        self.tried
    }

    /// The address served, once started.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.running.as_ref().map(|r| r.addr)
    }

    /// Starts serving (once): listens (see the module doc for the port), writes the
    /// service-discovery file `stem.sd.json` into `out_dir`, and starts the server's thread.
    /// Failures are said in one line on `err`; collection goes on without metrics.
    pub fn start(&mut self, pid: u32, identity: Option<&Identity>, out_dir: &Path, stem: &str, err: &mut dyn Write) {
        if std::mem::replace(&mut self.tried, true) {
            return;
        }
        self.labels = labels(pid, identity);
        self.shared.lock().unwrap_or_else(|e| e.into_inner()).labels = self.labels.clone();
        let Some(addr) = port_for(self.cfg.addr, identity.and_then(|i| i.local_rank)) else {
            let _ = writeln!(
                err,
                "gpushim: GPUSHIM_METRICS={}: the port plus the local rank is beyond 65535; tracing goes on without metrics",
                self.cfg.given
            );
            return;
        };
        let (listener, line) = match listen(&self.cfg, addr) {
            Ok(l) => l,
            Err(line) => {
                let _ = writeln!(err, "{line}");
                return;
            }
        };
        if let Some(line) = line {
            let _ = writeln!(err, "{line}");
        }
        let Ok(bound) = listener.local_addr() else { return };
        let server = match tiny_http::Server::from_listener(listener, None) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                let _ = writeln!(err, "gpushim: metrics server: {e}; tracing goes on without metrics");
                return;
            }
        };
        let (s, shared) = (Arc::clone(&server), Arc::clone(&self.shared));
        let thread = std::thread::Builder::new().name("gpushim-metrics".into()).spawn(move || serve(&s, &shared)).ok();
        let sd_file = match write_sd(out_dir, stem, bound, &self.labels) {
            Ok(p) => Some(p),
            Err(e) => {
                let _ = writeln!(err, "gpushim: metrics: cannot write {stem}.sd.json: {e}");
                None
            }
        };
        self.running = Some(Running { server, thread, sd_file, addr: bound });
    }

    /// After an event: `ts_ns` is its time if it has one (allocations, frees, failures).
    /// Copies the counters when due by event time. Cheap otherwise: one comparison.
    pub fn after_event(&mut self, ts_ns: Option<u64>, state: &State, src: &mut Sources<'_>) {
        self.dirty = true;
        let Some(ts) = ts_ns else { return };
        self.suspects_dirty = true;
        if ts >= self.next_ts {
            self.next_ts = ts.saturating_add(PUBLISH_EVERY_NS);
            let rank = self.last_suspects.is_none_or(|t| t.elapsed() >= SUSPECTS_EVERY);
            self.publish(state, src, rank);
        }
    }

    /// When the loop has read every byte received (`buffered` is false) and the stream's
    /// descriptor has nothing more to read: copies the counters now, and ranks the suspects
    /// once [`SUSPECTS_EVERY`] has passed since the latest ranking unless events arrive first.
    pub fn caught_up(&mut self, buffered: bool, state: &State, src: &mut Sources<'_>) {
        let Some(fd) = self.cfg.input_fd else { return };
        if buffered || !self.dirty || self.running.is_none() || readable(fd, Duration::ZERO) {
            return;
        }
        if !self.suspects_dirty {
            self.publish(state, src, false);
            return;
        }
        let wait = self.last_suspects.map_or(Duration::ZERO, |t| SUSPECTS_EVERY.saturating_sub(t.elapsed()));
        if !wait.is_zero() {
            // The quick part now; the ranking once due, unless the program sends more first.
            self.publish(state, src, false);
            self.dirty = true;
            if readable(fd, wait) {
                return;
            }
            self.publish(state, src, true);
            return;
        }
        self.publish(state, src, true);
    }

    /// The stream has ended: a last snapshot (what the final report will say), ranked.
    pub fn finish(&mut self, state: &State, src: &mut Sources<'_>) {
        if self.running.is_some() {
            self.publish(state, src, true);
        }
    }

    /// Copies the counters into the shared snapshot; ranks the suspects anew when `rank`.
    fn publish(&mut self, state: &State, src: &mut Sources<'_>, rank: bool) {
        if self.running.is_none() {
            return;
        }
        self.dirty = false;
        let mut snap = Snapshot {
            labels: self.labels.clone(),
            kinds: state.kinds,
            totals: Totals { lost_events: src.lost, ..state.totals },
            gpus: state
                .devices
                .iter()
                .map(|(&ordinal, &gauge)| GpuSample { ordinal, gpu: gpu_name(src, ordinal), gauge })
                .collect(),
            ..Snapshot::default()
        };
        // The top sites: one pass over the sites, a partial sort of those with live bytes.
        let mut live: Vec<(u64, u32)> =
            state.sites.values().filter(|s| s.gauge.live_bytes > 0).map(|s| (s.gauge.live_bytes, s.id)).collect();
        snap.sites_live = live.len() as u64;
        let all: u64 = live.iter().map(|&(b, _)| b).fold(0, u64::saturating_add);
        let by_size = |a: &(u64, u32), b: &(u64, u32)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        if live.len() > self.cfg.top {
            live.select_nth_unstable_by(self.cfg.top - 1, by_size);
            live.truncate(self.cfg.top);
        }
        live.sort_unstable_by(by_size);
        let mut shown = 0u64;
        for &(bytes, id) in &live {
            shown = shown.saturating_add(bytes);
            let count = state.sites.get(&id).map_or(0, |s| s.gauge.live_count);
            let at = self.at_of(id, src);
            snap.sites.push(SiteSample { id: site_id(id), at, live_bytes: bytes, live_count: count });
        }
        snap.other_sites_live_bytes = all.saturating_sub(shown);
        if rank {
            self.rank(state, src);
        }
        snap.suspects = self.suspects.0;
        snap.top_suspect = self.suspects.1.clone();
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = snap;
    }

    /// Ranks the suspects of `state` as an interval report made now would (without the hints
    /// of symbolized stacks), keeping their count and the first.
    fn rank(&mut self, state: &State, src: &mut Sources<'_>) {
        self.last_suspects = Some(Instant::now());
        self.suspects_dirty = false;
        let Some(start) = state.first_ts_ns else { return };
        // The report's end is the latest event applied, as for an interval report: a program
        // that stopped allocating keeps the verdict of its latest activity.
        let suspects = rank::suspects(state, start, state.last_ts_ns);
        let top = suspects.first().map(|s| TopSuspect {
            id: site_id(s.site),
            at: self.at_of(s.site, src),
            growth_bytes_per_s: s.slope_bytes_per_s,
        });
        self.suspects = (suspects.len() as u64, top);
    }

    /// Site `id`'s `at` label, symbolized the first time it is asked for, then cached.
    fn at_of(&mut self, id: u32, src: &mut Sources<'_>) -> String {
        if let Some(at) = self.at.get(&id) {
            return at.clone();
        }
        let at = match src.stacks.get(&id) {
            Some(addrs) if id != NO_STACK => {
                let frames = src.sym.stack_of(id, addrs);
                match frames.iter().find(|f| f.class == Class::User) {
                    Some(f) => crate::report::words::frame_label(f),
                    None => frames::headline(&frames, None).map(|h| h.text).unwrap_or_default(),
                }
            }
            _ => String::new(),
        };
        self.at.insert(id, at.clone());
        at
    }

    /// Stops the server and removes the service-discovery file (the process is gone: so is
    /// its target).
    pub fn stop(&mut self) {
        if let Some(mut r) = self.running.take() {
            if let Some(p) = &r.sd_file {
                let _ = std::fs::remove_file(p);
            }
            r.server.unblock();
            if let Some(t) = r.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A site's id as a label: its stack id, or `none`.
fn site_id(id: u32) -> String {
    if id == NO_STACK {
        "none".to_string()
    } else {
        id.to_string()
    }
}

/// The machine's name for device `ordinal`: the driver's UUID, else the
/// `CUDA_VISIBLE_DEVICES` entry, else the ordinal ([`crate::explain::identity::physical_gpu`]).
fn gpu_name(src: &Sources<'_>, ordinal: i32) -> String {
    match src.physical.get(&ordinal) {
        Some(p) if !p.uuid.is_empty() => p.uuid.clone(),
        _ => crate::explain::identity::physical_gpu(src.identity, ordinal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_and_their_bad_values() {
        let mut err = Vec::new();
        assert_eq!(config(None, None, &mut err), None);
        assert_eq!(config(Some(""), None, &mut err), None);
        let c = config(Some("127.0.0.1:9464"), None, &mut err).unwrap();
        assert_eq!((c.addr, c.top, c.input_fd), ("127.0.0.1:9464".parse().unwrap(), DEFAULT_TOP, None));
        assert_eq!(config(Some("[::1]:0"), Some("5"), &mut err).unwrap().top, 5);
        assert!(err.is_empty());
        assert_eq!(config(Some("9464"), None, &mut err), None);
        assert_eq!(config(Some("127.0.0.1:9464"), Some("0"), &mut err).unwrap().top, DEFAULT_TOP);
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "gpushim: GPUSHIM_METRICS=9464 is not HOST:PORT (like 127.0.0.1:9464); tracing goes on without metrics\n\
             gpushim: GPUSHIM_METRICS_TOP=0 is not a number of sites from 1 to 1000; showing 20\n"
        );
    }

    #[test]
    fn the_port_is_raised_by_the_local_rank_but_not_a_free_port() {
        let a: SocketAddr = "127.0.0.1:9464".parse().unwrap();
        assert_eq!(port_for(a, None), Some(a));
        assert_eq!(port_for(a, Some(3)).unwrap().port(), 9467);
        assert_eq!(port_for("127.0.0.1:0".parse().unwrap(), Some(3)).unwrap().port(), 0);
        assert_eq!(port_for("127.0.0.1:65535".parse().unwrap(), Some(1)), None);
    }

    #[test]
    fn labels_and_the_sd_file() {
        let id = crate::explain::identity::from_vars(&[
            ("RANK".into(), "3".into()),
            ("LOCAL_RANK".into(), "1".into()),
            ("SLURM_JOB_ID".into(), "77".into()),
        ]);
        let l = labels(42, Some(&id));
        let want: Vec<(String, String)> = [("pid", "42"), ("rank", "3"), ("local_rank", "1"), ("job_id", "77")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(l, want);
        assert_eq!(labels(42, None), vec![("pid".to_string(), "42".to_string())]);
        let dir = crate::report::output::tests::TempDir::new("metrics-sd");
        let p = write_sd(&dir.0, "gpushim-rank00003-42", "127.0.0.1:9465".parse().unwrap(), &l).unwrap();
        assert_eq!(p, dir.0.join("gpushim-rank00003-42.sd.json"));
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!([{"targets": ["127.0.0.1:9465"], "labels": {
                "__meta_gpushim_pid": "42", "__meta_gpushim_rank": "3",
                "__meta_gpushim_local_rank": "1", "__meta_gpushim_job_id": "77"}}])
        );
        // Written whole: no temporary file left beside it.
        assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 1);
    }
}
