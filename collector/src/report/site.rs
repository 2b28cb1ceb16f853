//! A site (the allocations of one stack) as the report lists it: its frames, whose code each
//! frame is, the suspects ranked among the sites, and the threads that allocated there.

use serde::{Deserialize, Serialize};

use super::is_zero;
use super::reach::SiteReach;

/// One allocation site: one distinct native backtrace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Site {
    /// The stack id from the event stream; 4294967295 means no backtrace was recorded.
    pub id: u32,
    /// Kind of the site's first allocation: `device`, `managed` or `pinned_host`.
    pub kind: String,
    /// Distinct allocating API names, in order of first use.
    pub apis: Vec<String>,
    /// Bytes live at the end.
    pub live_bytes: u64,
    /// Allocations live at the end.
    pub live_count: u64,
    /// Successful allocations made here.
    pub alloc_count: u64,
    /// Their total size, bytes.
    pub alloc_bytes: u64,
    /// Successful frees of allocations made here.
    pub free_count: u64,
    /// Highest live bytes of this site at any moment, bytes.
    pub peak_live_bytes: u64,
    /// Time of the first allocation, seconds after the report's first event.
    #[serde(default)]
    pub first_alloc_s: f64,
    /// Time of the latest allocation, seconds after the report's first event.
    #[serde(default)]
    pub last_alloc_s: f64,
    /// Live bytes over time: `[seconds after the first event, bytes]` pairs, at most 256,
    /// evenly thinned.
    #[serde(default)]
    pub series: Vec<(f64, u64)>,
    /// The backtrace, innermost first, inlined calls expanded.
    pub frames: Vec<Frame>,
    /// Who made the allocations: the allocator or library of the innermost frames
    /// (`PyTorch caching allocator (cuBLAS workspace)`), or `user code (direct calls)`
    /// (collector/src/explain/owners.rs). Empty in reports of older collectors.
    #[serde(default)]
    pub owner: String,
    /// Present only when the target ran Python whose frames were recorded: true if and only if
    /// the site's stack has Python frames (false for threads running no Python code, such as
    /// PyTorch's autograd threads or threads started by native code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<bool>,
    /// Distinct threads that allocated here (the collector keeps at most
    /// `gauge::MAX_SITE_THREADS` per site; more are counted in `other_thread_allocs`).
    #[serde(default)]
    pub thread_count: u64,
    /// The threads that allocated here, most allocations first (at most
    /// `assemble::MAX_LISTED_THREADS`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<SiteThread>,
    /// The site's live allocations by reachability class, when the report has a scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach: Option<SiteReach>,
}

impl Site {
    /// True if and only if no backtrace was recorded for this site.
    pub fn no_backtrace(&self) -> bool {
        self.id == gpushim_wire::NO_STACK
    }
}

/// One symbolized frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// Function name, demangled; `??` when unknown.
    pub function: String,
    /// Source file, when debug information had it.
    pub file: Option<String>,
    /// Source line, when debug information had it.
    pub line: Option<u32>,
    /// Path of the module (executable or shared object) holding the address; empty when the
    /// address is in no known module.
    pub module: String,
    /// The return address in the target's address space, as `0x…`.
    pub address: String,
    /// The address in the module file's own address space (address − load bias), as `0x…`;
    /// null when the module is unknown.
    #[serde(default)]
    pub offset: Option<String>,
    /// True for frames that are not the user's code: `class` is not `user`.
    pub internal: bool,
    /// Whose code it is: `user`, `framework`, `vendor` (CUDA toolkit libraries) or `runtime`
    /// (CUDA runtime and driver, libc, the Python interpreter); see `frames.rs`. Absent in
    /// older reports: `user`.
    #[serde(default)]
    pub class: Class,
    /// True if this frame is a call inlined into the next frame (same address).
    #[serde(default)]
    pub inlined: bool,
    /// True for a Python frame (module `"python"`, no address; `function` is the qualified
    /// name, `file` and `line` the Python source's). Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub python: bool,
    /// For a Python frame in a Jupyter notebook's cell, the cell as the notebook names it,
    /// `In [4] line 2`: written by the `%gpushim` magic into the reports it writes (only the
    /// kernel knows which cell a file is); shown in place of the file IPython compiled the cell
    /// under. Written only when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<String>,
}

impl Frame {
    /// The module's file name (the part after the last `/`).
    pub fn module_name(&self) -> &str {
        self.module.rsplit('/').next().unwrap_or(&self.module)
    }

