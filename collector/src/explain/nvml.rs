//! The driver's view of the target's device memory: NVML's per-process used memory per GPU,
//! sampled by the collector along the run, so that a report can say how much device memory no
//! allocation call explains (untraced) and whether it grew.
//!
//! NVML is loaded with `dlopen("libnvidia-ml.so.1")` in the collector, never in the program:
//! NVML creates no CUDA context (NVML API Reference, "Initialization and Cleanup": `nvmlInit_v2`
//! only opens the driver). For each device, `nvmlDeviceGetComputeRunningProcesses_v3` lists the
//! processes with a compute context and their `usedGpuMemory`, "all of the memory used by the
//! application" in bytes (NVML API Reference, "Device Queries"; `nvmlProcessInfo_t`, whose
//! layout since R470 is `pid`, `usedGpuMemory`, `gpuInstanceId`, `computeInstanceId`). The
//! target is found by its pid, so a target in another PID namespace than the driver's view is
//! not found (the report then says the driver's view is unknown).
//!
//! Settings (read from the collector's environment, which is the program's):
//! `GPUSHIM_NVML=0` turns sampling off; `GPUSHIM_NVML_INTERVAL_MS` is the sampling period
//! (default 1000 ms); `GPUSHIM_NVML_LIB` names the library to load instead of
//! `libnvidia-ml.so.1` (the tests load a stand-in, standins/nvml.c).

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// At most this many samples are kept; past it every other one is dropped (the first and the
/// latest are always kept).
pub const MAX_SAMPLES: usize = 4096;

/// Default sampling period, ms.
pub const DEFAULT_INTERVAL_MS: u64 = 1000;

/// `NVML_VALUE_NOT_AVAILABLE` (NVML API Reference, "Constants"): `usedGpuMemory` unknown.
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
/// `NVML_SUCCESS`.
const SUCCESS: c_int = 0;
/// `NVML_ERROR_INSUFFICIENT_SIZE`.
const INSUFFICIENT_SIZE: c_int = 7;

/// `nvmlProcessInfo_t` (v2 layout, used by the `_v3` query).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

type Device = *mut c_void;
type InitFn = unsafe extern "C" fn() -> c_int;
type CountFn = unsafe extern "C" fn(*mut c_uint) -> c_int;
type HandleFn = unsafe extern "C" fn(c_uint, *mut Device) -> c_int;
type ProcsFn = unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> c_int;

/// The loaded library's entry points.
struct Nvml {
    count: CountFn,
    handle: HandleFn,
    procs: ProcsFn,
}

/// Looks `name` up in `lib`.
fn sym(lib: *mut c_void, name: &str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    // SAFETY: `lib` is a handle dlopen returned and never closed; `c` is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// How the driver's view is said to be unknown when there is no NVIDIA driver to ask: NVML
/// cannot be loaded, `nvmlInit_v2` fails (`NVML_ERROR_DRIVER_NOT_LOADED` and the like), or it
/// lists no GPU (NVML API Reference, "Initialization and Cleanup", "Device Queries"). The
/// stderr summary and the text report leave the GPU memory lines out then
/// (`render::text::gpu_memory_shown`).
pub const NO_NVML: &str = "no NVML (no NVIDIA driver)";

/// Why the driver's view is unknown in a PID namespace of its own (a container): NVML lists
/// the machine's pids (nvidia-docker issues 179 and 1483), and the program's pid there is not
/// known from inside, so its figure would be another process's or none.
pub const IN_A_CONTAINER: &str =
    "the program runs in a PID namespace of its own (a container), and NVML lists the machine's pids";

/// Why NVML is not sampled in `gpushim demo`: its examples run on the stand-ins, without a GPU
/// (the summary and the text report leave the GPU memory lines out then, as without a driver).
pub const DEMO_NVML_OFF: &str = "NVML is off in the demo (its examples run on stand-in CUDA libraries, without a GPU)";

/// Why NVML is not sampled when a setting turned it off (`GPUSHIM_NVML=0`): `gpushim demo`
/// turns it off itself (its examples run on stand-ins, without a GPU), and says so as the
/// demo's doing, not the user's.
fn switched_off(s: &crate::settings::Settings) -> Option<&'static str> {
    let off = s.nvml.as_deref().filter(|v| !v.is_empty()).and_then(gpushim_wire::setting::switch) == Some(false);
    match (off, s.demo.is_some()) {
        (false, _) => None,
        (true, true) => Some(DEMO_NVML_OFF),
        (true, false) => Some("NVML sampling is off (GPUSHIM_NVML=0)"),
    }
}

