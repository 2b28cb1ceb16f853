//! Hostile input: damaged and random wire streams for the decoder (a deterministic stand-in for
//! the fuzz targets) and for `gpushim collect`, and malformed or extreme JSON for `gpushim report`
//! and `diff`.

use std::fs;
use std::path::{Path, PathBuf};

use gpushim_testkit::{hello, stream_of, Rng};
use gpushim_wire as wire;
use serde_json::Value;

use crate::util::*;

/// The command line of the streams' Hello.
const COMMAND: &[&str] = &["./train", "--steps", "9"];

/// A random event of a type this version writes, with fields that are often edge cases;
/// `seq` and `ts` stay plausible when `tame`.
fn random_event(g: &mut Rng, seq: &mut u64, tame: bool) -> wire::Event {
    let num = |g: &mut Rng, plain: u64| if tame { plain } else { g.edgy() };
    let kinds = wire::Kind::ALL;
    let kind = kinds[g.below(kinds.len() as u64) as usize];
    let api = wire::Api::ALL[g.below(wire::Api::ALL.len() as u64) as usize];
    let s = *seq;
    *seq += 1;
    let addr = 0x1000 * (1 + g.below(64));
    match g.below(9) {
        0..=2 => wire::Event::Alloc(wire::Alloc {
            seq: num(g, s),
            ts_ns: num(g, s * 1000),
            addr,
            size: if tame { 4096 } else { g.edgy() },
            kind,
            api,
            device: if g.chance(4) { -1 } else { g.below(4) as i32 },
            stream: g.edgy(),
            tid: g.next_u64() as u32,
            stack: if g.chance(3) { wire::NO_STACK } else { g.below(8) as u32 },
            ctx: if g.chance(4) { g.edgy() } else { 0 },
        }),
        3..=4 => wire::Event::Free(wire::Free {
            seq: num(g, s),
            ts_ns: num(g, s * 1000),
            addr,
            api,
            stream: 0,
            tid: 7,
            result: if g.chance(4) { g.next_u64() as i32 } else { 0 },
        }),
        5 => wire::Event::Failed(wire::Failed {
            seq: num(g, s),
            ts_ns: num(g, s * 1000),
            size: g.edgy(),
            kind,
            api,
            device: g.next_u64() as i32,
            tid: 1,
            stack: g.below(10) as u32,
            result: g.next_u64() as i32,
        }),
        6 => wire::Event::Snapshot(wire::Snapshot { boundary: num(g, s), ts_ns: num(g, s * 1000) }),
        7 => wire::Event::Stack(wire::Stack {
            id: g.below(10) as u32,
            frames: (0..g.below(6)).map(|_| g.edgy()).collect(),
        }),
        _ => match g.below(9) {
            6 => wire::Event::Map(wire::Map {
                seq: num(g, s),
                ts_ns: num(g, s * 1000),
                addr: if tame { addr } else { g.edgy() },
                size: g.edgy(),
                handle: g.below(8),
                tid: 1,
            }),
            7 => wire::Event::Unmap(wire::Unmap {
                seq: num(g, s),
                ts_ns: num(g, s * 1000),
                addr: if tame { addr } else { g.edgy() },
                size: g.edgy(),
                tid: 1,
                result: if g.chance(4) { g.next_u64() as i32 } else { 0 },
            }),
            8 => wire::Event::HandleRef(wire::HandleRef {
                seq: num(g, s),
                ts_ns: num(g, s * 1000),
                handle: g.below(8),
                addr: g.edgy(),
                api,
                device: g.next_u64() as i32,
                tid: 1,
            }),
            3 => wire::Event::PyRuntime(wire::PyRuntime {
                version: [0x030A_00F0, 0x030C_03F0, 0x030D_00F0, g.next_u64() as u32][g.below(4) as usize],
            }),
            4 => wire::Event::PyCode(wire::PyCode {
                id: g.below(6) as u32,
                filename: "train.py".into(),
                name: "step".into(),
                firstlineno: g.next_u64() as i32,
                linetable_format: if g.chance(2) {
                    wire::LineTableFormat::Pep626
                } else {
                    wire::LineTableFormat::Pep657
                },
                linetable: (0..g.below(40)).map(|_| g.next_u64() as u8).collect(),
            }),
            5 => wire::Event::PyStack(wire::PyStack {
                id: g.below(10) as u32,
                frames: (0..g.below(5))
                    .map(|_| wire::PyFrame { code: g.below(8) as u32, offset: g.edgy() as u32, entry: g.chance(2) })
                    .collect(),
            }),
            0 => wire::Event::MemInfo(wire::MemInfo {
                ts_ns: g.edgy(),
                device: g.next_u64() as i32,
                free: g.edgy(),
                total: g.edgy(),
            }),
            1 => wire::Event::Note("note ✓ with unicode".into()),
            _ => wire::Event::Module(wire::Module {
                path: "/nonexistent/libx.so".into(),
                bias: g.edgy(),
                ranges: vec![(g.edgy(), g.edgy())],
            }),
        },
    }
}

