//! The control endpoint: while the collector reads a running program's stream, it listens on
//! the Unix socket `@gpushim-<pid>` (Linux's abstract namespace: no file anywhere, gone with
//! the collector) for `gpushim top`. A client sends one request line and reads one reply line
//! of JSON ([`serve`] has the requests).
//!
//! The flow, as the metrics endpoint's ([`crate::metrics`]): the event loop owns a
//! [`Control`] and copies what the view shows into a [`Shared`] state behind a mutex, rarely: a
//! [`Sample`] about every [`SAMPLE_EVERY_NS`] (by the events' time while they stream in; by the
//! clock when the program is quiet, the loop then waiting on its input with a timeout). Once a
//! client has asked for a frame (not before: symbolizing reads the program's files, and a
//! program nobody watches must not wait for that), the suspects are ranked at most every
//! [`SUSPECTS_EVERY_NS`] (as the report ranks them, the named sites of one line of user code
//! also judged as one union) and a site's headline, grouping key and frames symbolized once,
//! when it first enters the top sites. A thread of its own takes the connections, and one
//! thread per connection answers a frame from the shared state: no frame waits for the event
//! loop but the first, which waits (at most 5 s) for the sample that names the sites. A
//! snapshot request is handed to the event loop (a byte on a socket pair wakes it when it waits), which writes the report of the live set as applied so
//! far ([`crate::collect`]'s snapshot report, labelled `top`) and hands back its path. Nothing
//! here reaches the traced program. Both ends check that the other runs as the same user (or
//! root): anyone may bind or connect to a name of the abstract namespace.

pub mod client;
pub mod frame;
mod serve;

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use gpushim_wire::NO_STACK;

use crate::account::live::State;
use crate::account::rank;
use crate::explain::frames;
use crate::explain::nvml;
use crate::explain::owners;
use crate::explain::symbolize::Symbolizer;
use crate::report::words::frame_label;
use crate::report::{Class, Gauge, Identity, Totals};
use frame::{Name, Sample};

/// Time between two samples, ns (1 s).
pub const SAMPLE_EVERY_NS: u64 = 1_000_000_000;

/// Time between two rankings of the suspects, ns (2 s).
pub const SUSPECTS_EVERY_NS: u64 = 2_000_000_000;

/// Samples kept: ten minutes at one a second.
pub const MAX_SAMPLES: usize = 600;

/// Sites kept per sample, most live bytes first: growth is computed for these.
pub const SITES_PER_SAMPLE: usize = 1000;

/// Sites named (symbolized) per sample, most live bytes first.
pub const NAMED_PER_SAMPLE: usize = 50;

/// Frames kept per named site.
pub const MAX_FRAMES: usize = 48;

/// Holder groups kept per site from a snapshot's heap walk.
pub const HELD_BY_LINES: usize = 5;

/// The socket's name in the abstract namespace (without the leading NUL) for traced `pid`.
pub fn socket_name(pid: u32) -> String {
    format!("gpushim-{pid}")
}

/// Whether the peer runs as this process's user, or as root (`SO_PEERCRED`).
pub(crate) fn same_user(conn: &UnixStream) -> bool {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    peer(conn).is_some_and(|cred| cred.uid == me || cred.uid == 0)
}

