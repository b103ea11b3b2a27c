//! rhaipool's wire and region logic inside the binding: what the worker needs natively and the
//! general modules (`engine`, `script`, `convert`, ...) know nothing of.
//!
//! `lane.rs` runs a worker's plain region call from its CALL frame to its RESULT frame, reading and
//! writing msgpack straight to and from Rhai values with `msgpack.rs`; `resident.rs` keeps the
//! lists a region's renders update by deltas (RHP §6.3). The frame layout and caps come from the
//! caller (`worker/lane.py`), `proto` being the one definition of the wire.

pub mod lane;
pub mod msgpack;
pub mod resident;
