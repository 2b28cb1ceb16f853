//! Turns return addresses into frames (function, file, line), in the collector, from the ELF
//! files the target had loaded; the target itself may be gone by then.
//!
//! Each address is looked up in the module whose range holds it, as `address − 1 − bias` (a
//! return address points after the call; one byte back is inside it, so the line is the
//! call's). Inlined calls become extra frames, innermost first. Results are cached per address.

use std::collections::HashMap;
use std::path::Path;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized};
use gpushim_wire::Module;

use crate::explain::pyframes::Python;
use crate::report::Frame;

/// Module file-name prefixes of the shim itself; its frames are dropped.
const SHIM_PREFIXES: &[&str] = &["libgpushim"];

/// True if and only if source file `file` belongs to a CUDA wrapper library (see
/// [`crate::explain::frames::is_wrapper_source`]).
pub fn is_internal_source(file: &str) -> bool {
    crate::explain::frames::is_wrapper_source(file)
}

#[cfg(test)]
/// True if and only if a frame in module `path` running `function` is not the user's code
/// (the table of `frames.rs`).
pub fn is_internal(path: &str, function: &str) -> bool {
    crate::explain::frames::Table::global().classify(path, function) != crate::report::Class::User
}

fn is_shim(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    SHIM_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// At most about this many return addresses are kept symbolized (a cached address takes about
/// 200 bytes with its names: about 40 MiB).
pub const MAX_CACHED_ADDRESSES: usize = 200_000;

/// Symbolizes stacks of one target process, caching per address.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    modules: Vec<Module>,
    cache: HashMap<u64, Vec<Frame>>,
    problems: Vec<String>,
    python: Python,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Symbolizer::new()
    }
}

impl Symbolizer {
    /// A symbolizer with no modules. Demangling, source lines and inlined functions are on.
    pub fn new() -> Symbolizer {
        Symbolizer {
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .enable_demangling(true)
                .build(),
            modules: Vec::new(),
            cache: HashMap::new(),
            problems: Vec::new(),
            python: Python::default(),
        }
    }

    /// Adds a loaded module. Where ranges of two modules overlap (one was unloaded and
    /// another loaded in its place), the later one wins.
    pub fn add_module(&mut self, m: Module) {
        if self.modules.iter().any(|x| x.path == m.path && x.bias == m.bias && x.ranges == m.ranges) {
            return;
        }
        self.modules.push(m);
        // Addresses that were in no module may be in this one.
        self.cache.retain(|_, frames| frames.first().is_none_or(|f| !f.module.is_empty()));
    }

    /// One line per module that could not be read, for the report's notes.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// The Python side of the stream: code objects and the Python frames of stacks.
    pub fn python(&self) -> &Python {
        &self.python
    }

    /// See [`Symbolizer::python`].
    pub fn python_mut(&mut self) -> &mut Python {
        &mut self.python
    }

    /// The frames of stack `id` whose return addresses are `addrs`: [`Symbolizer::stack`], with
    /// the stack's Python frames merged in where the interpreter's frames stand, each frame's
    /// class marked ([`crate::explain::frames::mark`]).
    pub fn stack_of(&mut self, id: u32, addrs: &[u64]) -> Vec<Frame> {
        let native = self.stack(addrs);
        let mut frames = self.python.merge(id, native);
        crate::explain::frames::mark(&mut frames);
        frames
    }

    /// Forgets what is kept for stack `id` (its Python frames): the collector evicted it.
    pub fn forget_stack(&mut self, id: u32) {
        self.python.forget_stack(id);
    }

    /// Every return address symbolized so far, with its frames (for a recorded stream:
    /// `GPUSHIM_RECORD`).
    pub fn cached_frames(&self) -> Vec<(u64, Vec<Frame>)> {
        let mut v: Vec<(u64, Vec<Frame>)> = self.cache.iter().map(|(&a, f)| (a, f.clone())).collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }

