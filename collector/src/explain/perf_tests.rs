//! Measurements behind docs/performance.md, run by hand (they are `#[ignore]`d: timings on a
//! shared CI machine prove nothing):
//!
//! ```text
//! cargo test --release -p gpushim-collector perf_tests -- --ignored --nocapture
//! ```

use std::ops::ControlFlow;
use std::path::Path;
use std::time::Instant;

use blazesym::inspect::source::{Elf, Source};
use blazesym::inspect::Inspector;
use blazesym::SymType;
use gpushim_wire::Module;

use crate::explain::symbolize::Symbolizer;

/// `2 * n` return addresses spread evenly over the functions of `path` (its own virtual
/// addresses, plus one: a return address points after the call), as two disjoint batches.
fn addresses(path: &Path, n: usize) -> (Vec<u64>, Vec<u64>) {
    let inspector = Inspector::new();
    let mut funcs: Vec<(u64, u64)> = Vec::new();
    let mut all = 0;
    // The ELF symbol tables (with debug_syms, only DWARF's functions are listed).
    let mut elf = Elf::new(path);
    elf.debug_syms = false;
    inspector
        .for_each(&Source::Elf(elf), |s| {
            all += 1;
            if s.sym_type == SymType::Function && s.size.unwrap_or(0) > 1 {
                funcs.push((s.addr, s.size.unwrap_or(0) as u64));
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    funcs.sort_unstable();
    funcs.dedup_by_key(|f| f.0);
    assert!(funcs.len() >= 2 * n, "{} has {} functions of {all} symbols", path.display(), funcs.len());
    let step = funcs.len() / (2 * n);
    let pick: Vec<u64> = (0..2 * n)
        .map(|i| {
            let (a, size) = funcs[i * step];
            a + size / 2 + 1
        })
        .collect();
    let (a, b): (Vec<_>, Vec<_>) = pick.chunks(2).map(|c| (c[0], c[1])).unzip();
    (a, b)
}

fn measure(path: &Path) {
    let (cold, warm) = addresses(path, 1000);
    let module = Module { path: path.to_string_lossy().into_owned(), bias: 0, ranges: vec![(0, u64::MAX)] };
    let mut s = Symbolizer::new();
    s.add_module(module.clone());
    let t = Instant::now();
    let first = s.stack(&cold);
    let cold_t = t.elapsed();
    let t = Instant::now();
    let second = s.stack(&warm);
    let warm_t = t.elapsed();
    let t = Instant::now();
    let _ = s.stack(&cold);
    let cached_t = t.elapsed();
    let size = std::fs::metadata(path).unwrap().len();
    let named = first.iter().chain(&second).filter(|f| f.function != "??").count();
    let inlined = first.iter().chain(&second).filter(|f| f.inlined).count();
    let mangled =
        first.iter().chain(&second).filter(|f| f.function.starts_with("_Z") || f.function.starts_with("_R")).count();
    println!(
        "{} ({:.1} MiB): 1000 addresses, first batch (parses the file) {:.1} ms; \
         1000 other addresses (file cached) {:.1} ms; the first 1000 again (address cache) \
         {:.3} ms; {} frames, {named} named, {inlined} inlined, {mangled} still mangled",
        path.display(),
        size as f64 / (1 << 20) as f64,
        cold_t.as_secs_f64() * 1e3,
        warm_t.as_secs_f64() * 1e3,
        cached_t.as_secs_f64() * 1e3,
        first.len() + second.len(),
    );
    for f in first.iter().take(3) {
        println!("  e.g. {} ({:?}:{:?})", f.function, f.file, f.line);
    }
    assert!(s.problems().is_empty(), "{:?}", s.problems());
    assert_eq!(mangled, 0);
}

#[test]
#[ignore = "a measurement; run by hand with --ignored --nocapture"]
fn symbolize_1000_addresses_in_big_modules() {
    measure(Path::new("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"));
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    measure(&exe);
    let release = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/gpushim");
    if release.exists() {
        measure(&release);
    }
}
