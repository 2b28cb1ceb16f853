//! Whose code a frame is: the one table of frame classes, the headline that names a site for a
//! person, and the name of a thread that runs no code of the user's.
//!
//! Every frame is in one of four classes ([`Class`]):
//! - **user**: the program's own code, native or Python (anything no rule below claims);
//! - **framework**: PyTorch (its C++ libraries, `at::`/`c10::`/`torch::` code anywhere, its Python
//!   package, and the code `torch.compile` generates: Inductor's cache directory, FX's
//!   `<eval_with_key>` modules), JAX/XLA, CuPy, Numba, TensorFlow, Triton, Rust's cudarc;
//! - **vendor**: libraries of the CUDA toolkit and NVIDIA's Python wheels (cuBLAS/cuBLASLt,
//!   cuDNN, cuFFT, cuRAND, cuSPARSE, cuSOLVER, NCCL, nvJPEG, NVRTC, nvJitLink, cuTENSOR,
//!   TensorRT, NVSHMEM, NPP, CUPTI, NVTX, and anything under `site-packages/nvidia/`);
//! - **runtime**: the CUDA runtime and driver, and the language runtimes under the program: libc,
//!   libstdc++, the dynamic loader, the Python interpreter and its standard library.
//!
//! Frames of the last three classes are `internal` in reports: not the user's code.
//!
//! The user extends the table with two settings, read once by the collector (which inherits the
//! traced program's environment): `GPUSHIM_USER_MODULES` (these are the user's code) and
//! `GPUSHIM_INTERNAL_MODULES` (these are framework code), each a comma-separated list of glob
//! patterns (`*` any characters, `?` one). A pattern with a `/` is matched against the whole
//! path of the frame's module, or of its source file for a Python frame; one without is matched
//! against the file name alone. Example: `GPUSHIM_INTERNAL_MODULES=libmyengine.so*,*/vendored/*`.
//! The CUDA API's own entry points stay runtime whatever the settings; otherwise the settings
//! come before the built-in table, the user's list first.

use std::sync::OnceLock;

use crate::report::{Class, Frame};
use crate::settings::Settings;

