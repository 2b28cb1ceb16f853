//! The names of a process's report files, one rule for both processes: the collector names
//! the files it writes by it, and the shim's `gpushim_report_path` (the Python API's
//! `report_path()`) says the final report's name by it before the collector has written it.
//!
//! A process without a rank: `gpushim-<pid>`; with one, `gpushim-rank<RANK>-<pid>`, the rank
//! written with at least five digits (`gpushim-rank00003-4242`) so that a directory listing
//! sorts the ranks of a job of up to 100,000 ranks in rank order. The rank is the first of
//! [`RANK_VARS`] that is set to a whole number, as the shim read them from its environment
//! when tracing started (the stream's `Identity` event).

/// The launchers' variables that give a process's rank, first found first used: PyTorch's
/// `torchrun` (`RANK`), Slurm's `srun` (`SLURM_PROCID`), Open MPI's `mpirun`
/// (`OMPI_COMM_WORLD_RANK`), MPICH/Hydra (`PMI_RANK`).
pub const RANK_VARS: &[&str] = &["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"];

/// The rank of a process whose launcher variables are `vars`, `(name, value)`: the first of
/// [`RANK_VARS`] whose value (spaces around it ignored) is a whole number; of a name given
/// twice, the last value counts.
pub fn rank(vars: &[(String, String)]) -> Option<u32> {
    RANK_VARS.iter().find_map(|n| vars.iter().rev().find(|(k, _)| k == n)?.1.trim().parse::<u32>().ok())
}

/// The stem every report file of process `pid` with rank `rank` starts with (the module doc):
/// the final report is `<stem>.json`, its snapshots `<stem>-snapshot-<n>.json`.
pub fn report_stem(pid: u32, rank: Option<u32>) -> String {
    match rank {
        Some(rank) => format!("gpushim-rank{rank:05}-{pid}"),
        None => format!("gpushim-{pid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_rank_is_the_first_launcher_variable_that_is_a_number() {
        assert_eq!(rank(&vars(&[("RANK", "0"), ("WORLD_SIZE", "2")])), Some(0));
        assert_eq!(rank(&vars(&[("LOCAL_RANK", "1"), ("WORLD_SIZE", "2")])), None, "a local rank is not a rank");
        assert_eq!(rank(&vars(&[("SLURM_PROCID", "7"), ("RANK", " 3 ")])), Some(3), "RANK first, trimmed");
        assert_eq!(rank(&vars(&[("RANK", "x"), ("PMI_RANK", "5")])), Some(5), "a value that is no number is passed");
        assert_eq!(rank(&[]), None);
    }

    #[test]
    fn stems_carry_the_rank_in_five_digits_at_least() {
        assert_eq!(report_stem(3767, Some(0)), "gpushim-rank00000-3767");
        assert_eq!(report_stem(9, Some(123_456)), "gpushim-rank123456-9");
        assert_eq!(report_stem(3767, None), "gpushim-3767");
    }
}
