//! The endpoint's threads: the server that takes scrapes, a responder per connection that
//! answers each from the latest [`Snapshot`], and the service-discovery file.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{expose, Snapshot};

/// Whether `fd` has something to read (or has ended) within `wait`.
pub(super) fn readable(fd: i32, wait: Duration) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    loop {
        // SAFETY: one valid pollfd, for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n >= 0 {
            return n > 0;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // Cannot tell: as if there were more to read (no early snapshot).
            return true;
        }
    }
}

/// Requests of each connection not answered yet, by the connection's remote address: each
/// connection with any has one responder thread.
type Pending = Mutex<HashMap<Option<SocketAddr>, VecDeque<tiny_http::Request>>>;

/// Takes scrapes until the server is unblocked and hands each to its connection's responder
/// thread (started for the connection's first request not answered): this thread never
/// writes to a client, so a client that does not read its answers (its socket's buffers
/// full) holds up only its own connection, never other scrapes nor the collector's end
/// (a responder still writing then is left behind: the collector's exit ends it).
pub(super) fn serve(server: &tiny_http::Server, shared: &Arc<Mutex<Snapshot>>) {
    let pending: Arc<Pending> = Arc::default();
    for req in server.incoming_requests() {
        let key = req.remote_addr().copied();
        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(queue) = p.get_mut(&key) {
            // Its responder takes it after the ones before it.
            queue.push_back(req);
            continue;
        }
        p.insert(key, VecDeque::new());
        drop(p);
        let (pend, snap) = (Arc::clone(&pending), Arc::clone(shared));
        let first = Arc::new(Mutex::new(Some(req)));
        let taken = Arc::clone(&first);
        let spawned = std::thread::Builder::new()
            .name("gpushim-metrics-client".into())
            .spawn(move || {
                if let Some(req) = taken.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    respond_all(req, key, &pend, &snap);
                }
            })
            .is_ok();
        if !spawned {
            // No thread to be had: answered here.
            if let Some(req) = first.lock().unwrap_or_else(|e| e.into_inner()).take() {
                respond_all(req, key, &pending, shared);
            }
        }
    }
}

/// Answers `req`, then the requests of its connection that came meanwhile, until none is left.
fn respond_all(mut req: tiny_http::Request, key: Option<SocketAddr>, pending: &Pending, shared: &Mutex<Snapshot>) {
    loop {
        respond(req, shared);
        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
        match p.get_mut(&key).and_then(VecDeque::pop_front) {
            Some(next) => req = next,
            None => {
                p.remove(&key);
                return;
            }
        }
    }
}

/// Answers one scrape: `GET /metrics` with the latest snapshot (OpenMetrics when the request's
/// `Accept` asks for it, else text 0.0.4), `/` with a line pointing there, anything else 404.
fn respond(req: tiny_http::Request, shared: &Mutex<Snapshot>) {
    let path = req.url().split('?').next().unwrap_or("").to_string();
    let get = matches!(req.method(), tiny_http::Method::Get | tiny_http::Method::Head);
    let header = |name: &str, value: &str| tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).ok();
    let response = if !get {
        tiny_http::Response::from_string("only GET\n").with_status_code(405)
    } else if path == "/metrics" {
        let om = req
            .headers()
            .iter()
            .find(|h| h.field.equiv("Accept"))
            .is_some_and(|h| expose::wants_openmetrics(h.value.as_str()));
        let snap = shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let body = expose::render(&snap, om);
        let ct = if om { expose::OPENMETRICS_CONTENT_TYPE } else { expose::TEXT_CONTENT_TYPE };
        let mut r = tiny_http::Response::from_string(body);
        if let Some(h) = header("Content-Type", ct) {
            r = r.with_header(h);
        }
        r
    } else if path == "/" {
        tiny_http::Response::from_string("gpushim metrics: /metrics\n")
    } else {
        tiny_http::Response::from_string("not found\n").with_status_code(404)
    };
    let _ = req.respond(response);
}

/// The service-discovery file's content: one target group, the address and the process's
/// labels as `__meta_gpushim_<name>` (usable in relabelling; dropped after it, so they never
/// clash with the series' own labels).
pub(super) fn sd_json(addr: SocketAddr, labels: &[(String, String)]) -> serde_json::Value {
    let meta: serde_json::Map<String, serde_json::Value> =
        labels.iter().map(|(k, v)| (format!("__meta_gpushim_{k}"), serde_json::Value::from(v.as_str()))).collect();
    serde_json::json!([{ "targets": [addr.to_string()], "labels": meta }])
}

/// Writes `dir/stem.sd.json` whole: into a temporary file of the same directory, then renamed
/// over it, so that Prometheus never reads half a file.
pub(super) fn write_sd(
    dir: &Path,
    stem: &str,
    addr: SocketAddr,
    labels: &[(String, String)],
) -> std::io::Result<PathBuf> {
    let path = dir.join(format!("{stem}.sd.json"));
    let tmp = dir.join(format!(".{stem}.sd.json.tmp"));
    let mut text = serde_json::to_string_pretty(&sd_json(addr, labels)).map_err(std::io::Error::other)?;
    text.push('\n');
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}
