//! rhai-python: the real Rhai engine for Python, hardened for untrusted scripts.
//!
//! This file only declares modules and the `#[pymodule]`; logic lives in
//! `engine.rs` (engine set-up), `script.rs` (calls), `context.rs` (per-call state),
//! `convert.rs` (values), `array.rs` (arrays held in Rust form), `json.rs` (JSON), `host.rs` (Python callables),
//! `stack.rs` (the stack each call runs on) and `errors.rs` (the exception mapping). rhaipool's own
//! wire and region logic (the worker's native lane, its msgpack codec and the resident lists) is
//! apart, in `wire/`.

mod array;
mod context;
mod convert;
mod engine;
mod errors;
mod host;
mod json;
mod script;
mod stack;
mod tokens;
mod wire;

use pyo3::prelude::*;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pymodule]
fn _rhai(m: &Bound<'_, PyModule>) -> PyResult<()> {
    context::remember_main_thread();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("RHAI_VERSION", "1.26.0")?;
    m.add_class::<array::Array>()?;
    m.add_class::<engine::Engine>()?;
    m.add_class::<script::Script>()?;
    m.add_class::<script::CallResult>()?;
    m.add_class::<context::CancelToken>()?;
    m.add_class::<host::Callback>()?;
    m.add_class::<host::FnPtr>()?;
    m.add_class::<wire::codec::Codec>()?;
    m.add_class::<wire::lane::Lane>()?;
    m.add_class::<wire::host_line::HostLine>()?;
    m.add_class::<wire::socket::Wire>()?;
    m.add_function(wrap_pyfunction!(wire::host_line::bind_line, m)?)?;
    m.add_class::<wire::resident::ResidentLists>()?;
    m.add_function(wrap_pyfunction!(context::current_call_remaining, m)?)?;
    m.add_function(wrap_pyfunction!(json::to_json, m)?)?;
    m.add_function(wrap_pyfunction!(json::parse_json, m)?)?;
    m.add_function(wrap_pyfunction!(tokens::tiktoken_count, m)?)?;
    Ok(())
}