/// Damages a stream in one of several ways.
fn mutate(g: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    let len = b.len() as u64;
    match g.below(8) {
        0 => {
            for _ in 0..1 + g.below(8) {
                let i = g.below(len) as usize;
                b[i] ^= 1 << g.below(8);
            }
        }
        1 => {
            let i = g.below(len) as usize;
            b[i] = g.next_u64() as u8;
        }
        2 => b.truncate(g.below(len) as usize),
        3 => {
            let i = g.below(len + 1) as usize;
            let junk: Vec<u8> = (0..1 + g.below(40)).map(|_| g.next_u64() as u8).collect();
            b.splice(i..i, junk);
        }
        4 => {
            // A frame length set to something else, often huge.
            if len >= 16 {
                let i = wire::HEADER_LEN + g.below(len - 15) as usize;
                // (The decoder zero-fills a buffer of the length it reads before it finds the
                // stream short: a length near MAX_FRAME costs 16 MiB of work, so only seldom.)
                let v = match g.below(7) {
                    0 => 0,
                    1 => 1,
                    2 => wire::MAX_FRAME + 1,
                    3 => u32::MAX,
                    4 => g.below(64) as u32,
                    5 => g.next_u64() as u32 | 1 << 31,
                    _ if g.chance(20) => wire::MAX_FRAME,
                    _ => 1 << g.below(16),
                };
                b[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        5 => {
            let i = g.below(len) as usize;
            let j = (i + g.below(64) as usize).min(b.len());
            let chunk = b[i..j].to_vec();
            b.splice(i..i, chunk);
        }
        6 => b = (0..g.below(300)).map(|_| g.next_u64() as u8).collect(),
        _ => {
            b.truncate(wire::HEADER_LEN);
            b.extend((0..g.below(300)).map(|_| g.next_u64() as u8));
        }
    }
    b
}

#[test]
fn wire_decoder_survives_100000_damaged_streams() {
    // A frame longer than the decoder's in-place buffer (64 KiB) decodes, and cut short it is
    // a truncation (read as the bytes arrive, never allocated up front).
    let big = wire::Event::Note("x".repeat(200 << 10));
    let whole = stream_of(std::slice::from_ref(&big));
    let mut dec = wire::Decoder::new(&whole[..]).unwrap();
    assert_eq!(dec.next_event().unwrap(), Some(big));
    assert_eq!(dec.next_event().unwrap(), None);
    let mut dec = wire::Decoder::new(&whole[..whole.len() - 1]).unwrap();
    assert!(matches!(dec.next_event(), Err(wire::WireError::Truncated)));

    let out = Path::new("/nonexistent-out");
    for seed in 1..=100_000u64 {
        let mut g = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut seq = 0;
        let mut events = vec![hello(out, COMMAND)];
        events.extend((0..g.below(12)).map(|_| random_event(&mut g, &mut seq, false)));
        let bytes = mutate(&mut g, stream_of(&events));
        let r = std::panic::catch_unwind(|| {
            let mut n = 0usize;
            if let Ok(mut dec) = wire::Decoder::new(&bytes[..]) {
                // Each frame takes at least 5 bytes, so the decoder must stop.
                while let Ok(Some(_)) = dec.next_event() {
                    n += 1;
                    assert!(n <= bytes.len() / 5, "more events than the bytes can hold");
                }
            }
            // Each frame body on its own: whatever decodes encodes back to the same bytes.
            let mut at = wire::HEADER_LEN.min(bytes.len());
            while let Some(len) = bytes.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize) {
                let Some(body) = bytes.get(at + 4..(at + 4).saturating_add(len)) else { break };
                if let Ok(Some(ev)) = wire::decode_body(body) {
                    let mut again = Vec::new();
                    wire::encode(&ev, &mut again);
                    assert_eq!(&again[4..], body, "{ev:?} encodes differently");
                }
                at += 4 + len;
            }
            // Any slice is a candidate frame body too.
            let i = (seed as usize * 7) % (bytes.len() + 1);
            let _ = wire::decode_body(&bytes[i..]);
        });
        assert!(r.is_ok(), "seed {seed}: the decoder panicked on {bytes:02x?}");
    }
}

#[test]
fn collector_reports_what_was_valid_in_a_broken_stream_with_one_error() {
    let dir = TempDir::new("damaged-streams");
    let out = dir.path().join("out");
    fs::create_dir(&out).unwrap();
    let mut seq = 0;
    let mut g = Rng(7);
    let mut events = vec![hello(&out, COMMAND)];
    // Ten 1 MiB allocations, the last two freed.
    for i in 0..10u64 {
        events.push(wire::Event::Alloc(wire::Alloc {
            seq: i,
            ts_ns: i * 1000,
            addr: 0x7000_0000 + i * 0x10_0000,
            size: MIB,
            kind: wire::Kind::Device,
            api: wire::Api::CudaMalloc,
            device: 0,
            stream: 0,
            tid: 1,
            stack: wire::NO_STACK,
            ctx: 0,
        }));
        seq += 1;
    }
    for i in 8..10u64 {
        events.push(wire::Event::Free(wire::Free {
            seq,
            ts_ns: 20_000 + i,
            addr: 0x7000_0000 + i * 0x10_0000,
            api: wire::Api::CudaFree,
            stream: 0,
            tid: 1,
            result: 0,
        }));
        seq += 1;
    }
    let good = stream_of(&events);
    let mut last = Vec::new();
    wire::encode(&random_event(&mut g, &mut seq, true), &mut last);
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        (
            "truncated",
            [&good[..], &last[..last.len() - 3]].concat(),
            Some("event stream ends in the middle of a frame"),
        ),
        ("garbage", [&good[..], &[0xee; 40][..]].concat(), Some("frame length")),
        (
            "bad value",
            [&good[..], &[6, 0, 0, 0, 4, 0, 0, 0, 0, 0][..]].concat(),
            Some("frame with tag 4 has the wrong size"),
        ),
    ];
    for (what, bytes, want) in cases {
        let input = dir.path().join(format!("{what}.stream"));
        fs::write(&input, &bytes).unwrap();
        let o = gpushim(["collect".as_ref(), "--input".as_ref(), input.as_os_str()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        let broken: Vec<&str> = err.lines().filter(|l| l.contains(" broken: ")).collect();
        assert_eq!(broken.len(), 1, "{what}: one error line: {err}");
        assert!(broken[0].contains(want.unwrap()), "{what}: {err}");
        let path = out.join("gpushim-4242.json");
        let r: Value =
            serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap_or_else(|e| panic!("{what}: {e}: {err}"));
        assert_eq!(r["reason"], "killed", "{what}");
        assert_eq!(total(&r, "alloc_count"), 10, "{what}");
        assert_eq!(total(&r, "free_count"), 2, "{what}");
        assert_eq!(total(&r, "live_bytes"), 8 * MIB, "{what}");
        fs::remove_file(&path).unwrap();
    }
    // Broken before the Hello: no pid, nowhere to write; exit 1 and one line. Empty: nothing.
    for (what, bytes, code, lines) in [
        ("not a stream", b"NOTGPUSHIM at all".to_vec(), 1, 1),
        ("header only", good[..wire::HEADER_LEN + 3].to_vec(), 1, 1),
        ("empty", Vec::new(), 0, 0),
    ] {
        let input = dir.path().join("pre-hello.stream");
        fs::write(&input, &bytes).unwrap();
        let o = gpushim(["collect".as_ref(), "--input".as_ref(), input.as_os_str()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{what}: {err}");
        assert_eq!(err.lines().count(), lines, "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert!(names_in(&out).is_empty(), "{what}");
    }
}

#[test]
fn collector_survives_random_event_streams() {
    // Random but well-framed events (sequence numbers, times and sizes at their extremes,
    // unknown stacks, frees of nothing), often damaged: the collector ends with 0 or 1, never a
    // panic, and writes a report whenever the Hello came through.
    let dir = TempDir::new("random-streams");
    // 60 streams by default (about 2 s); GPUSHIM_FUZZ_STREAMS=N for a longer run.
    let n: u64 = std::env::var("GPUSHIM_FUZZ_STREAMS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    for seed in 1..=n {
        let out = dir.path().join(format!("out-{seed}"));
        fs::create_dir(&out).unwrap();
        let mut g = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
        let mut seq = 0;
        let tame = g.chance(3);
        let mut events = vec![hello(&out, COMMAND)];
        events.extend((0..g.below(200)).map(|_| random_event(&mut g, &mut seq, tame)));
        if g.chance(2) {
            events.push(wire::Event::Exit(wire::Exit { ts_ns: g.edgy() }));
        }
        let mut bytes = stream_of(&events);
        let hello_len = stream_of(&events[..1]).len();
        if g.chance(2) {
            // Damage after the Hello.
            let tail = mutate(&mut g, bytes.split_off(hello_len));
            bytes.extend(tail);
        }
        let input = dir.path().join(format!("{seed}.stream"));
        fs::write(&input, &bytes).unwrap();
        let o = gpushim(["collect".as_ref(), "--input".as_ref(), input.as_os_str()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(matches!(o.status.code(), Some(0 | 1)), "seed {seed}: {:?}: {err}", o.status);
        assert!(!err.contains("panicked"), "seed {seed}: {err}");
        let r: Value = serde_json::from_str(
            &fs::read_to_string(out.join("gpushim-4242.json")).unwrap_or_else(|e| panic!("seed {seed}: {e}: {err}")),
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(r["pid"], 4242, "seed {seed}");
    }
}

/// Sets every number in `v` to what `f` makes of it (with the key it sits under).
fn rewrite_numbers(v: &mut Value, key: &str, f: &dyn Fn(&str, &serde_json::Number) -> Value) {
    match v {
        Value::Number(n) => *v = f(key, n),
        Value::Array(a) => a.iter_mut().for_each(|x| rewrite_numbers(x, key, f)),
        Value::Object(o) => o.iter_mut().for_each(|(k, x)| rewrite_numbers(x, k, f)),
        _ => {}
    }
}

#[test]
fn report_rejects_malformed_json_in_one_line_and_never_panics() {
    let t = Target::new("leak_example", "report-malformed").args(&["5"]);
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let good_path = t.dir.path().join(format!("gpushim-{}.json", d.pid()));
    let good = fs::read_to_string(&good_path).unwrap();
    let dir = t.dir.path();
    let mut deep = "[".repeat(10_000);
    deep += &"]".repeat(10_000);
    let bad: Vec<(&str, String)> = vec![
        ("empty", String::new()),
        ("truncated", good[..good.len() / 2].to_string()),
        ("wrong type", good.replacen("\"pid\": ", "\"pid\": \"x\", \"was\": ", 1)),
        ("huge integer", good.replacen("\"pid\": ", "\"pid\": 123456789012345678901234567890, \"was\": ", 1)),
        ("huge float", good.replacen("\"duration_s\": ", "\"duration_s\": 1e999, \"was\": ", 1)),
        ("negative size", good.replacen("\"live_bytes\": ", "\"live_bytes\": -1, \"was\": ", 1)),
        ("deeply nested", deep),
        ("binary", String::from_utf8_lossy(&[0xff, 0xfe, 0, 1, 2]).into_owned()),
    ];
    let mut cases: Vec<(String, PathBuf)> = Vec::new();
    for (what, text) in bad {
        let p = dir.join(format!("{}.json", what.replace(' ', "-")));
        fs::write(&p, text).unwrap();
        cases.push((what.to_string(), p));
    }
    let a_dir = dir.join("a-directory.json");
    fs::create_dir(&a_dir).unwrap();
    cases.push(("a directory".into(), a_dir));
    for (what, p) in &cases {
        let o = gpushim(["report".as_ref(), p.as_os_str()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(err.starts_with("gpushim: ") && err.contains(&p.display().to_string()), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
    }
    // Well-formed reports with numbers at their extremes: rendered or refused, never a panic.
    let parsed: Value = serde_json::from_str(&good).unwrap();
    type Rewrite<'a> = &'a dyn Fn(&str, &serde_json::Number) -> Value;
    let extremes: [(&str, Rewrite); 3] = [
        ("largest", &|key, n| {
            if n.is_f64() {
                serde_json::json!(1.7e308)
            } else if ["pid", "ppid", "id", "site", "snapshot", "line", "ordinal", "device", "result"].contains(&key) {
                Value::Number(n.clone())
            } else {
                serde_json::json!(u64::MAX)
            }
        }),
        ("zero", &|key, n| {
            if ["pid", "id", "site", "ordinal", "line"].contains(&key) {
                Value::Number(n.clone())
            } else if n.is_f64() {
                serde_json::json!(0.0)
            } else {
                serde_json::json!(0)
            }
        }),
        ("negative time", &|_, n| if n.is_f64() { serde_json::json!(-1.7e308) } else { Value::Number(n.clone()) }),
    ];
    for (what, f) in extremes {
        let mut v = parsed.clone();
        rewrite_numbers(&mut v, "", f);
        let p = dir.join(format!("extreme-{}.json", what.replace(' ', "-")));
        fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        for args in [
            vec!["report".as_ref(), p.as_os_str()],
            vec!["report".as_ref(), "--format".as_ref(), "json".as_ref(), p.as_os_str()],
            vec!["diff".as_ref(), good_path.as_os_str(), p.as_os_str()],
        ] {
            let o = gpushim(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(matches!(o.status.code(), Some(0 | 2)), "{what} {args:?}: {:?}: {err}", o.status);
            assert!(!err.contains("panicked"), "{what} {args:?}: {err}");
            if o.status.code() == Some(2) {
                assert_eq!(err.lines().count(), 1, "{what} {args:?}: {err}");
            }
        }
    }
}

/// `gpushim report` on an endless input (`/dev/zero`, as a file and on standard input) grew
/// without bound; it stops past 1 GiB, more than any report, with one line. The address space
/// is capped at 4 GiB so that the old behaviour fails here instead of taking the machine.
#[test]
fn report_on_an_endless_input_stops_with_one_line() {
    use std::os::unix::process::CommandExt;
    for stdin in [false, true] {
        let mut cmd = std::process::Command::new(collector());
        cmd.arg("report").arg(if stdin { "-" } else { "/dev/zero" });
        if stdin {
            cmd.stdin(std::fs::File::open("/dev/zero").unwrap());
        }
        // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit { rlim_cur: 4 << 30, rlim_max: 4 << 30 };
                if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("it is larger than 1024 MiB, more than any report"), "stdin {stdin}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