/// What one rule of the table looks at.
#[derive(Clone, Copy, Debug)]
enum Test {
    /// The module's file name (for a Python frame: its source file's name) starts with this.
    Name(&'static str),
    /// The module's path (for a Python frame: its source file's) contains this.
    Path(&'static str),
    /// The module's path has a Python package directory of this name under `site-packages/` or
    /// `dist-packages/` (a trailing `*`: any name starting so).
    Package(&'static str),
    /// The function's name starts with this.
    Function(&'static str),
    /// The function's name is exactly this.
    FunctionIs(&'static str),
}

use Class::{Framework, Runtime, Vendor};
use Test::{Function, FunctionIs, Name, Package, Path};

/// The built-in table, first match wins. Sources for the names: the file lists of the CUDA
/// 13.0 toolkit's `lib64/` and of NVIDIA's `nvidia-*` wheels (`site-packages/nvidia/<lib>/lib/`),
/// PyTorch 2.11's `torch/lib/`, and the stacks of the GPU matrix (docs/gpu-matrix.md).
const RULES: &[(Class, Test)] = &[
    // The CUDA runtime and driver.
    (Runtime, Name("libcudart")),
    (Runtime, Name("libcuda.")),
    (Runtime, Name("libcuda-")),
    (Runtime, Name("libnvidia-")),
    // nvcc 13.0 names the static runtime's internal functions `libcudart_static_<hash>`.
    (Runtime, Function("__cudart")),
    (Runtime, Function("cudart::")),
    (Runtime, Function("libcudart_static_")),
    // Language runtimes.
    (Runtime, Name("libc.so")),
    (Runtime, Name("libc-")),
    (Runtime, Name("libpthread")),
    (Runtime, Name("libstdc++")),
    (Runtime, Name("libgcc_s")),
    (Runtime, Name("ld-linux")),
    (Runtime, Name("libdl")),
    (Runtime, Name("libm.so")),
    (Runtime, Name("libpython")),
    (Runtime, Name("python")),
    (Runtime, Name("_ctypes")),
    (Runtime, Name("libffi")),
    (Runtime, FunctionIs("_start")),
    (Runtime, Path("<frozen ")),
    // The notebook's machinery: a cell's frames are the user's, the kernel's around them not.
    (Runtime, Package("IPython")),
    (Runtime, Package("ipykernel")),
    (Runtime, Name("ipykernel_launcher")),
    (Runtime, Package("jupyter_client")),
    (Runtime, Package("jupyter_core")),
    (Runtime, Package("traitlets")),
    (Runtime, Package("tornado")),
    (Runtime, Package("zmq")),
    (Runtime, Package("comm")),
    // Vendor libraries, by file name wherever they are installed.
    (Vendor, Name("libcublas")),
    (Vendor, Name("libcudnn")),
    (Vendor, Name("libcufft")),
    (Vendor, Name("libcurand")),
    (Vendor, Name("libcusparse")),
    (Vendor, Name("libcusolver")),
    (Vendor, Name("libnccl")),
    (Vendor, Name("libnvjpeg")),
    (Vendor, Name("libnvrtc")),
    (Vendor, Name("libnvJitLink")),
    (Vendor, Name("libnvjitlink")),
    (Vendor, Name("libcutensor")),
    (Vendor, Name("libnvinfer")),
    (Vendor, Name("libnvonnxparser")),
    (Vendor, Name("libnvshmem")),
    (Vendor, Name("nvshmem")),
    (Vendor, Name("libnpp")),
    (Vendor, Name("libcupti")),
    (Vendor, Name("libnvToolsExt")),
    (Vendor, Name("libnvblas")),
    (Vendor, Name("libcufile")),
    // NVIDIA's Python wheels (`nvidia-cublas`, …), cuda-python's bindings (`cuda.bindings`,
    // `cuda.core`: their Cython modules call the runtime for the user's Python line) and
    // TensorRT's.
    (Vendor, Package("nvidia")),
    (Vendor, Package("cuda")),
    (Vendor, Package("cuda_bindings")),
    (Vendor, Package("cuda_core")),
    (Vendor, Package("tensorrt*")),
    // Frameworks' native libraries.
    (Framework, Name("libtorch")),
    (Framework, Name("libc10")),
    (Framework, Name("libshm")),
    (Framework, Name("libcaffe2")),
    (Framework, Name("libxla")),
    (Framework, Name("xla_extension")),
    (Framework, Name("libjax")),
    (Framework, Name("libcupy")),
    (Framework, Name("librmm")),
    (Framework, Name("libtensorflow")),
    (Framework, Name("_pywrap_tensorflow")),
    (Framework, Name("libtriton")),
    // Frameworks' packages: Python files and extension modules.
    (Framework, Package("torch")),
    (Framework, Package("functorch")),
    (Framework, Package("triton")),
    (Framework, Package("jax")),
    (Framework, Package("jaxlib")),
    (Framework, Package("jax_plugins")),
    (Framework, Package("jax_cuda*")),
    (Framework, Package("cupy")),
    (Framework, Package("cupyx")),
    (Framework, Package("cupy_backends")),
    (Framework, Package("numba")),
    (Framework, Package("numba_cuda")),
    (Framework, Package("tensorflow")),
    // Code torch.compile generates: Inductor's cache directory (default
    // `/tmp/torchinductor_<user>/`; `TORCHINDUCTOR_CACHE_DIR` is added at run time), Triton's
    // kernel cache, and FX graph modules (`<eval_with_key>.N`).
    (Framework, Path("/torchinductor_")),
    (Framework, Path("/.triton/cache/")),
    (Framework, Path("<eval_with_key>")),
    // Framework C++ anywhere (headers inlined into the user's binary, static links).
    (Framework, Function("c10::")),
    (Framework, Function("at::")),
    (Framework, Function("torch::")),
    (Framework, Function("caffe2::")),
    (Framework, Function("xla::")),
    (Framework, Function("tsl::")),
    (Framework, Function("stream_executor::")),
    (Framework, Function("tensorflow::")),
    (Framework, Function("cudarc::")),
    (Framework, Function("<cudarc::")),
];

/// The frame table: the user's settings, then the built-in rules.
#[derive(Clone, Debug, Default)]
pub struct Table {
    user: Vec<String>,
    internal: Vec<String>,
    extra_paths: Vec<String>,
}

impl Table {
    /// The table with the user's settings: `user` and `internal` are the values of
    /// `GPUSHIM_USER_MODULES` and `GPUSHIM_INTERNAL_MODULES` (comma-separated globs),
    /// `inductor_dir` that of `TORCHINDUCTOR_CACHE_DIR`.
    pub fn new(user: Option<&str>, internal: Option<&str>, inductor_dir: Option<&str>) -> Table {
        let list = |v: Option<&str>| -> Vec<String> {
            v.unwrap_or_default().split(',').map(str::trim).filter(|p| !p.is_empty()).map(String::from).collect()
        };
        let extra_paths = inductor_dir
            .map(|d| d.trim_end_matches('/'))
            .filter(|d| !d.is_empty())
            .map(|d| format!("{d}/"))
            .into_iter()
            .collect();
        Table { user: list(user), internal: list(internal), extra_paths }
    }

    /// Whether `f` is code that `torch.compile` generated (Inductor's cache directory, FX's
    /// `<eval_with_key>` modules), as the table's rules for them say.
    pub fn is_generated(&self, f: &Frame) -> bool {
        let path = f.file.as_deref().unwrap_or(&f.module);
        path.contains("/torchinductor_")
            || path.starts_with("<eval_with_key>")
            || self.extra_paths.iter().any(|d| path.contains(d.as_str()))
    }

    /// The table of this process's environment, read once.
    pub fn global() -> &'static Table {
        static T: OnceLock<Table> = OnceLock::new();
        T.get_or_init(|| {
            let s = Settings::global();
            Table::new(s.user_modules.as_deref(), s.internal_modules.as_deref(), s.torchinductor_cache_dir.as_deref())
        })
    }

    /// The class of a frame running `function` in module `path` (for a Python frame: its
    /// source file).
    pub fn classify(&self, path: &str, function: &str) -> Class {
        if is_cuda_api_name(function) {
            return Runtime;
        }
        let name = path.rsplit('/').next().unwrap_or(path);
        let matches = |p: &String| if p.contains('/') { glob(p, path) } else { glob(p, name) };
        if self.user.iter().any(matches) {
            return Class::User;
        }
        if self.internal.iter().any(matches) || self.extra_paths.iter().any(|p| path.starts_with(p.as_str())) {
            return Framework;
        }
        RULES
            .iter()
            .find(|(_, t)| match *t {
                Name(p) => name.starts_with(p),
                Path(p) => path.contains(p),
                Package(p) => in_package(path, p),
                Function(p) => function.starts_with(p),
                FunctionIs(p) => function == p,
            })
            .map_or_else(|| if is_stdlib(path) { Runtime } else { Class::User }, |&(c, _)| c)
    }

    /// The class of `f`.
    pub fn class_of(&self, f: &Frame) -> Class {
        let path = if f.python { f.file.as_deref().unwrap_or("") } else { &f.module };
        let c = self.classify(path, &f.function);
        if c == Class::User && !f.python {
            if f.file.as_deref().is_some_and(is_cuda_header) {
                return Runtime;
            }
            if f.file.as_deref().is_some_and(is_wrapper_source) {
                return Framework;
            }
        }
        c
    }
}

/// True if and only if `path` is a Python file of the standard library
/// (`…/lib/python3.12/threading.py`, not under `site-packages/`), or one of its extension
/// modules (`…/lib-dynload/_asyncio.cpython-312-x86_64-linux-gnu.so`): runtime code.
fn is_stdlib(path: &str) -> bool {
    (path.ends_with(".py") && path.contains("/lib/python3") && !path.contains("-packages/"))
        || path.contains("/lib-dynload/")
}

/// True if and only if `path` lies in a package directory named `pkg` (a trailing `*`: any
/// name starting so) right under `site-packages/` or `dist-packages/`.
fn in_package(path: &str, pkg: &str) -> bool {
    path.match_indices("-packages/").any(|(i, m)| {
        let rest = &path[i + m.len()..];
        let Some((dir, _)) = rest.split_once('/') else { return false };
        match pkg.strip_suffix('*') {
            Some(prefix) => dir.starts_with(prefix),
            None => dir == pkg,
        }
    })
}

/// True if and only if `function` is one of the intercepted CUDA entry points, with or without
/// a `_v2`/`_ptsz`-style suffix (statically linked runtimes have them in the user's binary).
pub fn is_cuda_api_name(function: &str) -> bool {
    gpushim_wire::Api::ALL
        .iter()
        .any(|a| function.strip_prefix(a.name()).is_some_and(|rest| rest.is_empty() || rest.starts_with('_')))
}

/// True if and only if source file `file` is one of the CUDA toolkit's runtime headers, whose
/// inline functions (the `cudaMalloc<T>` template of `cuda_runtime.h`) are compiled into the
/// user's binary: the runtime's code, not the user's line.
pub fn is_cuda_header(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    matches!(name, "cuda_runtime.h" | "cuda_runtime_api.h" | "cuda.h")
        || file.contains("/include/crt/")
        || file.contains("/targets/x86_64-linux/include/")
        || file.contains("/targets/sbsa-linux/include/")
}

/// Source path fragments of CUDA wrappers compiled into the user's binary: crates from the cargo
/// registry (their functions carry no module path in a line-tables-only build).
const WRAPPER_SOURCE_PARTS: &[&str] = &["/cudarc-"];

/// True if and only if source file `file` belongs to a CUDA wrapper library: one of
/// `WRAPPER_SOURCE_PARTS` followed by a version number, as in the cargo registry's
/// `.../cudarc-0.19.10/src/...` (a user's own `cudarc-leak/` directory is not one).
pub fn is_wrapper_source(file: &str) -> bool {
    WRAPPER_SOURCE_PARTS
        .iter()
        .any(|p| file.match_indices(p).any(|(i, _)| file[i + p.len()..].starts_with(|c: char| c.is_ascii_digit())))
}

/// Sets each frame's class and `internal` flag from the process's table.
pub fn mark(frames: &mut [Frame]) {
    let t = Table::global();
    for f in frames {
        f.class = t.class_of(f);
        f.internal = f.class != Class::User;
    }
}

/// `*` (any characters, none included) and `?` (one character) glob match of all of `text`.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matcher with one backtrack point (the latest `*`): linear in practice.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// The name of a function for a headline: without a C++ parameter list or return type.
pub fn short_function(f: &Frame) -> String {
    let name = f.function.as_str();
    if f.python {
        return name.to_string();
    }
    // Cut at the parameter list: the first `(` outside template brackets.
    let mut depth = 0i32;
    let mut end = name.len();
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth <= 0 && i > 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let head = &name[..end];
    // A return type before the name (`void foo::bar`) is dropped.
    match head.rfind(' ') {
        Some(i) if !head[..i].contains(['<', '(']) => head[i + 1..].to_string(),
        _ => head.to_string(),
    }
}

/// What a site is named by on the first screen, and what sites are grouped by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Headline {
    /// For a person: `worker_gemm (file.cu:7) via cublasCreate_v2`, or
    /// `MulBackward0 (autograd thread)`.
    pub text: String,
    /// Sites with the same key (and kind) are one cause: the user frame's place, or the kind of
    /// thread.
    pub key: String,
}

/// The headline of a site with `frames` (innermost first, classes marked), whose allocating
/// thread is named `thread_name` (its first thread's name, if known):
/// - the first user frame, plus the library entry point it called: the outermost framework or
///   vendor frame inner to it with a known, public name (not starting with `_`), as in
///   `worker_gemm (file.cu:7) via cublasCreate_v2`; no entry point when the user's code called
///   the CUDA runtime or driver directly;
/// - on a PyTorch autograd engine thread whose allocation came with the Python frames of the
///   thread that started the backward pass: `train (train.py:42) via Tensor.backward (autograd
///   thread)`;
/// - with no user frame, on a PyTorch autograd engine thread (`torch::autograd::Engine::
///   thread_main`, `evaluate_function`, or a thread named `pt_autograd_*`), the graph node that
///   allocated: `MulBackward0 (autograd thread)`;
/// - with no user frame elsewhere, the outermost framework or vendor frame with a known name
///   and the thread's name: `ncclProxyService (thread NCCL Service 0)`;
/// - else `None`.
pub fn headline(frames: &[Frame], thread_name: Option<&str>) -> Option<Headline> {
    let public = |f: &&Frame| {
        let name = short_function(f);
        let last = name.rsplit(['.', ':']).next().unwrap_or("");
        matches!(f.class, Class::Framework | Class::Vendor)
            && f.function != "??"
            && (!last.starts_with('_') || (last.starts_with("__") && last.ends_with("__")))
    };
    let autograd = thread_name.is_some_and(|n| n.starts_with("pt_autograd"))
        || frames.iter().any(|f| {
            f.function.starts_with("torch::autograd::Engine::thread_main")
                || f.function.starts_with("torch::autograd::Engine::evaluate_function")
                || f.function.starts_with("torch::autograd::Engine::thread_init")
        });
    if let Some(i) = frames.iter().position(|f| f.class == Class::User) {
        let user = &frames[i];
        let label = crate::report::words::frame_label(user);
        let mut text = match frames[..i].iter().rev().find(public) {
            Some(entry) => format!("{label} via {}", clean(&short_function(entry))),
            None => label.clone(),
        };
        // On an engine thread the Python frames are those of the thread that started the
        // backward pass (the shim's python/borrow.rs): the user's line that called it.
        if autograd {
            text.push_str(" (autograd thread)");
        }
        // A function compiled by torch.compile runs as one graph: its memory is allocated inside
        // the generated code, at whichever line of the function the graph was entered from, so
        // its lines are one cause (a compiled model's kept output and the activations its graph
        // saved come at two lines of its forward).
        let table = Table::global();
        let key = if frames[..i].iter().any(|f| f.python && table.is_generated(f)) {
            format!("user {} {} (compiled)", user.function, user.file.as_deref().unwrap_or(&user.module))
        } else {
            format!("user {}", user.match_key())
        };
        return Some(Headline { text, key });
    }
    if autograd {
        let node = frames.iter().find_map(|f| backward_node(&short_function(f)));
        let text = format!("{} (autograd thread)", node.unwrap_or_else(|| "backward".to_string()));
        return Some(Headline { text, key: "autograd thread".to_string() });
    }
    let f = frames.iter().rev().find(public)?;
    let who = thread_name.filter(|n| !n.is_empty()).map_or_else(|| "thread".to_string(), |n| format!("thread {n}"));
    let text = format!("{} ({})", clean(&short_function(f)), clean(&who));
    Some(Headline { key: format!("thread {text}"), text })
}

/// The autograd graph node a function belongs to: the component of its qualified name that
/// ends with `Backward` and digits (`torch::autograd::generated::MulBackward0::apply` →
/// `MulBackward0`), or a `*Backward` class of a custom `autograd.Function`.
fn backward_node(name: &str) -> Option<String> {
    name.split("::").find_map(|c| {
        let c = c.split('<').next().unwrap_or(c);
        let base = c.trim_end_matches(|ch: char| ch.is_ascii_digit());
        (base.ends_with("Backward") && base.len() > "Backward".len()).then(|| c.to_string())
    })
}

/// `s` with control characters shown as `?` (names come from the traced program's files).
fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(module: &str, function: &str) -> Frame {
        let mut f = Frame { function: function.into(), module: module.into(), ..Frame::default() };
        f.class = Table::default().class_of(&f);
        f.internal = f.class != Class::User;
        f
    }

    fn py(file: &str, function: &str, line: u32) -> Frame {
        let mut f = Frame {
            function: function.into(),
            file: Some(file.into()),
            line: Some(line),
            module: "python".into(),
            python: true,
            ..Frame::default()
        };
        f.class = Table::default().class_of(&f);
        f.internal = f.class != Class::User;
        f
    }

    #[test]
    fn pytorch_cpp_frames_and_generated_code_are_framework() {
        let t = Table::default();
        let lib = "/venv/lib/python3.12/site-packages/torch/lib";
        for (module, function) in [
            (format!("{lib}/libtorch_cpu.so"), "at::meta::structured_mm::meta(at::Tensor const&, at::Tensor const&)"),
            (format!("{lib}/libtorch_cpu.so"), "at::TensorIteratorBase::allocate_or_resize_outputs()"),
            (format!("{lib}/libtorch_cuda.so"), "at::native::(anonymous namespace)::addmm_out_cuda_impl"),
            (format!("{lib}/libc10_cuda.so"), "c10::cuda::CUDACachingAllocator::Native::malloc"),
            (format!("{lib}/libc10.so"), "c10::TensorImpl::TensorImpl"),
            (format!("{lib}/libtorch_python.so"), "THPVariable_mm"),
            // libtorch's headers inlined into a user's C++ binary.
            ("/home/u/app".to_string(), "at::Tensor::add(at::Tensor const&) const"),
            ("/home/u/app".to_string(), "torch::nn::LinearImpl::forward"),
        ] {
            assert_eq!(t.classify(&module, function), Class::Framework, "{module} {function}");
        }
        // Python files of the package, and code torch.compile generated.
        for file in [
            "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
            "/venv/lib/python3.12/site-packages/torch/_dynamo/eval_frame.py",
            "/usr/lib/python3/dist-packages/torch/autograd/__init__.py",
            "/tmp/torchinductor_root/cq/ccqx5tqgpyfqbj2vjc4lzcsejyh5ltshoqkntx2kypffmzfz2bfc.py",
            "/tmp/torchinductor_alice/triton/0/abc/triton_.py",
            "<eval_with_key>.7",
            "/root/.triton/cache/x/kernel.py",
        ] {
            assert_eq!(t.classify(file, "Runner.call"), Class::Framework, "{file}");
        }
        // A user's directory named like a framework is the user's.
        assert_eq!(t.classify("/home/u/torch/train.py", "main"), Class::User);
        assert_eq!(t.classify("/x/site-packages/torchvision/models/resnet.py", "f"), Class::User);
        // Inductor's cache moved by TORCHINDUCTOR_CACHE_DIR.
        let moved = Table::new(None, None, Some("/scratch/ind/"));
        assert_eq!(moved.classify("/scratch/ind/ab/cab.py", "call"), Class::Framework);
        assert_eq!(moved.classify("/scratch/industry.py", "call"), Class::User);
    }

    #[test]
    fn other_frameworks_vendors_and_runtimes() {
        let t = Table::default();
        let sp = "/venv/lib/python3.12/site-packages";
        for (path, class) in [
            (format!("{sp}/jaxlib/xla_extension.so"), Class::Framework),
            (format!("{sp}/jax/_src/api.py"), Class::Framework),
            (format!("{sp}/jax_cuda13_plugin/xla_cuda_plugin.so"), Class::Framework),
            (format!("{sp}/cupy/_core/core.cpython-312-x86_64-linux-gnu.so"), Class::Framework),
            (format!("{sp}/cupy_backends/cuda/api/runtime.cpython-312.so"), Class::Framework),
            (format!("{sp}/numba/cuda/cudadrv/driver.py"), Class::Framework),
            (format!("{sp}/tensorflow/python/_pywrap_tensorflow_internal.so"), Class::Framework),
            (format!("{sp}/triton/runtime/jit.py"), Class::Framework),
            // NVIDIA's wheels, whatever the library.
            (format!("{sp}/nvidia/cublas/lib/libcublasLt.so.13"), Class::Vendor),
            (format!("{sp}/nvidia/cu13/lib/libnvrtc-builtins.so.13.0"), Class::Vendor),
            (format!("{sp}/nvidia/nccl/lib/libnccl.so.2"), Class::Vendor),
            (format!("{sp}/tensorrt_libs/libnvinfer.so.10"), Class::Vendor),
            ("/usr/local/cuda/lib64/libcublas.so.13".to_string(), Class::Vendor),
            ("/usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9".to_string(), Class::Vendor),
            ("/opt/nvshmem/lib/libnvshmem_host.so.3".to_string(), Class::Vendor),
            ("/usr/local/cuda/lib64/libcufft.so.12".to_string(), Class::Vendor),
            ("/usr/local/cuda/lib64/libcudart.so.13".to_string(), Class::Runtime),
            ("/usr/lib/x86_64-linux-gnu/libcuda.so.1".to_string(), Class::Runtime),
            ("/usr/lib/x86_64-linux-gnu/libc.so.6".to_string(), Class::Runtime),
            ("/usr/bin/python3.12".to_string(), Class::Runtime),
            ("/usr/lib/python3.12/threading.py".to_string(), Class::Runtime),
            // The standard library's extension modules (asyncio's C tasks under a Jupyter kernel).
            ("/usr/lib/python3.12/lib-dynload/_asyncio.cpython-312-x86_64-linux-gnu.so".to_string(), Class::Runtime),
            ("<frozen runpy>".to_string(), Class::Runtime),
            ("/home/u/app".to_string(), Class::User),
        ] {
            assert_eq!(t.classify(&path, "f"), class, "{path}");
        }
        // The CUDA API's entry points in the user's binary (a static runtime) are runtime.
        assert_eq!(t.classify("/w/app", "cudaMalloc"), Class::Runtime);
        assert_eq!(t.classify("/w/app", "cuMemAlloc_v2"), Class::Runtime);
        assert_eq!(t.classify("/w/app", "cudaMallocWrapperOfMine"), Class::User);
        assert_eq!(t.classify("/w/app", "libcudart_static_5382377d5c772c9d"), Class::Runtime);
        let mut f = Frame { function: "malloc_sync".into(), module: "/w/app".into(), ..Frame::default() };
        f.file = Some("/root/.cargo/registry/src/x/cudarc-0.19.10/src/driver/result.rs".into());
        assert_eq!(t.class_of(&f), Class::Framework);
        f.file = Some("/work/examples/cudarc-leak/src/main.rs".into());
        assert_eq!(t.class_of(&f), Class::User);
        // The CUDA headers' inline `cudaMalloc<T>` compiled into the user's binary: runtime.
        for header in
            ["/usr/local/cuda/include/cuda_runtime.h", "/usr/local/cuda-13.0/targets/x86_64-linux/include/crt/x.hpp"]
        {
            f.file = Some(header.into());
            assert_eq!(t.class_of(&f), Class::Runtime, "{header}");
        }
        f.file = Some("/home/u/include/my_cuda_runtime.h".into());
        assert_eq!(t.class_of(&f), Class::User);
        // cuda-python's Cython modules: NVIDIA's, not the user's.
        for path in [
            format!("{sp}/cuda/bindings/cyruntime.cpython-312-x86_64-linux-gnu.so"),
            "/usr/local/lib/python3.12/dist-packages/cuda/bindings/_bindings/cyruntime.cpython-312-x86_64-linux-gnu.so"
                .to_string(),
            format!("{sp}/cuda/core/experimental/_memory.cpython-312-x86_64-linux-gnu.so"),
        ] {
            assert_eq!(t.classify(&path, "f"), Class::Vendor, "{path}");
        }
        assert_eq!(t.classify("/home/u/cuda/kernels.py", "f"), Class::User);
    }

    #[test]
    fn the_settings_extend_the_table() {
        let t = Table::new(None, None, None);
        let sp = "/venv/lib/python3.11/site-packages";
        assert_eq!(t.classify(&format!("{sp}/IPython/core/interactiveshell.py"), "run_code"), Class::Runtime);
        assert_eq!(t.classify(&format!("{sp}/ipykernel/kernelbase.py"), "dispatch_shell"), Class::Runtime);
        assert_eq!(t.classify(&format!("{sp}/ipykernel_launcher.py"), "<module>"), Class::Runtime);
        assert_eq!(t.classify("/tmp/ipykernel_4711/2849048635.py", "<module>"), Class::User);
        let t = Table::new(Some("libmine.so*, */site-packages/torch/nn/*"), Some("libengine*,*/vendored/*.py"), None);
        assert_eq!(t.classify("/opt/x/libengine.so.2", "run"), Class::Framework);
        assert_eq!(t.classify("/home/u/proj/vendored/lib.py", "f"), Class::Framework);
        assert_eq!(t.classify("/home/u/proj/other/lib.py", "f"), Class::User);
        // The user's list wins over the built-in table...
        assert_eq!(t.classify("/v/site-packages/torch/nn/modules/linear.py", "forward"), Class::User);
        assert_eq!(t.classify("/v/site-packages/torch/functional.py", "f"), Class::Framework);
        assert_eq!(t.classify("/w/libmine.so.1", "at::foo"), Class::User);
        // ... but not over the CUDA API itself.
        assert_eq!(t.classify("/w/libmine.so.1", "cudaMalloc"), Class::Runtime);
        assert_eq!(Table::new(Some(" , "), None, None).user, Vec::<String>::new());
    }

    #[test]
    fn globs() {
        assert!(glob("lib*.so*", "libcublas.so.13"));
        assert!(glob("*", ""));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("*DeviceThreadHandlePool*reserve*", "at::cuda::DeviceThreadHandlePool<x>::reserve(int)"));
        assert!(!glob("*.py", "a.pyc"));
        assert!(glob("*a*b*c", "xxaxxbxxbc"));
    }

    #[test]
    fn headline_is_the_users_line_and_the_entry_point_it_called() {
        let mut user = native("/w/app", "worker_gemm");
        user.file = Some("/w/src/file.c".into());
        user.line = Some(7);
        let frames = vec![
            native("/usr/local/cuda/lib64/libcudart.so.13", "cudaMalloc"),
            native("/usr/local/cuda/lib64/libcublas.so.13", "??"),
            native("/usr/local/cuda/lib64/libcublas.so.13", "cublasCreate_v2"),
            user.clone(),
            native("/usr/lib/libc.so.6", "start_thread"),
        ];
        let h = headline(&frames, Some("worker")).unwrap();
        assert_eq!(h.text, "worker_gemm (src/file.c:7) via cublasCreate_v2");
        assert_eq!(h.key, "user worker_gemm /w/src/file.c:7");
        // Called the runtime directly: no entry point.
        let direct = vec![native("/usr/local/cuda/lib64/libcudart.so.13", "cudaMalloc"), user.clone()];
        assert_eq!(headline(&direct, None).unwrap().text, "worker_gemm (src/file.c:7)");

        // PyTorch: the model's line, through nn.Module's private plumbing to the layer.
        let sp = "/v/lib/python3.12/site-packages/torch";
        let frames = vec![
            native(&format!("{sp}/lib/libc10_cuda.so"), "c10::cuda::CUDACachingAllocator::Native::malloc"),
            native(&format!("{sp}/lib/libtorch_cpu.so"), "at::meta::structured_mm::meta(at::Tensor const&)"),
            native(&format!("{sp}/lib/libtorch_python.so"), "torch::autograd::THPVariable_linear(_object*)"),
            native("/usr/bin/python3.12", "_PyObject_Call"),
            py(&format!("{sp}/nn/modules/linear.py"), "Linear.forward", 125),
            py(&format!("{sp}/nn/modules/module.py"), "Module._call_impl", 1784),
            py(&format!("{sp}/nn/modules/module.py"), "Module._wrapped_call_impl", 1773),
            py("/home/u/gpt.py", "GPT.forward", 30),
            py("/home/u/gpt.py", "<module>", 50),
        ];
        let h = headline(&frames, Some("python3")).unwrap();
        assert_eq!(h.text, "GPT.forward (u/gpt.py:30) via Linear.forward");
        // torch.compile: Inductor's generated code is the framework's; the user's line heads.
        let frames = vec![
            native(&format!("{sp}/lib/libc10_cuda.so"), "c10::cuda::CUDACachingAllocator::Native::malloc"),
            py("/tmp/torchinductor_root/x3/cx3abc.py", "Runner.call", 1269),
            py(&format!("{sp}/_inductor/output_code.py"), "CompiledFxGraph.__call__", 460),
            py(&format!("{sp}/_dynamo/eval_frame.py"), "_TorchDynamoContext.__call__._fn", 655),
            py("/home/u/train.py", "step", 12),
        ];
        assert_eq!(headline(&frames, None).unwrap().text, "step (u/train.py:12) via CompiledFxGraph.__call__");
    }

    #[test]
    fn lines_of_a_function_that_runs_compiled_code_are_one_cause() {
        // A compiled model's blocks come at whichever line of its forward the graph was entered
        // from (two lines here): one key; its own lines, not compiled, stay apart.
        let generated = |line| {
            vec![
                py("/tmp/torchinductor_root/x3/cx3abc.py", "Runner.call", 1269),
                py("/home/u/gpt.py", "GPT.forward", line),
                py("/home/u/gpt.py", "train", 12),
            ]
        };
        let (a, b) = (headline(&generated(603), None).unwrap(), headline(&generated(604), None).unwrap());
        assert_eq!(a.key, b.key);
        assert_eq!(a.key, "user GPT.forward /home/u/gpt.py (compiled)");
        assert_eq!(a.text, "GPT.forward (u/gpt.py:603) via Runner.call");
        let sp = "/v/lib/python3.12/site-packages/torch";
        let plain = |line| {
            vec![
                py(&format!("{sp}/nn/modules/linear.py"), "Linear.forward", 125),
                py("/home/u/gpt.py", "GPT.forward", line),
            ]
        };
        assert_ne!(headline(&plain(603), None).unwrap().key, headline(&plain(604), None).unwrap().key);
    }

    #[test]
    fn a_thread_without_user_frames_is_named_after_its_framework_frame() {
        let lib = "/v/site-packages/torch/lib";
        let frames = vec![
            native(&format!("{lib}/libc10_cuda.so"), "c10::cuda::CUDACachingAllocator::Native::malloc"),
            native(&format!("{lib}/libtorch_cpu.so"), "at::TensorIteratorBase::allocate_or_resize_outputs()"),
            native(
                &format!("{lib}/libtorch_cpu.so"),
                "torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor>&&)",
            ),
            native(&format!("{lib}/libtorch_cpu.so"), "torch::autograd::Engine::evaluate_function(x)"),
            native(&format!("{lib}/libtorch_cpu.so"), "torch::autograd::Engine::thread_main(x)"),
            native("/usr/lib/libstdc++.so.6", "??"),
            native("/usr/lib/libc.so.6", "start_thread"),
        ];
        let h = headline(&frames, Some("pt_autograd_0")).unwrap();
        assert_eq!(h.text, "MulBackward0 (autograd thread)");
        assert_eq!(h.key, "autograd thread");
        // With the Python frames of the thread that started the backward pass after the
        // engine's frames (the shim's python/borrow.rs): the user's line heads, and the thread
        // is named.
        let mut borrowed = frames.clone();
        borrowed.extend([
            py("/v/site-packages/torch/autograd/graph.py", "_engine_run_backward", 841),
            py("/v/site-packages/torch/autograd/__init__.py", "backward", 356),
            py("/v/site-packages/torch/_tensor.py", "Tensor.backward", 648),
            py("/home/u/train.py", "step", 21),
        ]);
        let h = headline(&borrowed, Some("pt_autograd_0")).unwrap();
        assert_eq!(h.text, "step (u/train.py:21) via Tensor.backward (autograd thread)");
        assert_eq!(h.key, headline(&borrowed[6..], None).unwrap().key, "the line's key, as on the main thread");
        // Another node on the same thread is the same cause.
        let mut other = frames.clone();
        other[2] = native(&format!("{lib}/libtorch_cpu.so"), "torch::autograd::generated::PowBackward1::apply(x)");
        assert_eq!(
            headline(&other, None).unwrap(),
            Headline { text: "PowBackward1 (autograd thread)".into(), key: "autograd thread".into() }
        );
        // A library's own thread.
        let nccl = vec![
            native("/usr/local/cuda/lib64/libcudart.so.13", "cudaMalloc"),
            native("/v/site-packages/nvidia/nccl/lib/libnccl.so.2", "ncclProxyConnect"),
            native("/v/site-packages/nvidia/nccl/lib/libnccl.so.2", "ncclProxyService(void*)"),
            native("/usr/lib/libc.so.6", "start_thread"),
        ];
        assert_eq!(headline(&nccl, Some("NCCL Service 0")).unwrap().text, "ncclProxyService (thread NCCL Service 0)");
        assert_eq!(headline(&nccl[..1], None), None);
    }

    #[test]
    fn short_function_names() {
        let f = |s: &str| short_function(&Frame { function: s.into(), ..Frame::default() });
        assert_eq!(f("cublasCreate_v2"), "cublasCreate_v2");
        assert_eq!(f("at::native::mm(at::Tensor const&)"), "at::native::mm");
        assert_eq!(f("void foo::bar<int>(int)"), "foo::bar<int>");
        assert_eq!(f("std::vector<std::pair<int, int>>::push_back(x)"), "std::vector<std::pair<int, int>>::push_back");
        assert_eq!(f("(anonymous namespace)::f(int)"), "(anonymous namespace)::f");
    }
}