    /// Takes `entries` ([`Symbolizer::cached_frames`] of the run that recorded the stream) as
    /// already symbolized: a stream read again without the program's libraries names the same
    /// frames.
    pub fn preload(&mut self, entries: Vec<(u64, Vec<Frame>)>) {
        self.cache.extend(entries);
    }

    /// Addresses in the per-address cache.
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.cache.len()
    }

    /// The frames of a stack of return addresses (innermost first): inlined calls expanded,
    /// the shim's own frames dropped. The per-address cache is emptied first when it holds
    /// more than [`MAX_CACHED_ADDRESSES`] (a long run's reports name ever new stacks): those
    /// addresses are looked up again when needed, the modules stay parsed.
    pub fn stack(&mut self, addrs: &[u64]) -> Vec<Frame> {
        if self.cache.len() > MAX_CACHED_ADDRESSES {
            self.cache = HashMap::new();
        }
        let mut todo: HashMap<usize, Vec<u64>> = HashMap::new();
        for &a in addrs {
            if self.cache.contains_key(&a) {
                continue;
            }
            match self.module_of(a) {
                Some(i) => {
                    let v = todo.entry(i).or_default();
                    if !v.contains(&a) {
                        v.push(a);
                    }
                }
                None => {
                    let f = Frame { function: "??".into(), address: hex(a), ..Frame::default() };
                    self.cache.insert(a, vec![f]);
                }
            }
        }
        for (i, list) in todo {
            self.resolve(i, &list);
        }
        addrs.iter().flat_map(|a| self.cache.get(a).into_iter().flatten().cloned()).collect()
    }

    /// The index of the module holding `addr`, the latest added if several do.
    fn module_of(&self, addr: u64) -> Option<usize> {
        self.modules.iter().rposition(|m| m.ranges.iter().any(|&(s, e)| s <= addr && addr < e))
    }

    /// Symbolizes `addrs`, all in module `i`, into the cache.
    fn resolve(&mut self, i: usize, addrs: &[u64]) {
        let m = &self.modules[i];
        let path = m.path.clone();
        let bias = m.bias;
        if is_shim(&path) {
            for &a in addrs {
                self.cache.insert(a, Vec::new());
            }
            return;
        }
        // One byte back from the return address lands inside the call instruction.
        let offsets: Vec<u64> = addrs.iter().map(|&a| a.saturating_sub(1).wrapping_sub(bias)).collect();
        let unknown = |a: u64, off: u64| {
            let function = "??".to_string();
            let class = crate::explain::frames::Table::global().classify(&path, &function);
            Frame {
                internal: class != crate::report::Class::User,
                class,
                function,
                module: path.clone(),
                address: hex(a),
                offset: Some(hex(off.wrapping_add(1))),
                ..Frame::default()
            }
        };
        let results = if path.is_empty() {
            Err("module has no path".to_string())
        } else {
            let src = Source::Elf(Elf::new(Path::new(&path)));
            self.inner.symbolize(&src, Input::VirtOffset(&offsets)).map_err(|e| e.to_string())
        };
        let syms = match results {
            Ok(s) => s,
            Err(e) => {
                self.problems.push(format!("cannot read symbols of {path}: {e}; its frames show as module+offset"));
                for (&a, &off) in addrs.iter().zip(&offsets) {
                    self.cache.insert(a, vec![unknown(a, off)]);
                }
                return;
            }
        };
        for ((&a, &off), sym) in addrs.iter().zip(&offsets).zip(syms) {
            let frames = match sym {
                Symbolized::Sym(sym) => {
                    let make = |name: &str, code: Option<&CodeInfo<'_>>, inlined: bool| {
                        let (file, line) = code_location(code);
                        let mut class = crate::explain::frames::Table::global().classify(&path, name);
                        if class == crate::report::Class::User && file.as_deref().is_some_and(is_internal_source) {
                            class = crate::report::Class::Framework;
                        }
                        let internal = class != crate::report::Class::User;
                        Frame {
                            function: name.to_string(),
                            file,
                            line,
                            module: path.clone(),
                            address: hex(a),
                            offset: Some(hex(off.wrapping_add(1))),
                            internal,
                            inlined,
                            python: false,
                            class,
                            cell: None,
                        }
                    };
                    let mut v: Vec<Frame> =
                        sym.inlined.iter().rev().map(|f| make(&f.name, f.code_info.as_ref(), true)).collect();
                    v.push(make(&sym.name, sym.code_info.as_deref(), false));
                    v
                }
                Symbolized::Unknown(_) => vec![unknown(a, off)],
            };
            self.cache.insert(a, frames);
        }
    }
}

