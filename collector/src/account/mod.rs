//! The accounting: the live set and everything counted from it, in sequence order. Pure: no I/O,
//! no clocks, nothing of the layers above (explain, render, collect).
//!
//! [`reorder`] applies the stream's allocation events in sequence order to the [`live`] set,
//! which keeps its [`gauge`]s, the [`vmm`] handles and mappings, thinned [`series`] of live bytes
//! and the process's [`timeline`]; [`rank`] picks the sites whose live bytes keep rising.

pub mod gauge;
pub mod live;
pub mod rank;
pub mod reorder;
pub mod series;
pub mod timeline;
pub mod vmm;
