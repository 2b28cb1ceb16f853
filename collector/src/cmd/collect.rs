//! `gpushim collect`: reads an event stream, from the socket the shim spawned it on (its
//! standard input) or from a recorded file, and writes the reports; the collection itself is
//! [`crate::collect`].

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::signals;
use crate::collect;
use crate::error::{BROKEN_STREAM, OK};
use crate::settings::Settings;

/// Collects the stream in `input` (standard input if `None` or `-`), writing the reports into
/// `output` (the directory the stream names if `None`); with `GPUSHIM_HTML=1` in the
/// environment (the shim passes the program's on) each report is also written as an HTML page.
///
/// # Errors
/// Those of [`collect::collect`], and exit code 2 if `input` cannot be opened. A stream that
/// broke after its Hello event is no error: the exit code is 1 then.
///
/// With `hold_exit` (the collector cannot outlive the program) the end of the stream is
/// confirmed to the shim only once the report is written and `gpushim run` told.
pub fn run(input: Option<PathBuf>, output: Option<PathBuf>, hold_exit: bool) -> Result<ExitCode> {
    let s = Settings::global();
    let html = s.html.as_deref().and_then(gpushim_wire::setting::switch) == Some(true);
    let live = input.as_ref().is_none_or(|p| p.as_os_str() == "-");
    let mut err = io::stderr().lock();
    check_settings(s, &mut err);
    let interval = intervals(s.report_interval.as_deref(), s.report_keep.as_deref(), &mut err);
    let metrics = crate::metrics::config(s.metrics.as_deref(), s.metrics_top.as_deref(), &mut err)
        .map(|m| crate::metrics::Config { input_fd: live.then_some(0), ..m });
    let opts = collect::Options {
        output_dir: output,
        html,
        sample_driver: live,
        interval,
        metrics,
        control: live.then_some(0),
        reorder_bytes: count_setting("GPUSHIM_REORDER_MIB", s.reorder_mib.as_deref(), &mut err)
            .map(|m| m.saturating_mul(1 << 20)),
        max_stacks: count_setting("GPUSHIM_MAX_STACKS", s.max_stacks.as_deref(), &mut err),
        live,
        record_dir: if live { record_dir(s) } else { None },
        frames_in: input.as_ref().filter(|_| !live).map(|p| p.with_extension("frames.json")).filter(|p| p.is_file()),
    };
    signals::ignore_file_size_signal();
    let outcome = match input.filter(|p| p.as_os_str() != "-") {
        Some(path) => {
            let f = File::open(&path).with_context(|| format!("cannot read event stream {}", path.display()))?;
            collect::collect(f, &opts, &mut err)?
        }
        None => {
            signals::hold_stop_signals();
            let run = super::run::tell_run_a_collector_started();
            // Snapshots asked for through the shim's C API are answered on the same socket;
            // the program's exit is released as soon as the stream is read, after any answers
            // (the report is finished on our own); on an early error, after it.
            let mut answers: Box<dyn Write> = match stdin_copy() {
                Some(f) => Box::new(f),
                None => Box::new(io::sink()),
            };
            let mut confirmed = false;
            let copy = match record_dir(s) {
                Some(dir) => Copy::Waiting { dir, head: Vec::new() },
                None => Copy::Off,
            };
            let input = Recorded { input: io::stdin().lock(), copy };
            let outcome = collect::collect_with(input, &opts, &mut err, &mut answers, &mut || {
                if !hold_exit {
                    confirm_to_shim();
                    confirmed = true;
                }
            });
            if let (Some(run), Ok(o)) = (run, &outcome) {
                super::run::tell_run_the_report(run, o.report.as_deref());
            }
            if !confirmed {
                confirm_to_shim();
            }
            outcome?
        }
    };
    Ok(ExitCode::from(if outcome.broken.is_some() { BROKEN_STREAM } else { OK }))
}