fn code_location(code: Option<&CodeInfo<'_>>) -> (Option<String>, Option<u32>) {
    match code {
        Some(c) => (Some(c.to_path().to_string_lossy().into_owned()), c.line),
        None => (None, None),
    }
}

/// `0x…` lower-case hex, as addresses appear in reports.
pub fn hex(v: u64) -> String {
    format!("{v:#x}")
}

#[cfg(test)]
pub(crate) mod tests {
    /// Stacks of ever new addresses: the per-address cache is emptied once it holds more than
    /// its bound, so it never holds more than the bound plus one stack's addresses.
    #[test]
    fn the_address_cache_stays_within_its_bound() {
        let mut s = Symbolizer::new();
        let mut most = 0;
        for k in 0..(MAX_CACHED_ADDRESSES / 1000 + 5) as u64 {
            let addrs: Vec<u64> = (0..1000).map(|i| 0x10_0000 + (k * 1000 + i) * 16).collect();
            assert_eq!(s.stack(&addrs).len(), 1000);
            most = most.max(s.cached());
        }
        assert!(most <= MAX_CACHED_ADDRESSES + 1000, "{most}");
        assert!(most > MAX_CACHED_ADDRESSES, "{most}");
        assert!(s.cached() < 10_000, "emptied once past the bound: {}", s.cached());
    }

    use super::*;
    use std::ffi::CStr;

    #[inline(never)]
    fn marker_function_for_symbolizer_test() -> u64 {
        std::hint::black_box(42)
    }

    /// The loaded module (path, bias, PT_LOAD ranges) that holds `addr` in this process.
    pub(crate) fn module_holding(addr: u64) -> Module {
        struct Search {
            addr: u64,
            found: Option<Module>,
        }
        unsafe extern "C" fn each(
            info: *mut libc::dl_phdr_info,
            _size: libc::size_t,
            data: *mut libc::c_void,
        ) -> libc::c_int {
            // SAFETY: `data` is the `&mut Search` passed to `dl_iterate_phdr` below, alive for
            // the whole call, and `info` points to a valid entry for the duration of this
            // callback, as dl_iterate_phdr(3) guarantees.
            let (search, info) = unsafe { (&mut *(data as *mut Search), &*info) };
            let bias = info.dlpi_addr;
            let mut ranges = Vec::new();
            for i in 0..usize::from(info.dlpi_phnum) {
                // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers.
                let ph = unsafe { &*info.dlpi_phdr.add(i) };
                if ph.p_type == libc::PT_LOAD {
                    ranges.push((bias + ph.p_vaddr, bias + ph.p_vaddr + ph.p_memsz));
                }
            }
            if !ranges.iter().any(|&(s, e)| s <= search.addr && search.addr < e) {
                return 0;
            }
            let name = if info.dlpi_name.is_null() {
                String::new()
            } else {
                // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader.
                unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
            };
            let path = if name.is_empty() {
                std::fs::read_link("/proc/self/exe").unwrap().to_string_lossy().into_owned()
            } else {
                name
            };
            search.found = Some(Module { path, bias, ranges });
            1
        }
        let mut search = Search { addr, found: None };
        // SAFETY: `each` matches the callback type and only uses `data` as the `Search` we pass.
        unsafe { libc::dl_iterate_phdr(Some(each), &mut search as *mut Search as *mut libc::c_void) };
        search.found.expect("address is in no loaded module")
    }

