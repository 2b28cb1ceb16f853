//! Builds the C stand-ins for the CUDA libraries and the C test programs into
//! `$OUT_DIR/standins/`, and exports that directory to the integration tests as
//! `env!("GPUSHIM_STANDINS")`.
//!
//! Outputs (all in one directory; executables and libcudart carry RUNPATH
//! `$ORIGIN`, so they find each other there):
//! - `libcuda.so.1`          driver stand-in (standins/cuda.c, cuda_table.c, cuda_arrays.c, cuda_current.c, cuda_contexts.c, cuda_vmm.c, cuda_graphs.c)
//! - `libcudart.so.13`       runtime stand-in, shared (standins/cudart.c), version `libcudart.so.13`
//! - `libcudart.so.12`       the same source as a second runtime (version `libcudart.so.12`)
//! - `libcudart_static.a`    runtime stand-in, static archive (same source)
//! - `target_dynamic`        tests/programs/target*.c (TARGET_SOURCES) linked to libcudart.so.13
//! - `target_static`         tests/programs/target*.c (TARGET_SOURCES) with libcudart_static.a inside
//! - `driver_dlsym`          tests/programs/driver_dlsym.c (dlopen + dlsym of libcuda)
//! - `librtldnext.so`        tests/programs/rtldnext.c (a second RTLD_NEXT interposer)
//! - `hostile`               tests/programs/hostile.c linked to libcudart.so.13
//! - `exits`                 tests/programs/exits.c linked to libcudart.so.13 (hostile ends)
//! - `nostart`               tests/programs/nostart.c, `-nostartfiles`, linked to libcudart.so.13
//! - `reach`                 tests/programs/reach.c linked to libcudart.so.13 (reachability scans)
//! - `libcudauser.so`        tests/programs/cudauser.c (links libcudart; dlopen'ed RTLD_LOCAL)
//! - `libcudauser12.so`      the same, linked to libcudart.so.12
//! - `libloaderspy.so`       tests/programs/loaderspy.c (reports dlopen inside dl_iterate_phdr)
//! - `nocuda`                tests/programs/nocuda.c (no CUDA library; probes for CUDA)
//! - `localrt`               tests/programs/localrt.c (CUDA only through RTLD_LOCAL libraries)
//! - `leak_example`          examples/leak.c linked to libcudart.so.13
//! - `libnvidia-ml.so.1`     NVML stand-in for the collector (standins/nvml.c)
//! - `libcublas.so.13`       tests/programs/fakecublas.c: a vendor library's stand-in (cublasCreate_v2)
//! - `threads`               tests/programs/threads.c linked to libcublas.so.13 (threads and vendor frames)
//! - `libc10_cuda.so`        tests/programs/fakec10.c: PyTorch's caching allocator library's stand-in
//! - `leak.py`               a copy of examples/leak.py (run by `gpushim demo` beside `leak_example`)
//!
//! It also makes `standins` in the profile's output directory (`target/release/standins`,
//! beside the `gpushim` executable) a symbolic link to that directory: `gpushim demo` finds the
//! stand-ins there, and a person can name them in `LD_LIBRARY_PATH` by that one path.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Flags shared by every compile.
const COMMON: &[&str] = &["-std=gnu11", "-g", "-O0", "-fno-omit-frame-pointer", "-Wall", "-Wextra"];
/// Extra flags for shared libraries and the static archive's object.
const LIBRARY: &[&str] = &["-fPIC", "-fvisibility=hidden"];
/// Extra flags for the test programs.
const PROGRAM: &[&str] = &["-fno-inline"];
/// The test target's sources, compiled into both `target_dynamic` and `target_static`:
/// `main` and the shared helpers, then the scenarios by topic (all include target.h).
const TARGET_SOURCES: &[&str] = &[
    "tests/programs/target.c",
    "tests/programs/target_tracing.c",
    "tests/programs/target_processes.c",
    "tests/programs/target_odd.c",
    "tests/programs/target_rings.c",
];
/// Linker flags that make the output find its neighbours in the same directory.
const RUNPATH_ORIGIN: &[&str] = &["-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN"];

struct Ctx {
    cc: PathBuf,
    root: PathBuf,
    out: PathBuf,
}

impl Ctx {
    fn src(&self, rel: &str) -> OsString {
        self.root.join(rel).into_os_string()
    }

    fn include(&self) -> OsString {
        let mut s = OsString::from("-I");
        s.push(self.root.join("standins"));
        s
    }

    fn lib_dir(&self) -> OsString {
        let mut s = OsString::from("-L");
        s.push(&self.out);
        s
    }