/// The rolling reports asked for by `GPUSHIM_REPORT_INTERVAL` (seconds, above 0, fractions
/// allowed) and `GPUSHIM_REPORT_KEEP` (how many to keep, at least 1; default
/// [`collect::DEFAULT_KEEP`]), which the collector inherits from the program's environment. A
/// bad value is said in one line on `err`: no interval reports then, or the default number kept.
fn intervals(every: Option<&str>, keep: Option<&str>, err: &mut dyn Write) -> Option<collect::Intervals> {
    let every = every.filter(|v| !v.is_empty())?;
    let secs = match every.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => s,
        _ => {
            let _ = writeln!(
                err,
                "gpushim: GPUSHIM_REPORT_INTERVAL={every} is not a number of seconds above 0; no interval reports"
            );
            return None;
        }
    };
    let keep = match keep.filter(|v| !v.is_empty()).map(|k| k.trim().parse::<usize>()) {
        None => collect::DEFAULT_KEEP,
        Some(Ok(k)) if k >= 1 => k,
        Some(_) => {
            let _ = writeln!(
                err,
                "gpushim: GPUSHIM_REPORT_KEEP={} is not a number of reports of 1 or more; keeping {}",
                keep.unwrap_or_default(),
                collect::DEFAULT_KEEP
            );
            collect::DEFAULT_KEEP
        }
    };
    Some(collect::Intervals { every_ns: (secs * 1e9) as u64, keep })
}

/// Says in one line on `err` each collector setting whose value it does not take, with what is
/// used instead: the switches `GPUSHIM_HTML`, `GPUSHIM_NVML`, `GPUSHIM_DEFAULT_SUPPRESSIONS`
/// (`gpushim_wire::setting::switch`: `0`/`1`, `off`/`on`, `false`/`true`, `no`/`yes`) and `GPUSHIM_NVML_INTERVAL_MS` (a whole number of ms above 0), which were taken
/// silently.
fn check_settings(s: &Settings, err: &mut dyn Write) {
    for (name, value, what) in [
        ("GPUSHIM_HTML", &s.html, "no HTML reports"),
        ("GPUSHIM_NVML", &s.nvml, "NVML is sampled"),
        ("GPUSHIM_DEFAULT_SUPPRESSIONS", &s.default_suppressions, "the built-in suppressions are used"),
    ] {
        if let Some(v) = value.as_ref().filter(|v| !v.is_empty() && gpushim_wire::setting::switch(v).is_none()) {
            let _ = writeln!(err, "gpushim: {name}={v} {}; {what}", gpushim_wire::setting::NOT_A_SWITCH);
        }
    }
    if let Some(v) = s.nvml_interval_ms.as_ref().filter(|v| !v.is_empty()) {
        if !v.trim().parse::<u64>().is_ok_and(|ms| ms > 0) {
            let _ = writeln!(
                err,
                "gpushim: GPUSHIM_NVML_INTERVAL_MS={v} is not a whole number of ms above 0; using {}",
                crate::explain::nvml::DEFAULT_INTERVAL_MS
            );
        }
    }
}

/// A bound set in the environment (`GPUSHIM_REORDER_MIB`, `GPUSHIM_MAX_STACKS`, `value`): a
/// whole number of at least 1, or `None` (the default) when unset; a bad value is said in one
/// line on `err` and the default is used.
fn count_setting(name: &str, value: Option<&str>, err: &mut dyn Write) -> Option<usize> {
    let v = value.filter(|v| !v.is_empty())?;
    match v.trim().replace('_', "").parse::<usize>() {
        Ok(n) if n >= 1 => Some(n),
        _ => {
            let _ = writeln!(err, "gpushim: {name}={v} is not a whole number of at least 1; using the default");
            None
        }
    }
}

/// Tells the shim, through the socket that is our stdin, that the whole stream was read: one
/// byte, then both directions of the socket are shut down, so that the shim, which waits for
/// the end of the socket, lets the program exit now while the report is finished (the
/// descriptor itself stays open: its number is not reused by a report file). Without the byte
/// the shim says on the program's stderr that the collector died. Errors are ignored: the
/// program may be gone, and standard input may be a file (`--input -`).
fn confirm_to_shim() {
    use std::os::fd::{AsFd, AsRawFd};
    if let Ok(fd) = io::stdin().as_fd().try_clone_to_owned() {
        let _ = File::from(fd).write_all(gpushim_wire::END_OF_STREAM);
    }
    // SAFETY: shutdown on our own standard input; on anything but a socket it fails (ENOTSOCK)
    // and changes nothing.
    unsafe { libc::shutdown(io::stdin().as_fd().as_raw_fd(), libc::SHUT_RDWR) };
}

/// A writable copy of standard input: the socket from the shim.
fn stdin_copy() -> Option<File> {
    use std::os::fd::AsFd;
    io::stdin().as_fd().try_clone_to_owned().ok().map(File::from)
}