/// The peer's credentials (`SO_PEERCRED`; its pid as our PID namespace sees it).
pub(crate) fn peer(conn: &UnixStream) -> Option<libc::ucred> {
    let mut cred = libc::ucred { pid: 0, uid: u32::MAX, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket, and an out-pointer of the size passed.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(cred)
}

/// A snapshot asked for by a client: the path written, or why not.
pub(crate) type SnapshotReply = Sender<Result<PathBuf, String>>;

/// What the event loop shares with the endpoint's threads.
#[derive(Default)]
pub(crate) struct Shared {
    pub pid: u32,
    pub command: Vec<String>,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub first_ts_ns: Option<u64>,
    pub kinds: [Gauge; 3],
    pub totals: Totals,
    pub gpus: Vec<(i32, Gauge)>,
    pub driver: Option<nvml::Sample>,
    pub driver_unavailable: Option<String>,
    pub sites_live: u64,
    pub history: VecDeque<Sample>,
    pub names: HashMap<u32, Name>,
    pub suspects: Vec<u32>,
    /// Per site, who held its memory at the latest snapshot's heap walk, and which walk.
    pub holders: HashMap<u32, Vec<String>>,
    pub holders_from: Option<String>,
    pub ended: bool,
    /// Snapshots asked for, not yet written.
    pub requests: Vec<SnapshotReply>,
    /// Snapshots of the program asked for (`ask`), not yet passed on to the shim.
    pub asks: u32,
    /// Clients of the first frame, waiting for the sample that names the sites.
    pub waiters: Vec<Sender<()>>,
}

/// The state shared between the loop and the endpoint, and the flag that says a request waits.
pub(crate) struct Link {
    pub shared: Mutex<Shared>,
    pub pending: AtomicBool,
    /// A client has asked for a frame: sites are named and suspects ranked from then on.
    pub watched: AtomicBool,
}

/// What the control reads besides the live set: the collector's other state.
pub struct Sources<'a> {
    /// The symbolizer, for the headlines.
    pub sym: &'a mut Symbolizer,
    /// Stacks by id.
    pub stacks: &'a HashMap<u32, Vec<u64>>,
    /// The process's identity.
    pub identity: Option<&'a Identity>,
    /// The driver's sampler, when the collector samples it.
    pub sampler: Option<&'a nvml::Sampler>,
}

/// What waiting for input ended with.
#[derive(Debug, PartialEq, Eq)]
pub enum Woken {
    /// The input has something to read (or ended).
    Input,
    /// A client asked for a snapshot.
    Request,
    /// A sample is due.
    Due,
}

/// The event loop's side of the endpoint.
pub struct Control {
    pid: u32,
    link: Arc<Link>,
    /// The read end of the wake-up pair.
    wake: UnixStream,
    /// The write end, handed to each listener started.
    wake_tx: Arc<UnixStream>,
    listening: bool,
    next_sample_ns: u64,
    next_rank_ns: u64,
    /// Applied events since the latest sample.
    dirty: bool,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").field("pid", &self.pid).field("listening", &self.listening).finish_non_exhaustive()
    }
}

impl Control {
    /// The endpoint of traced `pid` running `command`; it listens from the first sample on.
    /// `None` when no socket pair can be made.
    pub fn new(pid: u32, command: &[String]) -> Option<Control> {
        let (wake, tx) = UnixStream::pair().ok()?;
        wake.set_nonblocking(true).ok()?;
        tx.set_nonblocking(true).ok()?;
        let shared = Shared { pid, command: command.to_vec(), ..Shared::default() };
        let link = Arc::new(Link {
            shared: Mutex::new(shared),
            pending: AtomicBool::new(false),
            watched: AtomicBool::new(false),
        });
        Some(Control {
            pid,
            link,
            wake,
            wake_tx: Arc::new(tx),
            listening: false,
            next_sample_ns: 0,
            next_rank_ns: 0,
            dirty: true,
        })
    }

    /// Keeps who held each site's memory at a snapshot's (or out-of-memory report's) heap
    /// walk, for the view's site detail: the lines a report gives under the site.
    pub fn set_holders(&mut self, h: &crate::report::Holders) {
        let from = match h.number {
            Some(n) => format!("{} {n}", h.reason),
            None => h.reason.clone(),
        };
        let lines = h
            .sites
            .iter()
            .filter_map(|s| Some((s.site?, crate::explain::holders::site_lines(s, HELD_BY_LINES, &h.walk.status))))
            .collect();
        let mut sh = self.link.shared.lock().unwrap_or_else(|e| e.into_inner());
        sh.holders = lines;
        sh.holders_from = Some(from);
    }

