//! Reports read back and compared: [`diff`] (what grew between two reports of one process) and
//! [`job`] (the final reports of the processes of one job side by side).

pub mod diff;
pub mod job;