/// Whether this process's PID namespace is not the machine's: the inode of
/// `/proc/self/ns/pid` is not the initial namespace's, which the kernel fixes
/// (`PROC_PID_INIT_INO`). Unreadable: taken as the machine's.
fn in_a_child_pid_namespace() -> bool {
    use std::os::unix::fs::MetadataExt;
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() != PROC_PID_INIT_INO)
}

impl Nvml {
    /// Loads and initializes NVML from `path`, or says why not: `Err((true, why))` when there
    /// is no driver to ask (see [`NO_NVML`]), `Err((false, why))` for an NVML without the entry
    /// points used here.
    fn load(path: &str) -> Result<Nvml, (bool, String)> {
        let c = CString::new(path).map_err(|_| (false, format!("bad library name {path:?}")))?;
        // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the process's life.
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            // SAFETY: dlerror returns NULL or a NUL-terminated message owned by libc.
            let why = unsafe { libc::dlerror() };
            let why = if why.is_null() {
                String::new()
            } else {
                // SAFETY: a valid C string from dlerror, copied before any other dl call.
                unsafe { std::ffi::CStr::from_ptr(why as *const c_char) }.to_string_lossy().into_owned()
            };
            return Err((true, format!("{path} could not be loaded ({why})")));
        }
        let need = |n: &str| sym(lib, n).ok_or_else(|| (false, format!("{path} has no {n}")));
        let init = need("nvmlInit_v2")?;
        let count = need("nvmlDeviceGetCount_v2")?;
        let handle = need("nvmlDeviceGetHandleByIndex_v2")?;
        let procs = need("nvmlDeviceGetComputeRunningProcesses_v3")?;
        // SAFETY: the symbols have these C signatures (NVML API Reference, nvml.h).
        let (init, count, handle, procs) = unsafe {
            (
                std::mem::transmute::<*mut c_void, InitFn>(init),
                std::mem::transmute::<*mut c_void, CountFn>(count),
                std::mem::transmute::<*mut c_void, HandleFn>(handle),
                std::mem::transmute::<*mut c_void, ProcsFn>(procs),
            )
        };
        // SAFETY: nvmlInit_v2 takes no argument.
        let rc = unsafe { init() };
        if rc != SUCCESS {
            return Err((true, format!("nvmlInit_v2 failed ({rc}: {})", nvml_error(rc))));
        }
        let mut n: c_uint = 0;
        // SAFETY: `n` is a valid out-pointer.
        if unsafe { count(&mut n) } == SUCCESS && n == 0 {
            return Err((true, "NVML lists no GPU".to_string()));
        }
        Ok(Nvml { count, handle, procs })
    }

    /// `pid`'s used memory on each NVML device that lists it: `(NVML index, bytes)`.
    fn query(&self, pid: u32) -> Vec<(u32, u64)> {
        let mut n: c_uint = 0;
        // SAFETY: `n` is a valid out-pointer.
        if unsafe { (self.count)(&mut n) } != SUCCESS {
            return Vec::new();
        }
        let mut out = Vec::new();
        for i in 0..n {
            let mut dev: Device = std::ptr::null_mut();
            // SAFETY: valid index and out-pointer.
            if unsafe { (self.handle)(i, &mut dev) } != SUCCESS {
                continue;
            }
            let mut infos = vec![ProcessInfo::default(); 64];
            for _ in 0..4 {
                let mut cap = infos.len() as c_uint;
                // SAFETY: `infos` holds `cap` entries; NVML writes at most `cap` and sets `cap`
                // to the number written, or to the number needed on INSUFFICIENT_SIZE.
                let rc = unsafe { (self.procs)(dev, &mut cap, infos.as_mut_ptr()) };
                if rc == INSUFFICIENT_SIZE {
                    infos = vec![ProcessInfo::default(); (cap as usize).max(infos.len()) * 2];
                    continue;
                }
                if rc == SUCCESS {
                    let used: u64 = infos[..(cap as usize).min(infos.len())]
                        .iter()
                        .filter(|p| p.pid == pid && p.used_gpu_memory != VALUE_NOT_AVAILABLE)
                        .map(|p| p.used_gpu_memory)
                        .sum();
                    if infos[..(cap as usize).min(infos.len())].iter().any(|p| p.pid == pid) {
                        out.push((i, used));
                    }
                }
                break;
            }
        }
        out
    }
}