    /// The key `diff` matches frames by: `function file:line`, else `module+offset`, else the
    /// bare address.
    pub fn match_key(&self) -> String {
        match (&self.file, self.line) {
            (Some(f), Some(l)) if self.function != "??" => format!("{} {f}:{l}", self.function),
            (Some(f), None) if self.python => format!("{} {f}", self.function),
            _ if !self.module.is_empty() => {
                format!("{}+{}", self.module_name(), self.offset.as_deref().unwrap_or(&self.address))
            }
            _ => self.address.clone(),
        }
    }
}

/// Growth that is no suspect, said when a report has no suspect: the site with most live
/// bytes that rose and then held still for longer than it grew (a warm-up, a cache filled once,
/// a caching pool at its working set).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldGrowth {
    /// The site.
    pub site: u32,
    /// Its live bytes and allocations at the end.
    pub live_bytes: u64,
    pub live_count: u64,
    /// Seconds from its first to its latest live allocation.
    pub grew_s: f64,
    /// Seconds it then held still, to the end of the program's work.
    pub held_s: f64,
    /// Its memory is a caching pool's (PyTorch's, CuPy's, XLA's).
    pub pool: bool,
    /// The program's GPU calls (kernel launches, graph launches, memsets) while it grew and
    /// after it, when the stream counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grew_calls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_calls: Option<u64>,
}

/// A leak suspect.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    /// The site's id (see [`Site::id`]).
    pub site: u32,
    /// How sure the ranking is, from 0 to 1.
    pub score: f64,
    /// Why, in words.
    pub reason: String,
    /// The site's live bytes.
    #[serde(default)]
    pub live_bytes: u64,
    /// The site's live allocations.
    #[serde(default)]
    pub live_count: u64,
    /// Average growth over the time the live allocations were made, bytes per second.
    #[serde(default)]
    pub growth_bytes_per_s: f64,
    /// Bytes of the live allocations made after the first live one, per second between the
    /// first and the latest live allocation: how fast the kept memory grew.
    #[serde(default)]
    pub slope_bytes_per_s: f64,
    /// Share (0 to 1) of eight equal slices of the site's active span in which its live
    /// bytes rose.
    #[serde(default)]
    pub rising_share: f64,
    /// Age of the site's oldest live allocation at the end of the report, as a share (0 to 1)
    /// of the report's duration.
    #[serde(default)]
    pub oldest_live_age_share: f64,
    /// Share (0 to 1) of the site's allocations that were never freed.
    #[serde(default)]
    pub never_freed_share: f64,
    /// When the growth was found only over the union of the sites that share one line of the
    /// program's code (each alone too small or too brief): those sites, ascending id; `site` is
    /// the one with most live bytes and the measures above are the union's. Absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub line_sites: Vec<u32>,
    /// The sites of this cause: those whose suspect had the same headline frame and kind,
    /// largest (live bytes) first; `site` is the first. `live_bytes` and `live_count` are
    /// their sums, `score` the highest of theirs; the other measures are the largest site's.
    /// Absent in older reports (then only `site`).
    #[serde(default)]
    pub sites: Vec<u32>,
    /// What the suspect is named by (see `frames::headline`): the first user frame and the
    /// library entry point it called (`worker_gemm (file.cu:7) via cublasCreate_v2`), or for a
    /// thread without user frames, its most telling framework frame
    /// (`MulBackward0 (autograd thread)`); empty when the stack has none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub headline: String,
    /// Distinct threads that allocated at its sites (0 in older reports).
    #[serde(default)]
    pub threads: u64,
    /// Live allocations of the site that the reachability scan found no pointer to.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub definitely_lost_count: u64,
    /// Their bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub definitely_lost_bytes: u64,
}

/// A thread that allocated at a site.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteThread {
    /// The kernel thread id.
    pub tid: u32,
    /// The thread's name at its first event (`pthread_getname_np`); empty when unknown.
    #[serde(default)]
    pub name: String,
    /// Allocations it made here.
    pub alloc_count: u64,
    /// Their bytes.
    pub alloc_bytes: u64,
    /// Its first allocation here, seconds after the report's first event.
    pub first_alloc_s: f64,
    /// Its latest allocation here, seconds after the report's first event.
    pub last_alloc_s: f64,
}

/// Whose code a frame is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// The program's own code.
    #[default]
    User,
    /// A GPU framework: PyTorch, JAX/XLA, CuPy, Numba, TensorFlow, Triton, cudarc.
    Framework,
    /// A library of NVIDIA's CUDA toolkit or Python wheels (cuBLAS, cuDNN, NCCL, …).
    Vendor,
    /// The CUDA runtime or driver, or a language runtime (libc, libstdc++, CPython).
    Runtime,
}
