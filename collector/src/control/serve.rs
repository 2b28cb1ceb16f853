//! The endpoint's threads: one takes connections on `@gpushim-<pid>`, one per connection reads
//! its request line and writes one reply line.
//!
//! Requests:
//! - `frame [WINDOW_S [TOP]]`: the live view ([`super::frame::Frame`]) with growth over the
//!   last `WINDOW_S` seconds (default [`DEFAULT_WINDOW_S`]), the `TOP` sites by live bytes and
//!   the `TOP` by growth (default [`DEFAULT_TOP`]);
//! - `snapshot`: a snapshot report written now; the reply is `{"snapshot": PATH}`;
//!
//! and anything that fails is `{"error": WHY}`. Only a process of the collector's own user
//! (or root) is answered: the abstract namespace has no file permissions.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::frame::{self, DriverLine, Frame, GpuLine, Kinds, Point};
use super::{socket_name, Link, Shared};

/// Growth window when a request names none, seconds.
pub const DEFAULT_WINDOW_S: f64 = 10.0;

/// Sites by live bytes (and by growth) when a request names no number.
pub const DEFAULT_TOP: usize = 50;

/// Longest the first frame waits for the loop to name the sites (it then goes without).
const FIRST_FRAME_WAIT: Duration = Duration::from_secs(5);

/// Longest a snapshot may take before the client is told it did not come.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(60);

/// Listens on `@gpushim-<pid>` and starts the thread that takes connections. `false` when the
/// name is taken (a collector of the same pid before an `exec` still finishing): tried again
/// at the next sample.
pub(super) fn listen(pid: u32, link: &Arc<Link>, wake: &Arc<UnixStream>) -> bool {
    let Ok(addr) = SocketAddr::from_abstract_name(socket_name(pid).as_bytes()) else { return false };
    let Ok(listener) = UnixListener::bind_addr(&addr) else { return false };
    let (link, wake) = (Arc::clone(link), Arc::clone(wake));
    std::thread::Builder::new().name("gpushim-control".into()).spawn(move || accept(&listener, &link, &wake)).is_ok()
}

/// Takes connections for as long as the collector runs (its exit ends the thread).
fn accept(listener: &UnixListener, link: &Arc<Link>, wake: &Arc<UnixStream>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        if !super::same_user(&conn) {
            continue;
        }
        let (link, wake) = (Arc::clone(link), Arc::clone(wake));
        let _ = std::thread::Builder::new().name("gpushim-control-client".into()).spawn(move || {
            let _ = answer(conn, &link, &wake);
        });
    }
}

/// Reads one request line from `conn` and writes its reply.
fn answer(conn: UnixStream, link: &Link, wake: &UnixStream) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut line = String::new();
    BufReader::new(&conn).take_line(&mut line)?;
    let reply = reply(line.trim(), link, wake);
    let mut out = &conn;
    out.write_all(reply.as_bytes())?;
    out.write_all(b"\n")
}

/// Reads one line of at most 1 KiB.
trait TakeLine {
    fn take_line(&mut self, line: &mut String) -> std::io::Result<()>;
}

impl<R: BufRead> TakeLine for R {
    fn take_line(&mut self, line: &mut String) -> std::io::Result<()> {
        std::io::Read::take(self, 1024).read_line(line).map(|_| ())
    }
}