/// One sample: at `ts_ns` (CLOCK_MONOTONIC, as the shim's event times), the target's used
/// device memory, bytes, on each NVML device that listed it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Monotonic time, ns, read just before the query.
    pub ts_ns: u64,
    /// `(NVML device index, bytes)`, ascending index.
    pub gpus: Vec<(u32, u64)>,
}

/// What the driver said over the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverView {
    /// The samples, oldest first (at most [`MAX_SAMPLES`]).
    pub samples: Vec<Sample>,
    /// Why there are no samples, when NVML could not be used.
    pub unavailable: Option<String>,
}

/// The monotonic clock, ns (the shim's clock).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC is the shim's clock (shim/src/sys.rs).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn push(view: &mut DriverView, s: Sample) {
    if view.samples.len() >= MAX_SAMPLES {
        let last = view.samples.len() - 1;
        let mut i = 0;
        view.samples.retain(|_| {
            i += 1;
            i == 1 || i - 1 == last || i % 2 == 0
        });
    }
    view.samples.push(s);
}

struct Shared {
    nvml: Option<Nvml>,
    pid: u32,
    view: Mutex<DriverView>,
    stop: AtomicBool,
    wake: Condvar,
}

impl Shared {
    fn sample(&self) {
        if let Some(n) = &self.nvml {
            // The time before the query: the traced bytes paired with the driver's figure
            // (`gpumem`) are then those of allocations made before the query began, never one
            // the program made while or after the figure was read (read after the query, they
            // could include one: 1 MiB off in 3 of 16 runs of the fault tests under load, in the
            // hostile `nvml-growth` case).
            let ts_ns = now_ns();
            let gpus = n.query(self.pid);
            let s = Sample { ts_ns, gpus };
            if let Ok(mut v) = self.view.lock() {
                push(&mut v, s);
            }
        }
    }
}

