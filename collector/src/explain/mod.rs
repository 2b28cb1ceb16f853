//! What the live set means: the state of [`crate::account`] turned into a [`Report`](crate::report::Report)
//! that names code, owners and causes.
//!
//! [`assemble`] builds a report: [`symbolize`] turns return addresses into frames (Python frames
//! from [`pyframes`]), [`frames`] classes each frame and names each site, [`owners`] names who
//! made each live allocation, [`suppress`] hides accepted sites from the suspects, [`gpumem`]
//! says where the GPU memory is with the driver's view that [`nvml`] samples. [`holders`] (who
//! holds the memory, from a heap walk), [`reach`] (definitely lost, from the shim's scan),
//! [`identity`] (a process's place in its job) and [`oom`] (the failed request of an
//! out-of-memory report) add what the stream said besides allocations.

pub mod assemble;
pub mod frames;
pub mod gpumem;
pub mod holders;
pub mod identity;
pub mod kinds;
pub mod nvml;
pub mod oom;
pub mod owners;
#[cfg(test)]
mod perf_tests;
pub mod pyframes;
pub mod reach;
pub mod suppress;
pub mod symbolize;