    /// Runs the compiler to produce `name` in the output directory.  The file
    /// is written under a temporary name and renamed into place, so a process
    /// still running an older copy is never disturbed.
    fn cc(&self, name: &str, args: &[OsString]) {
        let tmp = self.out.join(format!(".{name}.tmp"));
        let _ = fs::remove_file(&tmp);
        let mut cmd = Command::new(&self.cc);
        cmd.args(COMMON).arg(self.include()).args(args).arg("-o").arg(&tmp);
        run(&mut cmd, name);
        fs::rename(&tmp, self.out.join(name)).unwrap_or_else(|e| panic!("renaming {} into place: {e}", tmp.display()));
    }
}

fn run(cmd: &mut Command, what: &str) {
    let output = cmd.output().unwrap_or_else(|e| panic!("building {what}: cannot run {cmd:?}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        panic!(
            "building {what} failed ({}):\n  {cmd:?}\n--- stderr ---\n{stderr}--- stdout ---\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout)
        );
    }
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        println!("cargo:warning={what}: {line}");
    }
}

fn os(items: &[&str]) -> Vec<OsString> {
    items.iter().map(OsString::from).collect()
}

fn main() {
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("standins");
    fs::create_dir_all(&out).unwrap_or_else(|e| panic!("creating {}: {e}", out.display()));

    for src in [
        "build.rs",
        "standins/cuda.c",
        "standins/cuda_table.c",
        "standins/cuda_table.h",
        "standins/cuda_arrays.c",
        "standins/cuda_current.c",
        "standins/cuda_contexts.c",
        "standins/cuda_vmm.c",
        "standins/cuda_graphs.c",
        "standins/cudart.c",
        "standins/nvml.c",
        "standins/cuda_standin.h",
        "standins/cudart_standin.h",
        "tests/programs/target.h",
        "tests/programs/driver_dlsym.c",
        "tests/programs/rtldnext.c",
        "tests/programs/hostile.c",
        "tests/programs/exits.c",
        "tests/programs/nostart.c",
        "tests/programs/reach.c",
        "tests/programs/cudauser.c",
        "tests/programs/loaderspy.c",
        "tests/programs/nocuda.c",
        "tests/programs/localrt.c",
        "tests/programs/fakecublas.c",
        "tests/programs/fakec10.c",
        "tests/programs/threads.c",
        "examples/leak.c",
        "examples/leak.py",
    ]
    .iter()
    .chain(TARGET_SOURCES)
    {
        println!("cargo:rerun-if-changed={src}");
    }

    // Set by the wheel's build: only what `gpushim demo` runs (libcuda.so.1, libcudart.so.13,
    // leak_example, leak.py), so that its compiler (zig, for glibc 2.28) builds nothing else.
    println!("cargo:rerun-if-env-changed=GPUSHIM_STANDINS_DEMO_ONLY");
    let demo_only = env::var_os("GPUSHIM_STANDINS_DEMO_ONLY").is_some_and(|v| v == "1");

    let build = cc::Build::new();
    let compiler = build.try_get_compiler().unwrap_or_else(|e| panic!("no C compiler: {e}"));
    let ctx = Ctx { cc: compiler.path().to_path_buf(), root, out };

    // Driver stand-in: libcuda.so.1.
    let mut a = os(LIBRARY);
    a.extend(os(&["-shared", "-Wl,-soname,libcuda.so.1"]));
    a.push(ctx.src("standins/cuda.c"));
    a.push(ctx.src("standins/cuda_table.c"));
    a.push(ctx.src("standins/cuda_arrays.c"));
    a.push(ctx.src("standins/cuda_current.c"));
    a.push(ctx.src("standins/cuda_contexts.c"));
    a.push(ctx.src("standins/cuda_vmm.c"));
    a.push(ctx.src("standins/cuda_graphs.c"));
    a.extend(os(&["-lpthread"]));
    ctx.cc("libcuda.so.1", &a);

    // Runtime stand-in: one object, linked shared and archived static.
    let mut a = os(LIBRARY);
    a.push("-c".into());
    a.push(ctx.src("standins/cudart.c"));
    ctx.cc("cudart.o", &a);
    let cudart_o = ctx.out.join("cudart.o");

    // Two runtimes from the one object, each with its soname as the version of its symbols, as
    // NVIDIA's are (`cudaMalloc@@libcudart.so.12`): a library linked to one binds to it even when
    // the other is in the global scope.
    let runtimes: &[&str] = if demo_only { &["libcudart.so.13"] } else { &["libcudart.so.13", "libcudart.so.12"] };
    for &soname in runtimes {
        let script = ctx.out.join(format!("{soname}.map"));
        fs::write(&script, format!("{soname} {{ global: *; }};\n"))
            .unwrap_or_else(|e| panic!("writing {}: {e}", script.display()));
        let mut a = os(&["-shared", &format!("-Wl,-soname,{soname}")]);
        let mut v = OsString::from("-Wl,--version-script,");
        v.push(&script);
        a.push(v);
        a.extend(os(RUNPATH_ORIGIN));
        a.push(cudart_o.clone().into_os_string());
        a.extend(os(&["-ldl", "-lpthread"]));
        ctx.cc(soname, &a);
    }

    // The example, built against the stand-in runtime.
    let mut a = os(PROGRAM);
    a.push("-DGPUSHIM_STANDIN".into());
    a.push(ctx.src("examples/leak.c"));
    a.push(ctx.lib_dir());
    a.extend(os(&["-Wl,--no-as-needed", "-l:libcudart.so.13"]));
    a.extend(os(RUNPATH_ORIGIN));
    ctx.cc("leak_example", &a);

    // The rest is for the tests; the wheel's build (python/gpushim_build.py) needs none of it.
    if !demo_only {
        // NVML stand-in: libnvidia-ml.so.1, loaded by the collector (GPUSHIM_NVML_LIB in tests).
        let mut a = os(LIBRARY);
        a.extend(os(&["-shared", "-Wl,-soname,libnvidia-ml.so.1"]));
        a.push(ctx.src("standins/nvml.c"));
        ctx.cc("libnvidia-ml.so.1", &a);

        let archive_tmp = ctx.out.join(".libcudart_static.a.tmp");
        let _ = fs::remove_file(&archive_tmp);
        let mut ar = build.get_archiver();
        ar.arg("crs").arg(&archive_tmp).arg(&cudart_o);
        run(&mut ar, "libcudart_static.a");
        fs::rename(&archive_tmp, ctx.out.join("libcudart_static.a"))
            .unwrap_or_else(|e| panic!("renaming libcudart_static.a into place: {e}"));

        // Test programs.
        let mut a = os(PROGRAM);
        a.extend(TARGET_SOURCES.iter().map(|s| ctx.src(s)));
        a.push(ctx.lib_dir());
        a.extend(os(&["-Wl,--no-as-needed", "-l:libcudart.so.13", "-lpthread"]));
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("target_dynamic", &a);

        let mut a = os(PROGRAM);
        a.extend(TARGET_SOURCES.iter().map(|s| ctx.src(s)));
        a.push(ctx.out.join("libcudart_static.a").into_os_string());
        a.extend(os(&["-ldl", "-lpthread"]));
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("target_static", &a);

        let mut a = os(PROGRAM);
        a.push(ctx.src("tests/programs/driver_dlsym.c"));
        a.push("-ldl".into());
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("driver_dlsym", &a);

        let mut a = os(LIBRARY);
        a.extend(os(&["-shared", "-Wl,-soname,librtldnext.so"]));
        a.push(ctx.src("tests/programs/rtldnext.c"));
        a.push("-ldl".into());
        ctx.cc("librtldnext.so", &a);

        let mut a = os(PROGRAM);
        a.push(ctx.src("tests/programs/hostile.c"));
        a.push(ctx.lib_dir());
        a.extend(os(&["-Wl,--no-as-needed", "-l:libcudart.so.13", "-ldl", "-lpthread"]));
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("hostile", &a);

        let mut a = os(PROGRAM);
        a.push(ctx.src("tests/programs/exits.c"));
        a.push(ctx.lib_dir());
        a.extend(os(&["-Wl,--no-as-needed", "-l:libcudart.so.13", "-lpthread"]));
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("exits", &a);

        // Its own `_start`: no `__libc_start_main`, no `main`.
        let mut a = os(PROGRAM);
        a.push("-nostartfiles".into());
        a.push(ctx.src("tests/programs/nostart.c"));
        a.push(ctx.lib_dir());
        a.extend(os(&["-Wl,--no-as-needed", "-l:libcudart.so.13"]));
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("nostart", &a);

        let mut a = os(PROGRAM);
        a.push(ctx.src("tests/programs/reach.c"));
        a.push(ctx.lib_dir());
        a.extend(os(&["-Wl,--no-as-needed", "-l:libcudart.so.13", "-lpthread", "-ldl"]));
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("reach", &a);

        for (user, runtime) in [("libcudauser.so", "libcudart.so.13"), ("libcudauser12.so", "libcudart.so.12")] {
            let mut a = os(LIBRARY);
            a.extend(os(&["-shared", &format!("-Wl,-soname,{user}")]));
            a.push(ctx.src("tests/programs/cudauser.c"));
            a.push(ctx.lib_dir());
            a.extend(os(&["-Wl,--no-as-needed", &format!("-l:{runtime}")]));
            a.extend(os(RUNPATH_ORIGIN));
            ctx.cc(user, &a);
        }

        let mut a = os(LIBRARY);
        a.extend(os(&["-shared", "-Wl,-soname,libloaderspy.so"]));
        a.push(ctx.src("tests/programs/loaderspy.c"));
        a.push("-ldl".into());
        // Its dlopen calls search its own RUNPATH: the stand-ins' directory.
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("libloaderspy.so", &a);

        let mut a = os(PROGRAM);
        a.push(ctx.src("tests/programs/nocuda.c"));
        a.push("-ldl".into());
        ctx.cc("nocuda", &a);

        let mut a = os(PROGRAM);
        a.push(ctx.src("tests/programs/localrt.c"));
        a.push("-ldl".into());
        ctx.cc("localrt", &a);

        // A vendor library's stand-in, named as cuBLAS is, and the threads that call it.
        let mut a = os(LIBRARY);
        a.extend(os(&["-shared", "-Wl,-soname,libcublas.so.13"]));
        a.push(ctx.src("tests/programs/fakecublas.c"));
        a.push(ctx.lib_dir());
        a.extend(os(&["-Wl,--no-as-needed", "-l:libcudart.so.13"]));
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("libcublas.so.13", &a);

        // PyTorch's caching allocator library's stand-in (its segment allocations).
        let mut a = os(LIBRARY);
        a.extend(os(&["-shared", "-Wl,-soname,libc10_cuda.so"]));
        a.push(ctx.src("tests/programs/fakec10.c"));
        a.push(ctx.lib_dir());
        a.extend(os(&["-Wl,--no-as-needed", "-l:libcudart.so.13"]));
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("libc10_cuda.so", &a);

        let mut a = os(PROGRAM);
        a.push(ctx.src("tests/programs/threads.c"));
        a.push(ctx.lib_dir());
        a.extend(os(&["-Wl,--no-as-needed", "-l:libcublas.so.13", "-lpthread"]));
        a.extend(os(RUNPATH_ORIGIN));
        ctx.cc("threads", &a);
    }

    // The Python example beside the C one, for `gpushim demo`.
    let tmp = ctx.out.join(".leak.py.tmp");
    fs::copy(ctx.root.join("examples/leak.py"), &tmp).unwrap_or_else(|e| panic!("copying examples/leak.py: {e}"));
    fs::rename(&tmp, ctx.out.join("leak.py")).unwrap_or_else(|e| panic!("renaming leak.py into place: {e}"));

    println!("cargo:rustc-env=GPUSHIM_STANDINS={}", ctx.out.display());
    check_path(&ctx.out);
    link_beside_the_executables(&ctx.out);
}

