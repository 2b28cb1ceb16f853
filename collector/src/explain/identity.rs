//! A process's place in a multi-process job: its rank and job id from the launcher's
//! environment variables (the stream's `Identity` event), the file names that sort reports by
//! rank, and the GPU a rank calls its own.
//!
//! Report file names: `gpushim-<pid>.json` for a process without a rank; with one,
//! `gpushim-rank<RANK>-<pid>.json`, the rank written with at least five digits
//! (`gpushim-rank00003-4242.json`) so that a directory listing sorts the ranks of a job of up
//! to 100,000 ranks in rank order. The rule (which variables give the rank, how the stem is
//! written) is `gpushim_wire::naming`'s, which the shim's `gpushim_report_path` uses too, so
//! that the Python API's `report_path()` names the file written here. Snapshots, out-of-memory reports, interval reports and
//! holders files of the same process share that stem (`gpushim-rank00003-4242-snapshot-1.json`).

use std::collections::BTreeMap;

use gpushim_wire::DeviceInfo;

use crate::report::{Identity, PhysicalDevice, Report};

/// The report's form of a `DeviceInfo` event: the UUID written as `GPU-` and 8-4-4-4-12 hex
/// digits (as `nvidia-smi -L` prints it), empty when the driver gave none (all zero).
pub fn physical_device(d: &DeviceInfo) -> PhysicalDevice {
    let uuid = if d.uuid == [0; 16] {
        String::new()
    } else {
        let h: String = d.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!("GPU-{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
    };
    PhysicalDevice { ordinal: d.ordinal, pci_bus_id: d.pci_bus_id.clone(), uuid }
}

/// The machine's name for `report`'s device `ordinal`: the UUID its driver gave, else
/// [`physical_gpu`] (the `CUDA_VISIBLE_DEVICES` entry, else the ordinal).
pub fn gpu_of(report: &Report, ordinal: i32) -> String {
    report
        .physical_devices
        .iter()
        .find(|p| p.ordinal == ordinal && !p.uuid.is_empty())
        .map_or_else(|| physical_gpu(report.identity.as_ref(), ordinal), |p| p.uuid.clone())
}

/// Builds the report's identity from the launcher variables the shim sent, `(name, value)`.
pub fn from_vars(vars: &[(String, String)]) -> Identity {
    let env: BTreeMap<String, String> = vars.iter().cloned().collect();
    let num = |names: &[&str]| names.iter().find_map(|n| env.get(*n)?.trim().parse::<u32>().ok());
    let job_id = env.get("TORCHELASTIC_RUN_ID").cloned().or_else(|| {
        let job = env.get("SLURM_JOB_ID")?;
        Some(match env.get("SLURM_STEP_ID") {
            Some(step) => format!("{job}.{step}"),
            None => job.clone(),
        })
    });
    Identity {
        rank: gpushim_wire::naming::rank(vars),
        local_rank: num(&["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"]),
        world_size: num(&["WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]),
        job_id,
        cuda_visible_devices: env.get("CUDA_VISIBLE_DEVICES").cloned(),
        env,
    }
}

/// The stem every report file of process `pid` starts with (see the module doc).
pub fn stem(pid: u32, identity: Option<&Identity>) -> String {
    gpushim_wire::naming::report_stem(pid, identity.and_then(|i| i.rank))
}

/// The pid and rank of a final report's file name (`gpushim-<pid>.json`,
/// `gpushim-rank<R>-<pid>.json`, or either with the `.<n>` that a second report of the same
/// name gets); `None` for any other file (snapshots, out-of-memory, interval and holders files).
pub fn final_report_name(name: &str) -> Option<(u32, Option<u32>)> {
    let stem = name.strip_prefix("gpushim-")?.strip_suffix(".json")?;
    let stem = match stem.split_once('.') {
        Some((s, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => s,
        Some(_) => return None,
        None => stem,
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match stem.strip_prefix("rank") {
        Some(rest) => {
            let (rank, pid) = rest.split_once('-')?;
            (digits(rank) && digits(pid)).then(|| Some((pid.parse().ok()?, Some(rank.parse().ok()?))))?
        }
        None => digits(stem).then(|| Some((stem.parse().ok()?, None)))?,
    }
}

/// The entries of `CUDA_VISIBLE_DEVICES`, in order, up to the first that is not valid (CUDA
/// Programming Guide, "CUDA Environment Variables": "only the devices whose index is present
/// in the sequence are visible ... If one of the indices is invalid, only the devices whose
/// index precedes the invalid index are visible"). An entry is kept as written: a number, a
/// `GPU-…` UUID or a `MIG-…` name.
pub fn visible_devices(cvd: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in cvd.split(',') {
        let e = e.trim();
        let valid =
            (!e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())) || e.starts_with("GPU-") || e.starts_with("MIG-");
        if !valid {
            break;
        }
        out.push(e.to_string());
    }
    out
}

/// The machine's name for the process's device `ordinal`: the `CUDA_VISIBLE_DEVICES` entry
/// it maps to (`"3"`, `"GPU-…"`), or the ordinal itself when the variable is not set or does
/// not list that many devices.
pub fn physical_gpu(identity: Option<&Identity>, ordinal: i32) -> String {
    let listed = identity.and_then(|i| i.cuda_visible_devices.as_deref()).map(visible_devices);
    match listed {
        Some(v) if ordinal >= 0 && (ordinal as usize) < v.len() => v[ordinal as usize].clone(),
        _ => ordinal.to_string(),
    }
}

/// The device ordinal a rank calls its own: `LOCAL_RANK`'s, as `torchrun` programs pick it
/// (`torch.cuda.set_device(LOCAL_RANK)`), after `CUDA_VISIBLE_DEVICES` mapping: when the
/// variable lists a single GPU (as Slurm's `--gpus-per-task` sets it) that GPU is ordinal 0;
/// else ordinal `LOCAL_RANK`. `None` when `LOCAL_RANK` (or its Slurm/Open MPI equivalent) is
/// not set.
pub fn own_ordinal(identity: Option<&Identity>) -> Option<i32> {
    let id = identity?;
    let local = id.local_rank?;
    let listed = id.cuda_visible_devices.as_deref().map(visible_devices);
    Some(match listed {
        Some(v) if v.len() == 1 => 0,
        _ => local as i32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn torchrun_slurm_and_mpi_variables() {
        let t =
            from_vars(&vars(&[("RANK", "3"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "8"), ("TORCHELASTIC_RUN_ID", "j1")]));
        assert_eq!((t.rank, t.local_rank, t.world_size, t.job_id.as_deref()), (Some(3), Some(1), Some(8), Some("j1")));
        let s = from_vars(&vars(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_JOB_ID", "991"),
            ("SLURM_STEP_ID", "0"),
        ]));
        assert_eq!(
            (s.rank, s.local_rank, s.world_size, s.job_id.as_deref()),
            (Some(5), Some(1), Some(16), Some("991.0"))
        );
        let m = from_vars(&vars(&[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_LOCAL_RANK", "0")]));
        assert_eq!((m.rank, m.local_rank, m.job_id), (Some(2), Some(0), None));
        assert_eq!(m.env.len(), 2);
    }

    #[test]
    fn names_sort_by_rank_and_read_back() {
        let id = from_vars(&vars(&[("RANK", "12")]));
        assert_eq!(stem(4242, Some(&id)), "gpushim-rank00012-4242");
        assert_eq!(stem(4242, None), "gpushim-4242");
        let mut names = [
            stem(9, Some(&from_vars(&vars(&[("RANK", "10")])))),
            stem(100, Some(&id)),
            stem(7, Some(&from_vars(&vars(&[("RANK", "2")])))),
        ];
        names.sort();
        assert_eq!(names, ["gpushim-rank00002-7", "gpushim-rank00010-9", "gpushim-rank00012-100"]);
        assert_eq!(final_report_name("gpushim-rank00012-4242.json"), Some((4242, Some(12))));
        assert_eq!(final_report_name("gpushim-4242.json"), Some((4242, None)));
        assert_eq!(final_report_name("gpushim-4242.1.json"), Some((4242, None)));
        for other in [
            "gpushim-4242-snapshot-1.json",
            "gpushim-rank00012-4242-interval-3.json",
            "gpushim-4242.holders.json",
            "gpushim-4242-oom-1.json",
            "gpushim-x.json",
            "other.json",
        ] {
            assert_eq!(final_report_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_uuid_reads_as_nvidia_smi_writes_it() {
        let mut uuid = [0u8; 16];
        uuid[0] = 0xa0;
        uuid[15] = 0x0f;
        let p = physical_device(&DeviceInfo { ordinal: 1, pci_bus_id: "0000:11:00.0".into(), uuid });
        assert_eq!(p.uuid, "GPU-a0000000-0000-0000-0000-00000000000f");
        assert_eq!(physical_device(&DeviceInfo { ordinal: 0, pci_bus_id: String::new(), uuid: [0; 16] }).uuid, "");
    }

    #[test]
    fn own_gpu_follows_local_rank_and_visible_devices() {
        let id = |kv: &[(&str, &str)]| from_vars(&vars(kv));
        assert_eq!(own_ordinal(Some(&id(&[("LOCAL_RANK", "3")]))), Some(3));
        assert_eq!(own_ordinal(Some(&id(&[("LOCAL_RANK", "3"), ("CUDA_VISIBLE_DEVICES", "5")]))), Some(0));
        assert_eq!(own_ordinal(Some(&id(&[("LOCAL_RANK", "1"), ("CUDA_VISIBLE_DEVICES", "4,5")]))), Some(1));
        assert_eq!(own_ordinal(Some(&id(&[("RANK", "1")]))), None);
        assert_eq!(own_ordinal(None), None);
        let two = id(&[("CUDA_VISIBLE_DEVICES", "4,GPU-abc,x,7")]);
        assert_eq!(visible_devices("4,GPU-abc,x,7"), ["4", "GPU-abc"]);
        assert_eq!(physical_gpu(Some(&two), 0), "4");
        assert_eq!(physical_gpu(Some(&two), 1), "GPU-abc");
        assert_eq!(physical_gpu(Some(&two), 2), "2");
        assert_eq!(physical_gpu(None, 1), "1");
    }
}
