//! The companion file of who holds the memory (`*.holders.json`): a heap walk's objects
//! attributed to the sites whose allocations hold them.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::is_zero;
use serde::{Deserialize, Serialize};

/// The schema of a companion file of who holds the memory (`*.holders.json`).
pub const HOLDERS_SCHEMA: &str = "gpushim.holders.v1";

/// A companion file: the heap walk of one report, attributed to its sites.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Holders {
    /// Always [`HOLDERS_SCHEMA`].
    pub schema: String,
    /// Process id of the target.
    pub pid: u32,
    /// `snapshot`, `oom` or `exit`: which report the walk completes.
    pub reason: String,
    /// The snapshot's or out-of-memory report's number; absent for the final report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
    /// How the walk went.
    pub walk: Walk,
    /// Per site with live memory, most live bytes first: the objects inside its allocations.
    pub sites: Vec<SiteHolders>,
    /// Objects whose memory lies in no live allocation (allocated before tracing, by an untraced
    /// path, or freed already); `site` is absent.
    pub unattributed: SiteHolders,
    /// The traced device memory by kind, per device (no workspaces or untraced bytes: the
    /// report's owners and driver figure complete it, `explain::kinds::complete`); absent in
    /// older files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<super::DeviceKinds>,
}

/// How a walk went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Walk {
    /// `complete`, `cut` (stopped at `GPUSHIM_HEAP_WALK_MS`), `blocked` (did not start
    /// within the cap: the main thread ran no Python code), `failed`, or `skipped` (another walk
    /// was waiting or running).
    pub status: String,
    /// The walk's duration (for `blocked`, how long the shim waited), seconds.
    pub elapsed_s: f64,
    /// Python objects visited.
    pub objects_visited: u64,
    /// Objects found that own GPU memory.
    pub objects_found: u64,
    /// The status in words, for a person.
    pub message: String,
    /// Which core walked: `native` (the shim's breadth-first core, shim/src/python/bfs.rs) or
    /// `python` (the walker's own loop: another interpreter, or `GPUSHIM_HEAP_WALK_NATIVE=0`);
    /// absent for a walk that did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<String>,
}

/// The objects of one site (or of no site).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteHolders {
    /// The site's stack id (as in the report's `sites[].id`); absent for `unattributed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<u32>,
    /// The site's live bytes when the walk's result arrived.
    pub live_bytes: u64,
    /// Objects found inside the site's live allocations.
    pub objects: u64,
    /// Their bytes, summed (views of the same memory count once each).
    pub object_bytes: u64,
    /// Bytes of the site's live allocations that some object's memory covers (overlaps count
    /// once): memory in use.
    pub in_use_bytes: u64,
    /// `live_bytes - in_use_bytes`: memory no Python object covers (a caching allocator's free
    /// blocks, or memory nothing in Python refers to).
    pub cached_bytes: u64,
    /// Where `in_use_bytes` comes from: `torch` (the allocated bytes of PyTorch's caching
    /// allocator segments inside the site, from `torch.cuda.memory_snapshot()`) or `objects`
    /// (the extents of the objects found). Absent in older files: `objects`.
    #[serde(default = "objects_word")]
    pub in_use_from: String,
    /// What holds the objects, one line per group of objects with the same path, most bytes
    /// first.
    pub holders: Vec<HolderLine>,
    /// The largest objects, at most 10 (`holders::TOP_OBJECTS`).
    pub top_objects: Vec<HeldObject>,
    /// PyTorch's live blocks inside the site's segments whose allocation PyTorch recorded a
    /// Python stack for (`torch.cuda.memory_snapshot()`'s `frames`; the shim turns the record
    /// on by default: `GPUSHIM_TORCH_STACKS`), grouped by stack, most bytes first, at most 10
    /// (`holders::TOP_BLOCK_STACKS`). Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<BlockStack>,
    /// The site's other block stacks, beyond `blocks` (not written: the final report's
    /// suspects are named from all of them).
    #[serde(skip)]
    pub more_blocks: Vec<BlockStack>,
}

/// PyTorch blocks allocated from one Python stack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockStack {
    /// Live blocks with this stack.
    pub blocks: u64,
    /// Their bytes (the blocks' sizes, as PyTorch rounds them).
    pub bytes: u64,
    /// The Python stack of their allocation, innermost first, at most 48 frames.
    pub frames: Vec<BlockFrame>,
}

/// One Python frame of a [`BlockStack`], as PyTorch recorded it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockFrame {
    /// The code's file (`co_filename`).
    pub file: String,
    /// The line being run.
    pub line: u32,
    /// The function's name (`co_name`).
    pub function: String,
}

fn objects_word() -> String {
    "objects".to_string()
}

/// A group of objects kept alive the same way.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HolderLine {
    /// `path` (reachable from a root), `native` (held from native code), `autograd` (held from
    /// native code by the autograd graph of a tensor reachable from a root) or `cycle` (only by
    /// an unreachable reference cycle: the next cyclic collection frees them).
    pub how: String,
    /// The steps from the root, e.g. `["train.py global 'history'", "list[*]"]`; for
    /// `autograd`, the path of the tensor whose graph saved the objects, ending with that
    /// tensor (`Tensor() float32 grad_fn=AddBackward0`).
    pub path: Vec<String>,
    /// For `autograd`: the type of the graph node the objects are inputs of (`AbsBackward0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_for: Option<String>,
    /// For `autograd`: the graphs of the group (one per tensor at the end of `path`) ...
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graphs: u64,
    /// ... and their nodes, each node counted once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub graph_nodes: u64,
    /// Objects in the group.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The whole line for a person.
    pub text: String,
}

/// One object that owns GPU memory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldObject {
    /// Start of its memory, hex.
    pub address: String,
    /// Its extent, bytes.
    pub bytes: u64,
    /// What it is (`Tensor(1024, 1024) float32 grad_fn=MulBackward0`).
    pub desc: String,
    /// Its holder's path, as in `holders[].text`.
    pub holder: String,
}

impl Holders {
    /// The entry of site `id`, if any.
    pub fn site(&self, id: u32) -> Option<&SiteHolders> {
        self.sites.iter().find(|s| s.site == Some(id))
    }

    /// Reads and checks a companion file.
    ///
    /// # Errors
    /// If it cannot be read, is not JSON of this shape, or has another schema.
    pub fn read(path: &Path) -> Result<Holders> {
        let bytes = std::fs::read(path)?;
        let value: serde_json::Value = serde_json::from_slice(&bytes).context("not valid JSON")?;
        match value.get("schema").and_then(|s| s.as_str()) {
            Some(HOLDERS_SCHEMA) => {}
            Some(other) => bail!("schema is {other:?}, this gpushim reads {HOLDERS_SCHEMA:?}"),
            None => bail!("not a gpushim holders file (no \"schema\" string)"),
        }
        serde_json::from_value(value).context("malformed gpushim holders file")
    }
}
