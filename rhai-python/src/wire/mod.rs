//! rhaipool's wire and region logic inside the binding: what the worker needs natively and the
//! general modules (`engine`, `script`, `convert`, ...) know nothing of. It is the worker's one
//! codec: every frame the worker receives is read here, and every frame it sends written here.
//!
//! `codec.rs` reads every message other than a plain region call into Python objects and writes
//! every message from Python values, with `values.rs` (msgpack to and from Python values, as
//! rhaipool's `proto.values` packs and unpacks them);
//! `lane.rs` runs a worker's plain region call from its CALL frame to its RESULT frame, reading and
//! writing msgpack straight to and from Rhai values with `msgpack.rs` (both writers use `pack.rs`'s
//! encodings of scalars and lengths); `resident.rs` keeps the
//! lists a region's renders update by deltas (RHP §6.3); `host_line.rs` makes a provider call's
//! brokered host calls, its `HOST_CALL` frames written and its `HOST_REPLY` values read natively;
//! `socket.rs` drives the worker's socket, so the loop thread receives and routes replies, and a
//! script thread sends, without the GIL.
//! The frame layout and caps come from the caller (`worker/wire.py`, `worker/host_bridge.py`),
//! `proto` being the one definition of the wire.

pub mod codec;
pub mod host_line;
pub mod lane;
pub mod msgpack;
pub mod pack;
pub mod resident;
pub mod socket;
pub mod values;