/// Makes `PROFILE_DIR/standins` a symbolic link to `dir` (this build's stand-ins), where
/// `PROFILE_DIR` is the directory cargo puts this profile's executables in (`target/release`:
/// `OUT_DIR` is `PROFILE_DIR/build/gpushim-tests-HASH/out`). The link is replaced in one
/// rename, so it always names the stand-ins built last for this profile. Anything other than a
/// symbolic link already there is left alone, with a warning.
fn link_beside_the_executables(dir: &Path) {
    let out = dir.parent().expect("OUT_DIR/standins");
    let profile = match out.ancestors().nth(3) {
        Some(p) if out.ancestors().nth(2).and_then(Path::file_name) == Some("build".as_ref()) => p,
        _ => {
            println!("cargo:warning=OUT_DIR {} is not PROFILE/build/PKG/out: no PROFILE/standins link", out.display());
            return;
        }
    };
    let link = profile.join("standins");
    if fs::symlink_metadata(&link).is_ok_and(|m| !m.file_type().is_symlink()) {
        println!("cargo:warning={} is not a symbolic link: left as it is", link.display());
        return;
    }
    let tmp = profile.join(".standins.tmp");
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(dir, &tmp)
        .unwrap_or_else(|e| panic!("linking {} to {}: {e}", tmp.display(), dir.display()));
    fs::rename(&tmp, &link).unwrap_or_else(|e| panic!("renaming {} to {}: {e}", tmp.display(), link.display()));
}

/// The directory is baked into the test binary; make sure it is usable text.
fn check_path(dir: &Path) {
    if dir.to_str().is_none() {
        panic!("OUT_DIR {} is not valid UTF-8", dir.display());
    }
}
