//! Who owns each live allocation: the allocator or library whose code made it, read from the
//! innermost frames of its stack, and the line of the program's own code it came from (for the
//! leak ranking's grouping of sites by line, [`crate::account::rank::Hints`]).
//!
//! [`RULES`] is the one table of owners: each rule names an owner and the substrings of a
//! function name, a module path or a Python source path that mark its code. A stack's owner is
//! the rule of its innermost matching frame; where a second, different owner matches further
//! out, that one works inside the first one's memory and both are named, innermost first:
//! "PyTorch caching allocator (cuBLAS workspace)" is a cuBLAS workspace that PyTorch's
//! `getNewWorkspace` took from its caching allocator. A stack no rule matches is the user's
//! code calling CUDA directly ([`USER_OWNER`]).
//!
//! The function names are those of the frameworks' native code as symbolized in the GPU matrix
//! (docs/gpu-matrix.md: PyTorch 2.11's `c10::cuda::CUDACachingAllocator::…`, its pinned host
//! allocator `at::cuda::…CachingHostAllocator…`, XLA's `tsl::BFCAllocator`); module names are
//! the libraries' file names as NVIDIA's wheels and the CUDA toolkit ship them.

use crate::report::Frame;

/// The owner of allocations no rule matches: the program called CUDA itself.
pub const USER_OWNER: &str = "user code (direct calls)";

/// One owner rule: any of the substrings in the frame's function, module path or (Python
/// frames) source path.
pub struct Rule {
    /// The owner's name as reports show it.
    pub owner: &'static str,
    /// True for a caching pool: it keeps freed memory for reuse, so its growth up to a working
    /// set and then a plateau is a pool warming up, not a leak (see [`crate::account::rank`]).
    pub pool: bool,
    /// Substrings of a demangled function name.
    pub functions: &'static [&'static str],
    /// Substrings of a native module's path.
    pub modules: &'static [&'static str],
    /// Substrings of a Python frame's source path.
    pub python_files: &'static [&'static str],
}

/// The owner rules, checked in order for each frame (the first that matches names it).
pub const RULES: &[Rule] = &[
    Rule {
        owner: "PyTorch pinned host allocator",
        pool: true,
        functions: &["CachingHostAllocator", "getCachingHostAllocator", "CUDAHostAllocator"],
        modules: &[],
        python_files: &[],
    },
    Rule {
        owner: "PyTorch caching allocator",
        pool: true,
        functions: &["c10::cuda::CUDACachingAllocator", "c10::cuda::CUDAAllocator", "NativeCachingAllocator"],
        modules: &[],
        python_files: &[],
    },
    Rule {
        owner: "cuBLAS workspace",
        pool: false,
        functions: &[
            "getNewWorkspace",
            "getCUDABlasLtWorkspace",
            "getCurrentCUDABlasHandle",
            "getCurrentCUDABlasLtHandle",
            "cublasWorkspace",
        ],
        modules: &[],
        python_files: &[],
    },
    Rule {
        owner: "CuPy memory pool",
        pool: true,
        functions: &["4cupy_4cuda_6memory", "cupy.cuda.memory"],
        modules: &["/cupy/cuda/memory."],
        python_files: &[],
    },
    Rule {
        owner: "CuPy pinned memory pool",
        pool: true,
        functions: &["4cupy_4cuda_13pinned_memory", "cupy.cuda.pinned_memory"],
        modules: &["/cupy/cuda/pinned_memory."],
        python_files: &[],
    },
    Rule { owner: "XLA allocator", pool: true, functions: &["BFCAllocator"], modules: &[], python_files: &[] },
    Rule {
        owner: "XLA allocator",
        pool: false,
        functions: &["stream_executor::", "xla::"],
        modules: &["xla_extension", "libxla", "/jaxlib/", "jax_cuda", "xla_cuda", "/jax_plugins/"],
        python_files: &[],
    },
    Rule { owner: "RMM", pool: true, functions: &["rmm::"], modules: &["librmm"], python_files: &[] },
    // The libraries' own functions (`cublasCreate_v2`, statically linked) and modules; not any
    // function naming them (`at::native::cudnn_convolution` allocates its output, not cuDNN's).
    Rule {
        owner: "cuBLAS",
        pool: false,
        functions: &["cublasCreate", "cublasLtCreate"],
        modules: &["libcublas"],
        python_files: &[],
    },
    Rule { owner: "cuDNN", pool: false, functions: &["cudnnCreate"], modules: &["libcudnn"], python_files: &[] },
    Rule { owner: "NCCL", pool: false, functions: &["ncclCommInit"], modules: &["libnccl"], python_files: &[] },
    Rule {
        owner: "cuFFT plans",
        pool: false,
        functions: &["cufftMakePlan", "cufftPlan", "CuFFTConfig", "CuFFTPlanCache"],
        modules: &["libcufft"],
        python_files: &[],
    },
    Rule { owner: "Numba", pool: false, functions: &[], modules: &[], python_files: &["/numba/cuda/", "/numba_cuda/"] },
];