    #[test]
    fn symbolizes_a_function_of_this_binary() {
        let addr = marker_function_for_symbolizer_test as *const () as usize as u64;
        assert_eq!(marker_function_for_symbolizer_test(), 42);
        let mut s = Symbolizer::new();
        s.add_module(module_holding(addr));
        // Pretend the address is a return address one byte into the function.
        let frames = s.stack(&[addr + 1, addr + 1]);
        // Each address gives the function's frame, after any calls inlined into it at that
        // point (an optimized build inlines `black_box` there).
        let outer: Vec<&Frame> = frames.iter().filter(|f| !f.inlined).collect();
        assert_eq!(outer.len(), 2, "{frames:#?}");
        assert!(frames.iter().filter(|f| f.inlined).all(|f| f.address == hex(addr + 1)), "{frames:#?}");
        let f = outer[0];
        assert!(f.function.ends_with("marker_function_for_symbolizer_test"), "{f:?}");
        assert!(f.file.as_deref().is_some_and(|p| p.ends_with("symbolize.rs")), "{f:?}");
        assert!(f.line.is_some(), "{f:?}");
        assert_eq!(f.address, hex(addr + 1));
        assert!(!f.internal && !f.inlined);
        assert!(s.problems().is_empty(), "{:?}", s.problems());
    }

    #[test]
    fn unknown_shim_and_internal_modules() {
        let mut s = Symbolizer::new();
        s.add_module(Module {
            path: "/nonexistent/libgpushim.so".into(),
            bias: 0x1000,
            ranges: vec![(0x1000, 0x2000)],
        });
        s.add_module(Module {
            path: "/nonexistent/libcudart.so.13".into(),
            bias: 0x10000,
            ranges: vec![(0x10000, 0x20000)],
        });
        let frames = s.stack(&[0x1500, 0x10100, 0x99]);
        assert_eq!(frames.len(), 2, "{frames:#?}");
        assert_eq!(frames[0].function, "??");
        assert_eq!(frames[0].module, "/nonexistent/libcudart.so.13");
        assert_eq!(frames[0].offset.as_deref(), Some("0x100"));
        assert!(frames[0].internal);
        assert_eq!(
            (frames[1].function.as_str(), frames[1].module.as_str(), frames[1].address.as_str()),
            ("??", "", "0x99")
        );
        assert_eq!(s.problems().len(), 1);
    }

    #[test]
    fn internal_names() {
        assert!(is_internal("/usr/lib/libtorch_cuda.so", "c10::cuda::Alloc"));
        assert!(is_internal("/w/app", "cudaMalloc"));
        assert!(is_internal("/w/app", "cuMemAlloc_v2"));
        assert!(is_internal("/w/app", "cudarc::driver::result::malloc_sync"));
        assert!(is_internal("/p/site-packages/cupy/cuda/memory.cpython-312.so", "f"));
        assert!(!is_internal("/w/app", "cudaMallocWrapperOfMine"));
        assert!(!is_internal("/w/app", "render_frame"));
        assert!(is_internal_source("/root/.cargo/registry/src/x/cudarc-0.19.10/src/driver/result.rs"));
        assert!(!is_internal_source("/w/src/main.rs"));
        assert!(!is_internal_source("/work/main/examples/cudarc-leak/src/main.rs"));
        assert!(is_internal("/w/app", "libcudart_static_5382377d5c772c9d197c0cda9fd9742ee6ad893c"));
        assert!(is_internal("/t/libtorch_cpu.so", "at::detail::empty_generic(c10::ArrayRef<long>)"));
        // PyTorch's operators are framework code, libc is a runtime: neither heads a site.
        assert!(is_internal("/t/libtorch_cpu.so", "at::native::linear(at::Tensor const&)"));
        assert!(is_internal("/usr/lib/libc.so.6", "malloc"));
        assert!(!is_internal("/w/libmylib.so", "render_frame"));
    }
}
