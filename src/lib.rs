//! Where the CUDA stand-ins live. build.rs compiles C stand-ins for the CUDA driver
//! (`libcuda.so.1`) and runtime (`libcudart.so.13`, shared and static), the test programs and
//! the C example into one directory; this crate only names it, so that `cargo build` runs
//! build.rs and the demo and the tests can find the results.
#![forbid(unsafe_code)]

/// Absolute path of the directory holding the stand-ins, test programs and `leak_example`.
pub const STANDINS_DIR: &str = env!("GPUSHIM_STANDINS");