/// The live stream, copied as it is read into a file of the directory `GPUSHIM_RECORD` names
/// (made if it does not exist, as the output directory is): `stream-<pid>.gpushim`, the pid
/// being the traced program's, read from the stream's Hello event; for `gpushim collect FILE`
/// to read again: the same events give the same suspects, which is how the verdict is worked
/// on without the GPU the program ran on. A copy that fails stops copying; the collection goes
/// on.
struct Recorded<R> {
    input: R,
    copy: Copy,
}

/// Where [`Recorded`] stands.
enum Copy {
    /// Nothing is copied.
    Off,
    /// The bytes read until the Hello event has been read whole, which names the file.
    Waiting { dir: PathBuf, head: Vec<u8> },
    /// Copying into the file.
    On(File),
}

impl Copy {
    /// Takes `bytes` (none: the stream ended), opening the file once the Hello event is read
    /// whole, or once it is clear there is none (then named by the collector's pid).
    fn take(&mut self, bytes: &[u8]) {
        match self {
            Copy::Off => {}
            Copy::On(f) => {
                if f.write_all(bytes).is_err() {
                    *self = Copy::Off;
                }
            }
            Copy::Waiting { dir, head } => {
                head.extend_from_slice(bytes);
                let pid = match hello_pid(head) {
                    Head::Short if !bytes.is_empty() => return,
                    Head::Pid(pid) => pid,
                    Head::Short | Head::NoHello => std::process::id(),
                };
                let path = collect::record_path(dir, pid);
                let opened = std::fs::create_dir_all(&*dir).and_then(|()| File::create(&path));
                *self = match opened.and_then(|mut f| f.write_all(head).map(|()| f)) {
                    Ok(f) => Copy::On(f),
                    Err(e) => {
                        eprintln!(
                            "gpushim: GPUSHIM_RECORD: cannot write {}: {e}; the stream is not recorded",
                            path.display()
                        );
                        Copy::Off
                    }
                };
            }
        }
    }
}

/// What the start of a stream says of the program's pid.
#[derive(Debug, PartialEq)]
enum Head {
    /// Not yet all of the header and the first frame.
    Short,
    /// The pid of the Hello event the stream starts with.
    Pid(u32),
    /// The stream does not start with a Hello event.
    NoHello,
}

/// The pid in `head`'s first frame, a Hello event (`gpushim_wire`: a 12-byte header, then each
/// frame's length, `u32` little-endian, and its body).
fn hello_pid(head: &[u8]) -> Head {
    let h = gpushim_wire::HEADER_LEN;
    let Some(len) = head.get(h..h + 4) else { return Head::Short };
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
    if len > gpushim_wire::MAX_FRAME {
        return Head::NoHello;
    }
    let Some(body) = head.get(h + 4..h + 4 + len as usize) else { return Head::Short };
    match gpushim_wire::decode_body(body) {
        Ok(Some(gpushim_wire::Event::Hello(hello))) => Head::Pid(hello.pid),
        _ => Head::NoHello,
    }
}

impl<R: io::Read> io::Read for Recorded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.input.read(buf)?;
        if n > 0 || !buf.is_empty() {
            self.copy.take(&buf[..n]);
        }
        Ok(n)
    }
}