/// The rule that frame `f` matches, if any.
fn rule_of(f: &Frame) -> Option<&'static Rule> {
    RULES.iter().find(|r| {
        if f.python {
            let file = f.file.as_deref().unwrap_or("");
            r.python_files.iter().any(|p| file.contains(p))
        } else {
            r.functions.iter().any(|p| f.function.contains(p)) || r.modules.iter().any(|p| f.module.contains(p))
        }
    })
}

/// A site's owner: its name and whether a caching pool holds the memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// "PyTorch caching allocator", "PyTorch caching allocator (cuBLAS workspace)", or
    /// [`USER_OWNER`].
    pub name: String,
    /// True if and only if a pool rule matched a frame of the stack.
    pub pool: bool,
}

/// Owners whose memory is a library's own state (a handle's workspaces, a communicator's
/// buffers, a plan): made once per handle, at the handle's first use, under whatever line of
/// the program first used it.
pub const LIBRARY_OWNERS: &[&str] = &["cuBLAS workspace", "cuBLAS", "cuDNN", "NCCL", "cuFFT plans"];

impl Owner {
    /// True if a library's own state is part of this owner: `cuBLAS`, or `PyTorch caching
    /// allocator (cuBLAS workspace)` (a workspace PyTorch took from its pool for cuBLAS).
    pub fn library(&self) -> bool {
        LIBRARY_OWNERS.iter().any(|l| {
            self.name == *l
                || self.name.strip_prefix(l).is_some_and(|rest| rest.starts_with(" ("))
                || self.name.strip_suffix(')').is_some_and(|n| n.ends_with(&format!("({l}")))
        })
    }
}

/// The owner of an allocation made with stack `frames` (innermost first). An empty stack (no
/// backtrace recorded) is owned by nobody known: [`USER_OWNER`].
pub fn owner_of(frames: &[Frame]) -> Owner {
    let mut names: Vec<&'static str> = Vec::new();
    let mut pool = false;
    for r in frames.iter().filter_map(rule_of) {
        pool |= r.pool;
        if !names.contains(&r.owner) {
            names.push(r.owner);
        }
    }
    let name = match names.as_slice() {
        [] => USER_OWNER.to_string(),
        [one] => (*one).to_string(),
        [outer, inner, ..] => format!("{outer} ({inner})"),
    };
    Owner { name, pool }
}

/// Path fragments of Python source that is not the program's own: the standard library,
/// installed packages, generated code (`torch.compile`'s cache) and frozen modules.
const NOT_USER_PY: &[&str] = &["/site-packages/", "/dist-packages/", "/lib/python3", "<frozen", "/torchinductor_"];

/// Module file-name prefixes of native code that is not the program's own: system libraries,
/// interpreters, frameworks and NVIDIA's libraries.
const NOT_USER_NATIVE: &[&str] = &[
    "libcudart",
    "libcuda.",
    "libcuda-",
    "libnvidia",
    "libc.",
    "libc-",
    "libstdc++",
    "libgcc",
    "libpthread",
    "ld-linux",
    "libpython",
    "python",
    "libtorch",
    "libc10",
    "libcublas",
    "libcudnn",
    "libnccl",
    "libcufft",
    "libcurand",
    "libcusparse",
    "libcusolver",
    "libnvrtc",
    "libnvJitLink",
    "libcupy",
    "libffi",
    "_ctypes",
    "libjax",
    "xla_extension",
    "libxla",
];

/// The line of user code by which the ranking unites a site with `frames` and `owner` with
/// the other sites of that line (`rank::Hints::line`): its [`user_line`], none for a library's
/// own state (a cuBLAS handle's workspaces), made once under whichever line first used the
/// library, where it would read as that line's growth (a training loop's first step: the
/// handle's buffers and the pool's first segments, six sites of the forward's line).
pub fn union_line(frames: &[Frame], owner: &Owner) -> Option<String> {
    user_line(frames).filter(|_| !owner.library())
}

