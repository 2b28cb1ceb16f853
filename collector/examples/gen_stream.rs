//! Writes a synthetic gpushim event stream to stdout, for measuring the collector
//! (`scripts/bench-collector.sh`).
//!
//! ```text
//! cargo run --release -p gpushim-collector --example gen_stream -- \
//!     [--events N] [--stacks S] [--live L] [--leak-every K] > stream.bin
//! gpushim collect --input stream.bin --output DIR
//! ```
//!
//! The stream: a Hello, one Module (this example's own executable, so frames symbolize), `S`
//! distinct stacks of 12 frames, then `N` allocation and free events with dense sequence
//! numbers, 1 µs apart. A working set of at most `L` allocations is kept: once it is full,
//! every allocation is preceded by the free of a pseudo-randomly chosen live one. Every `K`th
//! allocation (from stack 0) is never freed, a slow leak the collector should name. Ends with
//! an Exit event.

use std::io::{self, Write};
use std::process::ExitCode;

// A small deterministic generator (xorshift64*), enough to spread frees over the live set.
use gpushim_testkit::Rng;
use gpushim_wire::{encode, write_header, Alloc, Api, Event, Exit, Free, Hello, Kind, Module, Stack};

struct Args {
    events: u64,
    stacks: u32,
    live: usize,
    leak_every: u64,
}

fn parse() -> Result<Args, String> {
    let mut a = Args { events: 10_000_000, stacks: 1000, live: 10_000, leak_every: 10_000 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let n: u64 = value.replace('_', "").parse().map_err(|_| format!("{flag} {value}: not a number"))?;
        match flag.as_str() {
            "--events" => a.events = n,
            "--stacks" => a.stacks = u32::try_from(n).map_err(|_| "--stacks too large")?,
            "--live" => a.live = n as usize,
            "--leak-every" => a.leak_every = n,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if a.stacks == 0 || a.live == 0 || a.leak_every == 0 {
        return Err("--stacks, --live and --leak-every must be at least 1".into());
    }
    Ok(a)
}

/// This executable as a module: its path, load bias and the ranges it is mapped at, read from
/// `/proc/self/maps`, and the range of its code (where the made-up return addresses go, so
/// that they symbolize to real functions).
fn this_module() -> (Module, (u64, u64)) {
    let exe = std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut ranges = Vec::new();
    let mut bias = None;
    let mut text = None;
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[5] != exe {
            continue;
        }
        let Some((s, e)) = f[0].split_once('-') else {
            continue;
        };
        let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else {
            continue;
        };
        // The mapping at file offset 0 starts at the load bias (a PIE's first PT_LOAD has
        // virtual address 0).
        if f[2].trim_start_matches('0').is_empty() && bias.is_none() {
            bias = Some(s);
        }
        if f[1].contains('x') && text.is_none() {
            text = Some((s, e));
        }
        ranges.push((s, e));
    }
    let here = main as *const () as usize as u64;
    let text = text.unwrap_or((here, here + 1));
    (Module { path: exe, bias: bias.unwrap_or(0), ranges }, text)
}

fn run(a: &Args) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut buf = Vec::with_capacity(1 << 20);
    write_header(&mut buf);
    encode(
        &Event::Hello(Hello {
            pid: 4_000_000,
            ppid: 1,
            start_unix_ns: 1_700_000_000_000_000_000,
            command: vec!["gen_stream".into()],
            cwd: "/".into(),
            output_dir: String::new(),
            shim_version: env!("CARGO_PKG_VERSION").into(),
        }),
        &mut buf,
    );
    let (module, (text, text_end)) = this_module();
    encode(&Event::Module(module), &mut buf);
    let mut pick = Rng(0x5eed);
    let outer: Vec<u64> = (0..8).map(|_| pick.next_u64()).collect();
    for id in 0..a.stacks {
        // 12 frames: 4 distinct inner ones, 8 outer ones shared by all stacks (like main and
        // a loop), at pseudo-random places in this executable's code.
        let frames = (0..12usize)
            .map(|j| {
                let r = if j < 4 { pick.next_u64() } else { outer[j - 4] };
                text + r % (text_end - text)
            })
            .collect();
        encode(&Event::Stack(Stack { id, frames }), &mut buf);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut live: Vec<u64> = Vec::with_capacity(a.live);
    let mut seq = 0u64;
    let mut next_addr = 0x7f00_0000_0000u64;
    let mut allocs = 0u64;
    while seq < a.events {
        let ts_ns = 1_000_000_000 + seq * 1000;
        if live.len() >= a.live {
            let i = (rng.next_u64() % live.len() as u64) as usize;
            let addr = live.swap_remove(i);
            encode(&Event::Free(Free { seq, ts_ns, addr, api: Api::CudaFree, stream: 0, tid: 1, result: 0 }), &mut buf);
        } else {
            allocs += 1;
            let leak = allocs.is_multiple_of(a.leak_every);
            let r = rng.next_u64();
            let stack = if leak { 0 } else { 1 + (r % u64::from(a.stacks.max(2) - 1)) as u32 };
            let size = if leak { 1 << 20 } else { 512 << (r >> 60) };
            next_addr += 0x1000;
            encode(
                &Event::Alloc(Alloc {
                    seq,
                    ts_ns,
                    addr: next_addr,
                    size,
                    kind: if r & 0x30 == 0x30 { Kind::PinnedHost } else { Kind::Device },
                    api: Api::CudaMalloc,
                    device: (r >> 8 & 1) as i32,
                    stream: 0,
                    tid: 1,
                    stack: stack.min(a.stacks - 1),
                    ctx: 0,
                }),
                &mut buf,
            );
            if !leak {
                live.push(next_addr);
            }
        }
        seq += 1;
        if buf.len() >= 1 << 20 {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    encode(&Event::Exit(Exit { ts_ns: 1_000_000_000 + seq * 1000 }), &mut buf);
    out.write_all(&buf)?;
    out.flush()
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gen_stream: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen_stream: {e}");
            ExitCode::from(1)
        }
    }
}