/// The directory `GPUSHIM_RECORD` names, if set.
fn record_dir(s: &Settings) -> Option<PathBuf> {
    s.record.as_ref().map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream whose Hello event names pid 7485, then an exit event.
    fn stream() -> Vec<u8> {
        let mut b = Vec::new();
        gpushim_wire::write_header(&mut b);
        let hello = gpushim_wire::Hello {
            pid: 7485,
            ppid: 1,
            start_unix_ns: 0,
            command: vec!["prog".into()],
            cwd: "/".into(),
            output_dir: "/".into(),
            shim_version: "0".into(),
        };
        gpushim_wire::encode(&gpushim_wire::Event::Hello(hello), &mut b);
        gpushim_wire::encode(&gpushim_wire::Event::Exit(gpushim_wire::Exit { ts_ns: 1 }), &mut b);
        b
    }

    #[test]
    fn the_hello_event_names_the_program() {
        let s = stream();
        assert_eq!(hello_pid(&s[..10]), Head::Short);
        assert_eq!(hello_pid(&s[..20]), Head::Short);
        assert_eq!(hello_pid(&s), Head::Pid(7485));
        let mut other = s[..12].to_vec();
        gpushim_wire::encode(&gpushim_wire::Event::Exit(gpushim_wire::Exit { ts_ns: 1 }), &mut other);
        assert_eq!(hello_pid(&other), Head::NoHello);
    }

    /// The recorded stream goes into a directory that did not exist (made, as the output
    /// directory is), named by the program's pid, whole, however the reads cut it.
    #[test]
    fn a_recording_makes_its_directory_and_is_named_by_the_program() {
        use std::io::Read;
        let tmp = crate::report::output::tests::TempDir::new("record");
        let dir = tmp.0.join("rec").join("stream");
        let s = stream();
        let mut r =
            Recorded { input: io::Cursor::new(s.clone()), copy: Copy::Waiting { dir: dir.clone(), head: Vec::new() } };
        let mut got = Vec::new();
        let mut buf = [0u8; 7];
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, s);
        drop(r);
        let names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["stream-7485.gpushim"]);
        assert_eq!(std::fs::read(dir.join("stream-7485.gpushim")).unwrap(), s);
    }

    #[test]
    fn collector_switches_with_bad_values_are_said_in_one_line_each() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let mut err = Vec::new();
        check_settings(
            &Settings::read(
                &env(&[
                    ("GPUSHIM_HTML", "x"),
                    ("GPUSHIM_NVML", "maybe"),
                    ("GPUSHIM_DEFAULT_SUPPRESSIONS", "x"),
                    ("GPUSHIM_NVML_INTERVAL_MS", "0"),
                ]),
                None,
            ),
            &mut err,
        );
        assert_eq!(
            String::from_utf8(err).unwrap(),
            format!(
                "gpushim: GPUSHIM_HTML=x is not a switch (1, on, yes, true or 0, off, no, false); no HTML reports\n\
                 gpushim: GPUSHIM_NVML=maybe is not a switch (1, on, yes, true or 0, off, no, false); NVML is sampled\n\
                 gpushim: GPUSHIM_DEFAULT_SUPPRESSIONS=x is not a switch (1, on, yes, true or 0, off, no, false); the built-in suppressions are used\n\
                 gpushim: GPUSHIM_NVML_INTERVAL_MS=0 is not a whole number of ms above 0; using {}\n",
                crate::explain::nvml::DEFAULT_INTERVAL_MS
            )
        );
        let mut err = Vec::new();
        check_settings(
            &Settings::read(
                &env(&[("GPUSHIM_HTML", "1"), ("GPUSHIM_NVML", "0"), ("GPUSHIM_NVML_INTERVAL_MS", "250")]),
                None,
            ),
            &mut err,
        );
        assert!(err.is_empty());
    }

    #[test]
    fn interval_settings_and_their_bad_values() {
        let mut err = Vec::new();
        assert_eq!(intervals(None, Some("4"), &mut err), None);
        assert_eq!(
            intervals(Some("0.5"), None, &mut err),
            Some(collect::Intervals { every_ns: 500_000_000, keep: collect::DEFAULT_KEEP })
        );
        assert_eq!(
            intervals(Some("60"), Some("10"), &mut err),
            Some(collect::Intervals { every_ns: 60_000_000_000, keep: 10 })
        );
        assert!(err.is_empty());
        assert_eq!(intervals(Some("soon"), None, &mut err), None);
        assert_eq!(intervals(Some("1"), Some("0"), &mut err).map(|i| i.keep), Some(collect::DEFAULT_KEEP));
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "gpushim: GPUSHIM_REPORT_INTERVAL=soon is not a number of seconds above 0; no interval reports\n\
             gpushim: GPUSHIM_REPORT_KEEP=0 is not a number of reports of 1 or more; keeping 3\n"
        );
    }

    #[test]
    fn bounds_from_the_environment_and_their_bad_values() {
        let mut err = Vec::new();
        assert_eq!(count_setting("GPUSHIM_MAX_STACKS", None, &mut err), None);
        assert_eq!(count_setting("GPUSHIM_MAX_STACKS", Some("5000"), &mut err), Some(5000));
        assert_eq!(count_setting("GPUSHIM_MAX_STACKS", Some("100_000"), &mut err), Some(100_000));
        assert!(err.is_empty());
        assert_eq!(count_setting("GPUSHIM_REORDER_MIB", Some("0"), &mut err), None);
        assert_eq!(count_setting("GPUSHIM_REORDER_MIB", Some("lots"), &mut err), None);
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "gpushim: GPUSHIM_REORDER_MIB=0 is not a whole number of at least 1; using the default\n\
             gpushim: GPUSHIM_REORDER_MIB=lots is not a whole number of at least 1; using the default\n"
        );
    }
}