/// The line of the program's own code an allocation came from, as `function file:line` (or
/// `module+offset` for a native frame without a line): the innermost Python frame whose source
/// is not in the standard library or an installed package, else (no Python frame at all) the
/// innermost native frame that is not internal, not owned by a library rule and not in a
/// system, interpreter or framework module. `None` when there is none.
pub fn user_line(frames: &[Frame]) -> Option<String> {
    if frames.iter().any(|f| f.python) {
        return frames
            .iter()
            .filter(|f| f.python)
            .find(|f| {
                let file = f.file.as_deref().unwrap_or("");
                !NOT_USER_PY.iter().any(|p| file.contains(p)) && rule_of(f).is_none()
            })
            .map(Frame::match_key);
    }
    frames
        .iter()
        .find(|f| {
            !f.internal
                && !f.module.is_empty()
                && f.function != "??"
                && rule_of(f).is_none()
                && !NOT_USER_NATIVE.iter().any(|p| f.module_name().starts_with(p))
        })
        .map(Frame::match_key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(function: &str, module: &str) -> Frame {
        Frame { function: function.into(), module: module.into(), ..Frame::default() }
    }

    fn py(function: &str, file: &str, line: u32) -> Frame {
        Frame {
            function: function.into(),
            file: Some(file.into()),
            line: Some(line),
            module: "python".into(),
            python: true,
            ..Frame::default()
        }
    }

    fn pool_frame() -> Frame {
        native("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", "/t/libc10_cuda.so")
    }

    #[test]
    fn owners_by_innermost_frames_nested_when_two_match() {
        let torch = "/v/site-packages/torch/lib/libc10_cuda.so";
        let pool = native("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", torch);
        let ws = native("at::cuda::getNewWorkspace()", "/v/site-packages/torch/lib/libtorch_cuda.so");
        let user = py("run_linear", "/home/u/leak.py", 5);
        let got = owner_of(&[native("cudaMalloc", "/usr/lib/libcudart.so.13"), pool.clone(), ws, user.clone()]);
        assert_eq!(got, Owner { name: "PyTorch caching allocator (cuBLAS workspace)".into(), pool: true });
        assert!(got.library());
        let own = |n: &str| Owner { name: n.into(), pool: false };
        assert!(own("cuBLAS").library() && own("NCCL").library() && own("cuBLAS workspace").library());
        assert!(!own(USER_OWNER).library() && !own("PyTorch caching allocator").library());
        assert!(!own("CuPy memory pool").library() && !own("XLA allocator").library());
        assert_eq!(owner_of(&[pool.clone(), pool, user.clone()]).name, "PyTorch caching allocator");
        let host = native(
            "at::cuda::(anonymous namespace)::CUDACachingHostAllocatorImpl::allocate_host_memory(unsigned long, void**)",
            "/v/site-packages/torch/lib/libtorch_cuda.so",
        );
        let got = owner_of(&[host, py("run", "/usr/lib/python3.12/threading.py", 1010)]);
        assert_eq!(got, Owner { name: "PyTorch pinned host allocator".into(), pool: true });
        let bfc =
            native("tsl::BFCAllocator::AllocateRawInternal(unsigned long, unsigned long, bool, unsigned long)", "");
        let se = native("stream_executor::gpu::GpuDriver::DeviceAllocate", "/v/site-packages/jaxlib/xla_extension.so");
        assert_eq!(owner_of(&[se, bfc]), Owner { name: "XLA allocator".into(), pool: true });
        let cupy = native(
            "__pyx_f_4cupy_4cuda_6memory_10MemoryPool_malloc",
            "/v/site-packages/cupy/cuda/memory.cpython-312-x86_64-linux-gnu.so",
        );
        assert_eq!(owner_of(&[cupy]).name, "CuPy memory pool");
        assert_eq!(
            owner_of(&[native("??", "/usr/lib/libcublasLt.so.13"), native("worker_gemm", "/a.out")]).name,
            "cuBLAS"
        );
        assert_eq!(owner_of(&[native("ncclCommInitRank", "/usr/lib/libnccl.so.2")]).name, "NCCL");
        let plugin = native("??", "/v/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so");
        assert_eq!(owner_of(&[plugin]), Owner { name: "XLA allocator".into(), pool: false });
        let conv = native("at::native::cudnn_convolution(at::Tensor const&)", "/t/libtorch_cuda.so");
        assert_eq!(owner_of(&[pool_frame(), conv]).name, "PyTorch caching allocator");
        assert_eq!(owner_of(&[native("??", "/usr/lib/libcudnn_ops.so.9")]).name, "cuDNN");
        assert_eq!(owner_of(&[native("cufftMakePlan1d", "/usr/lib/libcufft.so.12")]).name, "cuFFT plans");
        assert_eq!(owner_of(&[native("main", "/a.out"), user]), Owner { name: USER_OWNER.into(), pool: false });
        assert_eq!(owner_of(&[]).name, USER_OWNER);
    }

    #[test]
    fn user_line_skips_libraries_and_installed_python() {
        let frames = [
            native("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc", "/t/libc10_cuda.so"),
            py("forward", "/v/lib/python3.12/site-packages/torch/nn/modules/linear.py", 125),
            py("run_linear", "/home/u/leak.py", 5),
            py("<module>", "/home/u/leak.py", 12),
        ];
        assert_eq!(user_line(&frames).as_deref(), Some("run_linear /home/u/leak.py:5"));
        let thread = [native("x", "/t/libtorch_cuda.so"), py("run", "/usr/lib/python3.12/threading.py", 1010)];
        assert_eq!(user_line(&thread), None);
        let c = [
            native("cudaMalloc", "/usr/lib/libcudart.so.13"),
            native("??", "/usr/lib/libcublas.so.13"),
            Frame { file: Some("file.cu".into()), line: Some(7), ..native("worker_gemm", "/home/u/a.out") },
        ];
        assert_eq!(user_line(&c).as_deref(), Some("worker_gemm file.cu:7"));
    }
}