    /// Whether a client asked for a snapshot that is not written yet (one relaxed load).
    pub fn requested(&self) -> bool {
        self.link.pending.load(Ordering::Relaxed)
    }

    /// After an event with time `ts_ns` (allocations, frees, failures): samples when due.
    pub fn after_event(&mut self, ts_ns: Option<u64>, state: &State, src: &mut Sources<'_>) {
        self.dirty = true;
        if let Some(ts) = ts_ns {
            if ts >= self.next_sample_ns {
                self.sample(ts, state, src);
            }
        }
    }

    /// Waits until `input_fd` is readable, a snapshot is asked for, or a sample is due.
    pub fn wait(&mut self, input_fd: i32) -> Woken {
        if self.requested() {
            return Woken::Request;
        }
        let now = nvml::now_ns();
        let ms = if self.next_sample_ns <= now {
            0
        } else {
            i32::try_from((self.next_sample_ns - now).div_ceil(1_000_000)).unwrap_or(i32::MAX)
        };
        let mut fds = [
            libc::pollfd { fd: input_fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds, for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n < 0 || fds[0].revents != 0 {
            // An error (EINTR) reads as input: the loop reads, which blocks as it always did.
            return Woken::Input;
        }
        if fds[1].revents != 0 {
            let mut buf = [0u8; 64];
            while matches!((&self.wake).read(&mut buf), Ok(1..)) {}
            return Woken::Request;
        }
        Woken::Due
    }

    /// A sample taken now (the loop waited: the state is as of now).
    pub fn sample_now(&mut self, state: &State, src: &mut Sources<'_>) {
        self.sample(nvml::now_ns(), state, src);
    }

    /// Serves what clients asked the loop for: a sample now for those waiting for a first frame
    /// (it names the sites), and returns the snapshots asked for, to be written and answered.
    pub(crate) fn take_requests(&mut self, state: &State, src: &mut Sources<'_>) -> Vec<SnapshotReply> {
        self.link.pending.store(false, Ordering::Relaxed);
        let waiters = std::mem::take(&mut self.lock().waiters);
        if !waiters.is_empty() {
            self.dirty = true;
            self.next_rank_ns = 0;
            self.sample_now(state, src);
            for w in waiters {
                let _ = w.send(());
            }
        }
        std::mem::take(&mut self.lock().requests)
    }

    /// The snapshots of the program asked for since the last call (`ask`), to pass on to the
    /// shim.
    pub(crate) fn take_asks(&mut self) -> u32 {
        std::mem::take(&mut self.lock().asks)
    }

    /// The stream has ended: frames say so, and snapshots are refused.
    pub fn finish(&mut self, state: &State, src: &mut Sources<'_>) {
        self.sample(nvml::now_ns().max(state.last_ts_ns), state, src);
        let requests = {
            let mut s = self.lock();
            s.ended = true;
            s.waiters.clear();
            std::mem::take(&mut s.requests)
        };
        for r in requests {
            let _ = r.send(Err("the program has ended; its final report is being written".to_string()));
        }
    }

    /// What the ranking knows of the named sites: their lines of user code and which a caching
    /// pool holds, so that the view judges suspects as the report does, the sites of one line
    /// also as one union (a site not named yet is judged alone).
    fn hints(&self) -> rank::Hints {
        let s = self.lock();
        let mut h = rank::Hints::default();
        for (&id, n) in &s.names {
            if let Some(line) = &n.line {
                h.line.insert(id, line.clone());
            }
            if n.pool {
                h.pool.insert(id);
            }
        }
        h
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.link.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies the live set's numbers into a sample at time `ts`, names the sites new to the top,
    /// ranks the suspects when due, and listens if it does not yet.
    fn sample(&mut self, ts: u64, state: &State, src: &mut Sources<'_>) {
        self.next_sample_ns = ts.saturating_add(SAMPLE_EVERY_NS);
        if !self.listening {
            self.listening = serve::listen(self.pid, &self.link, &self.wake_tx);
        }
        let mut live: Vec<(u32, u64, u64)> = state
            .sites
            .values()
            .filter(|s| s.gauge.live_bytes > 0)
            .map(|s| (s.id, s.gauge.live_bytes, s.gauge.live_count))
            .collect();
        let sites_live = live.len();
        let by_size = |a: &(u32, u64, u64), b: &(u32, u64, u64)| b.1.cmp(&a.1).then(a.0.cmp(&b.0));
        if live.len() > SITES_PER_SAMPLE {
            live.select_nth_unstable_by(SITES_PER_SAMPLE - 1, by_size);
            live.truncate(SITES_PER_SAMPLE);
        }
        live.sort_unstable_by(by_size);
        let watched = self.link.watched.load(Ordering::Relaxed);
        let named: Vec<u32> = live.iter().take(if watched { NAMED_PER_SAMPLE } else { 0 }).map(|s| s.0).collect();
        live.sort_unstable_by_key(|s| s.0);
        let sample = Sample { ts_ns: ts, live_bytes: state.totals.gauge.live_bytes, sites: live };
        let suspects = (watched && self.dirty && ts >= self.next_rank_ns).then(|| {
            self.next_rank_ns = ts.saturating_add(SUSPECTS_EVERY_NS);
            let start = state.first_ts_ns.unwrap_or(ts);
            // A union of one line's sites that is a suspect makes each of them one.
            let mut ids: Vec<u32> = rank::suspects_with(state, start, state.last_ts_ns, &self.hints())
                .iter()
                .flat_map(|s| std::iter::once(s.site).chain(s.line_sites.iter().copied()))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        });
        if watched {
            self.dirty = false;
        }
        let new: Vec<u32> = {
            let s = self.lock();
            named.into_iter().filter(|id| !s.names.contains_key(id)).collect()
        };
        // Symbolized outside the lock: frames may read the program's files.
        let names: Vec<(u32, Name)> = new.into_iter().map(|id| (id, name_of(id, src))).collect();
        let (driver, unavailable) = match src.sampler {
            Some(s) => s.latest(),
            None => (None, Some("the driver's view is not sampled".to_string())),
        };
        let mut s = self.lock();
        s.first_ts_ns = state.first_ts_ns;
        s.kinds = state.kinds;
        s.totals = state.totals;
        s.gpus = state.devices.iter().map(|(&o, &g)| (o, g)).collect();
        s.rank = src.identity.and_then(|i| i.rank);
        s.local_rank = src.identity.and_then(|i| i.local_rank);
        s.driver = driver;
        s.driver_unavailable = unavailable;
        if s.history.len() >= MAX_SAMPLES {
            s.history.pop_front();
        }
        s.history.push_back(sample);
        s.names.extend(names);
        if let Some(list) = suspects {
            s.suspects = list;
        }
        s.sites_live = sites_live as u64;
    }
}

/// Site `id`'s headline, its key (what the view's rows group sites by, as the report groups
/// its suspects), its line and pool flag for the ranking, and its frames, for the view.
fn name_of(id: u32, src: &mut Sources<'_>) -> Name {
    let Some(addrs) = src.stacks.get(&id).filter(|_| id != NO_STACK) else {
        return Name { headline: "without backtrace".to_string(), ..Name::default() };
    };
    let frames = src.sym.stack_of(id, addrs);
    let owner = owners::owner_of(&frames);
    let (headline, key) = match frames::headline(&frames, None) {
        Some(h) => (h.text, h.key),
        None => (frames.iter().find(|f| f.class == Class::User).map(frame_label).unwrap_or_default(), String::new()),
    };
    let list = frames
        .iter()
        .take(MAX_FRAMES)
        .map(|f| if f.internal { format!("[internal] {}", frame_label(f)) } else { frame_label(f) })
        .collect();
    Name { headline, key, line: owners::union_line(&frames, &owner), pool: owner.pool, frames: list }
}
