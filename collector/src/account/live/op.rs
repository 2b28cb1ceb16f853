//! The operations on the live set: the events that take part in the sequence order.

use gpushim_wire::{
    Alloc, ContextCreated, Failed, Free, FreePending, GraphExec, GraphExecDestroy, GraphLaunch, GraphMemTrim,
    GraphNode, HandleRef, Map, Reset, Unmap,
};

/// One event that takes part in the sequence order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A successful allocation.
    Alloc(Alloc),
    /// A call to a free function.
    Free(Free),
    /// A failed allocation.
    Failed(Failed),
    /// A free still inside its real call when a snapshot was asked for (its [`Free`] comes
    /// later, with the same sequence number).
    FreePending(FreePending),
    /// A context torn down, with every device and managed allocation in it.
    Reset(Reset),
    /// A context the program created (not a primary one).
    ContextCreated(ContextCreated),
    /// A virtual address range mapped to a VMM handle (`cuMemMap`).
    Map(Map),
    /// A `cuMemUnmap` call.
    Unmap(Unmap),
    /// A VMM handle retained or imported.
    HandleRef(HandleRef),
    /// A graph allocation node created: known, not live. (Boxed, as `GraphExec`: rare events
    /// that would make every `Op` in the reorder buffer larger.)
    GraphNode(Box<GraphNode>),
    /// A graph with memory nodes instantiated: its table of allocation and free nodes.
    GraphExec(Box<GraphExec>),
    /// An executable graph with memory nodes launched.
    GraphLaunch(GraphLaunch),
    /// An executable graph with memory nodes destroyed.
    GraphExecDestroy(GraphExecDestroy),
    /// A device's unused graph memory returned to the system.
    GraphMemTrim(GraphMemTrim),
}

/// Calls `$body` with `$x` bound to the event inside any [`Op`].
macro_rules! each_op {
    ($op:expr, $x:ident => $body:expr) => {
        match $op {
            Op::Alloc($x) => $body,
            Op::Free($x) => $body,
            Op::Failed($x) => $body,
            Op::FreePending($x) => $body,
            Op::Reset($x) => $body,
            Op::ContextCreated($x) => $body,
            Op::Map($x) => $body,
            Op::Unmap($x) => $body,
            Op::HandleRef($x) => $body,
            Op::GraphNode($x) => $body,
            Op::GraphExec($x) => $body,
            Op::GraphLaunch($x) => $body,
            Op::GraphExecDestroy($x) => $body,
            Op::GraphMemTrim($x) => $body,
        }
    };
}

impl Op {
    /// The event's global sequence number.
    pub fn seq(&self) -> u64 {
        each_op!(self, x => x.seq)
    }

    /// Gives the event sequence number `seq` (tests build events first and number them after).
    #[cfg(test)]
    pub(crate) fn set_seq(&mut self, seq: u64) {
        each_op!(self, x => x.seq = seq)
    }

    /// The event's monotonic timestamp, ns.
    pub fn ts_ns(&self) -> u64 {
        each_op!(self, x => x.ts_ns)
    }
}