/// Samples NVML for one target process on a thread of the collector until dropped.
pub struct Sampler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `pid` (one sample now, then every `GPUSHIM_NVML_INTERVAL_MS`), or
    /// records why it cannot.
    pub fn start(pid: u32) -> Sampler {
        let s = crate::settings::Settings::global();
        let set = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        let (nvml, unavailable) = if let Some(why) = switched_off(s) {
            (None, Some(why.to_string()))
        } else if in_a_child_pid_namespace() {
            (None, Some(IN_A_CONTAINER.to_string()))
        } else {
            match Nvml::load(&set(&s.nvml_lib).unwrap_or_else(|| "libnvidia-ml.so.1".into())) {
                Ok(n) => (Some(n), None),
                Err((true, e)) => (None, Some(format!("{NO_NVML}: {e}"))),
                Err((false, e)) => (None, Some(format!("NVML is not available: {e}"))),
            }
        };
        let interval = set(&s.nvml_interval_ms)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&ms| ms > 0)
            .unwrap_or(DEFAULT_INTERVAL_MS);
        let shared = Arc::new(Shared {
            nvml,
            pid,
            view: Mutex::new(DriverView { samples: Vec::new(), unavailable }),
            stop: AtomicBool::new(false),
            wake: Condvar::new(),
        });
        shared.sample();
        let thread = shared.nvml.as_ref().map(|_| {
            let s = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("gpushim-nvml".into())
                .spawn(move || loop {
                    {
                        let Ok(g) = s.view.lock() else { return };
                        // `stop` is set under this lock (Drop), so it cannot be missed here.
                        if s.stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let Ok((_g, _)) = s.wake.wait_timeout(g, Duration::from_millis(interval)) else { return };
                    }
                    if s.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    s.sample();
                })
                .ok()
        });
        Sampler { shared, thread: thread.flatten() }
    }

    /// The latest sample taken, without taking one, or why there is none.
    pub fn latest(&self) -> (Option<Sample>, Option<String>) {
        match self.shared.view.lock() {
            Ok(v) => (v.samples.last().cloned(), v.unavailable.clone()),
            Err(_) => (None, None),
        }
    }

    /// Takes one sample now (at a report) and returns everything so far.
    pub fn view_now(&self) -> DriverView {
        self.shared.sample();
        self.shared.view.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        {
            let _g = self.shared.view.lock();
            self.shared.stop.store(true, Ordering::Relaxed);
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// NVML's return code `rc` in words (`nvml.h`'s `nvmlReturn_t`), for the lines that say why
/// NVML gave nothing.
fn nvml_error(rc: i32) -> &'static str {
    match rc {
        1 => "NVML was not initialized",
        2 => "an invalid argument",
        3 => "not supported on this device",
        4 => "no permission",
        6 => "not found",
        9 => "the NVIDIA driver is not loaded",
        12 => "libnvidia-ml could not be loaded",
        13 => "a function is missing from libnvidia-ml",
        15 => "the GPU has fallen off the bus",
        18 => "the driver and libnvidia-ml do not match",
        _ => "an NVML error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_turned_off_by_the_demo_is_said_as_the_demos_doing() {
        let s = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            crate::settings::Settings::read(&|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()), None)
        };
        assert_eq!(switched_off(&s(&[])), None);
        assert_eq!(switched_off(&s(&[("GPUSHIM_NVML", "1")])), None);
        assert_eq!(switched_off(&s(&[("GPUSHIM_NVML", "off")])), Some("NVML sampling is off (GPUSHIM_NVML=0)"));
        let demo = switched_off(&s(&[("GPUSHIM_NVML", "0"), ("GPUSHIM_RUN_DEMO", "1")])).unwrap();
        assert!(demo.starts_with("NVML is off in the demo") && !demo.contains("GPUSHIM_NVML"), "{demo}");
    }

    #[test]
    fn thinning_keeps_the_first_and_latest_samples() {
        let mut v = DriverView::default();
        for i in 0..(3 * MAX_SAMPLES as u64) {
            push(&mut v, Sample { ts_ns: i, gpus: vec![(0, i)] });
        }
        assert!(v.samples.len() <= MAX_SAMPLES);
        assert_eq!(v.samples[0].ts_ns, 0);
        assert_eq!(v.samples.last().unwrap().ts_ns, 3 * MAX_SAMPLES as u64 - 1);
        assert!(v.samples.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
    }

    #[test]
    fn a_missing_library_is_said_not_fatal() {
        let (no_driver, e) = Nvml::load("/nonexistent/libnvidia-ml.so.1").err().unwrap();
        assert!(no_driver && e.starts_with("/nonexistent/libnvidia-ml.so.1 could not be loaded"), "{e}");
    }
}
