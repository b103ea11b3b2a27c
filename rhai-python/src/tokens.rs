//! Token counts in tiktoken's BPEs, from the `tiktoken-rs` crate (the ranks are embedded in it, so
//! counting needs no file and no network, inside the sandbox too).
//!
//! This is the count the reference runtime gives for `OpenAI` models (docs/scripts/providers.md#count_tokensstate-text-model): the model's own BPE
//! from tiktoken-rs's model table, `cl100k_base` for a name the table does not know, and the text
//! encoded with special tokens allowed, so a `<|endoftext|>` in it is one token and never an error.

use pyo3::prelude::*;
use tiktoken_rs::CoreBPE;

/// Texts at least this long are counted with the GIL released (below it, releasing costs more than
/// it frees).
const DETACH_AT: usize = 4096;

/// The BPE tiktoken-rs assigns to `model`, else `cl100k_base` (both are process-wide singletons).
fn bpe(model: &str) -> &'static CoreBPE {
    tiktoken_rs::bpe_for_model(model).unwrap_or_else(|_| tiktoken_rs::cl100k_base_singleton())
}

/// Tokens of `text` in `model`'s BPE; special tokens in the text count as one token each.
#[pyfunction]
pub fn tiktoken_count(py: Python<'_>, text: &str, model: &str) -> usize {
    let count = || bpe(model).encode_with_special_tokens(text).len();
    if text.len() >= DETACH_AT {
        py.detach(count)
    } else {
        count()
    }
}