/// The reply to one request, as one line of JSON.
pub(super) fn reply(request: &str, link: &Link, wake: &UnixStream) -> String {
    let mut words = request.split_whitespace();
    let error = |why: String| serde_json::json!({ "error": why }).to_string();
    match words.next() {
        Some("frame") => {
            let window = match words.next().map(str::parse::<f64>) {
                None => DEFAULT_WINDOW_S,
                Some(Ok(w)) if w.is_finite() && w > 0.0 => w,
                Some(_) => return error("frame: the window is a number of seconds above 0".into()),
            };
            let top = match words.next().map(str::parse::<usize>) {
                None => DEFAULT_TOP,
                Some(Ok(n)) if n > 0 => n.min(1000),
                Some(_) => return error("frame: the number of sites is 1 or more".into()),
            };
            if !link.watched.swap(true, Ordering::Relaxed) {
                // The first frame: the loop names the top sites and ranks the suspects now.
                let (tx, rx) = std::sync::mpsc::channel();
                let ended = {
                    let mut s = link.shared.lock().unwrap_or_else(|e| e.into_inner());
                    s.waiters.push(tx);
                    s.ended
                };
                if !ended {
                    link.pending.store(true, Ordering::Relaxed);
                    let _ = (&*wake).write(&[1]);
                    let _ = rx.recv_timeout(FIRST_FRAME_WAIT);
                }
            }
            let s = link.shared.lock().unwrap_or_else(|e| e.into_inner());
            serde_json::to_string(&frame_of(&s, window, top)).unwrap_or_else(|e| error(e.to_string()))
        }
        Some("snapshot") => {
            let (tx, rx) = std::sync::mpsc::channel();
            {
                let mut s = link.shared.lock().unwrap_or_else(|e| e.into_inner());
                if s.ended {
                    return error("the program has ended; its final report is being written".into());
                }
                s.requests.push(tx);
            }
            link.pending.store(true, Ordering::Relaxed);
            let _ = (&*wake).write(&[1]);
            match rx.recv_timeout(SNAPSHOT_WAIT) {
                Ok(Ok(path)) => serde_json::json!({ "snapshot": path }).to_string(),
                Ok(Err(why)) => error(why),
                Err(_) => error(format!("no snapshot within {} s", SNAPSHOT_WAIT.as_secs())),
            }
        }
        Some("ask") => {
            {
                let mut s = link.shared.lock().unwrap_or_else(|e| e.into_inner());
                if s.ended {
                    return error("the program has ended; its final report is being written".into());
                }
                s.asks += 1;
            }
            link.pending.store(true, Ordering::Relaxed);
            let _ = (&*wake).write(&[1]);
            serde_json::json!({ "asked": true }).to_string()
        }
        _ => error(format!("unknown request {request:?}: frame [WINDOW_S [TOP]], snapshot or ask")),
    }
}

/// The frame of `s` with growth over `window_s`, the `top` sites each way.
pub(super) fn frame_of(s: &Shared, window_s: f64, top: usize) -> Frame {
    let first = s.first_ts_ns.unwrap_or(0);
    let secs = |ts: u64| ts.saturating_sub(first) as f64 / 1e9;
    let window_ns = (window_s * 1e9) as u64;
    let rows = frame::sites(&s.history, window_ns, top, &s.names, &s.suspects, &s.holders);
    let traced: u64 = s.gpus.iter().map(|g| g.1.live_bytes).sum();
    let driver: Vec<DriverLine> = s
        .driver
        .iter()
        .flat_map(|d| d.gpus.iter())
        .map(|&(i, used)| DriverLine { nvml_index: i, used_bytes: used, untraced_bytes: None })
        .collect();
    let one = driver.len() == 1 && s.gpus.len() <= 1;
    let driver = driver
        .into_iter()
        .map(|d| DriverLine { untraced_bytes: one.then(|| d.used_bytes.saturating_sub(traced)), ..d })
        .collect();
    Frame {
        format: frame::FORMAT.to_string(),
        version: frame::VERSION,
        pid: s.pid,
        command: s.command.clone(),
        rank: s.rank,
        local_rank: s.local_rank,
        uptime_s: s.history.back().map_or(0.0, |h| secs(h.ts_ns)),
        ended: s.ended,
        totals: s.totals.gauge,
        kinds: Kinds { device: s.kinds[0], managed: s.kinds[1], pinned_host: s.kinds[2] },
        gpus: s.gpus.iter().map(|&(ordinal, gauge)| GpuLine { ordinal, gauge }).collect(),
        driver,
        driver_unavailable: s.driver_unavailable.clone(),
        series: s.history.iter().map(|h| Point { t_s: secs(h.ts_ns), live_bytes: h.live_bytes }).collect(),
        window_s,
        window_covered_s: rows.span_ns as f64 / 1e9,
        sites_live: s.sites_live,
        rows_live: rows.all,
        sites: rows.lines,
        suspects: rows.suspects,
        holders_from: s.holders_from.clone(),
    }
}
