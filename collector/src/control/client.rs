//! The client's side of the control endpoint: one request, one reply, on `@gpushim-<pid>`.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

use super::frame::{Frame, FORMAT, VERSION};
use super::socket_name;

/// Why a request got no answer.
#[derive(Debug)]
pub enum Failure {
    /// Nothing listens for that pid: no collector (or one from before the endpoint).
    NoCollector,
    /// The collector closed the connection or did not answer in time: it is gone or stuck.
    Gone(String),
    /// It answered with an error.
    Refused(String),
}

/// Asks the collector of traced `pid` (the pid the program has in its own PID namespace) to
/// have the shim take a snapshot of the program, as its signal would, without signalling the
/// program; `collector`: the collector's own pid as we see it, when known, which the endpoint's
/// peer must be (the name is not unique across PID namespaces). `Some(true)` if it said it
/// asked, `Some(false)` if it answered otherwise (a collector from before the request), `None`
/// if nothing (or another process) listens yet.
pub fn ask_snapshot(pid: u32, collector: Option<i32>, timeout: Duration) -> Option<bool> {
    let addr = SocketAddr::from_abstract_name(socket_name(pid).as_bytes()).ok()?;
    let conn = UnixStream::connect_addr(&addr).ok()?;
    if !super::same_user(&conn) || collector.is_some_and(|c| super::peer(&conn).map(|p| p.pid) != Some(c)) {
        return None;
    }
    let asked = || -> std::io::Result<bool> {
        conn.set_read_timeout(Some(timeout))?;
        conn.set_write_timeout(Some(timeout))?;
        (&conn).write_all(b"ask\n")?;
        let mut line = String::new();
        BufReader::new(&conn).read_line(&mut line)?;
        Ok(serde_json::from_str::<serde_json::Value>(&line).is_ok_and(|v| v["asked"] == true))
    };
    Some(asked().unwrap_or(false))
}

/// Sends `request` to the collector of traced `pid` and returns its reply line.
pub fn request(pid: u32, request: &str, timeout: Duration) -> Result<String, Failure> {
    let addr = SocketAddr::from_abstract_name(socket_name(pid).as_bytes()).map_err(|e| Failure::Gone(e.to_string()))?;
    let conn = UnixStream::connect_addr(&addr).map_err(|_| Failure::NoCollector)?;
    // Anyone may bind a name of the abstract namespace first: only a collector of our own user
    // (or root) is believed.
    if !super::same_user(&conn) {
        return Err(Failure::Refused(format!("@{} is held by a process of another user", socket_name(pid))));
    }
    let gone = |e: std::io::Error| Failure::Gone(e.to_string());
    conn.set_read_timeout(Some(timeout)).map_err(gone)?;
    conn.set_write_timeout(Some(timeout)).map_err(gone)?;
    (&conn).write_all(format!("{request}\n").as_bytes()).map_err(gone)?;
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line).map_err(gone)?;
    if line.is_empty() {
        return Err(Failure::Gone("the connection closed without an answer".into()));
    }
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
        if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
            return Err(Failure::Refused(e.to_string()));
        }
    }
    Ok(line)
}

/// A frame of traced `pid` with growth over `window_s` seconds.
pub fn frame(pid: u32, window_s: f64) -> Result<Frame, Failure> {
    let line = request(pid, &format!("frame {window_s}"), Duration::from_secs(10))?;
    let f: Frame = serde_json::from_str(&line).map_err(|e| Failure::Refused(format!("not a frame: {e}")))?;
    if f.format != FORMAT || f.version > VERSION {
        return Err(Failure::Refused(format!(
            "a frame of format {} version {} (this gpushim reads {FORMAT} up to version {VERSION})",
            f.format, f.version
        )));
    }
    Ok(f)
}

/// Asks the collector of traced `pid` for a snapshot report; its path.
pub fn snapshot(pid: u32) -> Result<PathBuf, Failure> {
    let line = request(pid, "snapshot", Duration::from_secs(70))?;
    let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| Failure::Refused(e.to_string()))?;
    v.get("snapshot")
        .and_then(|p| p.as_str())
        .map(PathBuf::from)
        .ok_or_else(|| Failure::Refused(format!("not a snapshot's answer: {}", line.trim())))
}
