//! Device memory by kind (`memory_kinds[]` of a report, `kinds[]` of a holders file): what a
//! heap walk found the GPU memory to be, per device. Computed by `explain::kinds`.

use serde::{Deserialize, Serialize};

use super::is_zero;

/// One device's memory by kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceKinds {
    /// CUDA device ordinal.
    pub ordinal: i32,
    /// Live device and managed bytes on the device when the walk's result arrived.
    pub traced_bytes: u64,
    /// The bytes of the tensor kinds (`parameters` to `other_tensors`), summed: the memory the
    /// objects found cover, each byte once.
    pub tensor_bytes: u64,
    /// The driver's figure for the process on the device (`gpu_memory[].driver_bytes`), when
    /// known; then the kinds, `untraced` included, add up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_bytes: Option<u64>,
    /// The kinds, in the fixed order of [`KIND_NAMES`]; the five tensor kinds always, the others
    /// only when they hold bytes.
    pub kinds: Vec<KindBytes>,
}

/// The bytes of one kind of memory on one device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindBytes {
    /// One of the names of [`KIND_NAMES`].
    pub kind: String,
    /// For `workspace`: the library (`cuBLAS`, as `sites[].owner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Bytes.
    pub bytes: u64,
    /// For the tensor kinds: the objects found of this kind.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub objects: u64,
    /// For the tensor kinds: the lines that allocated their memory, most bytes first, at most
    /// five (`explain::kinds::TOP_LINES`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<KindLine>,
}

/// The objects of one kind whose memory one line allocated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindLine {
    /// The line: the first user frame of the Python stack PyTorch recorded for the block
    /// (`step (proj/train.py:40) via empty`), or else the first user frame of the site whose
    /// allocation holds the memory (`site 3` when the report lists no frame for it).
    pub line: String,
    /// The site whose allocation holds the memory, when the line is the site's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<u32>,
    /// The bytes the objects of this line add to the kind.
    pub bytes: u64,
    /// The objects.
    pub objects: u64,
}

/// The kinds, in their order, with the words a person reads for each (`workspace` is named by
/// its owner instead).
pub const KIND_NAMES: &[(&str, &str)] = &[
    ("parameters", "parameters"),
    ("gradients", "gradients"),
    ("optimizer_state", "optimizer state"),
    ("activations", "activations saved by autograd"),
    ("other_tensors", "other tensors and arrays"),
    ("allocated_no_tensor", "allocated, no tensor found"),
    ("cached_free", "cached free"),
    ("workspace", "workspace"),
    ("no_object", "no object found"),
    ("untraced", "untraced"),
];

impl KindBytes {
    /// The kind in words: its name from [`KIND_NAMES`], a workspace by its owner.
    pub fn words(&self) -> String {
        match (&self.owner, self.kind.as_str()) {
            (Some(o), "workspace") => o.clone(),
            (_, k) => KIND_NAMES.iter().find(|(n, _)| *n == k).map_or(k, |(_, w)| *w).to_string(),
        }
    }
}
