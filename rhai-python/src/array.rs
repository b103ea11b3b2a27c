//! `Array`: a Rhai array kept in Rust form between calls.
//!
//! A host that passes the same large list to many calls (a region's entries, on
//! every render) paid a Python -> Rhai conversion of every item on every call.
//! An `Array` converts its items once; wherever it appears in a call's arguments
//! (at any depth) the script gets a copy of it, made in Rust without touching
//! Python. Appends and removals keep it in step with the host's list.
//!
//! The script always gets its own copy: what it does to `ctx.entries` never
//! reaches the held items. Nested values are cloned and freed recursively by
//! rhai, so every clone and free happens on a big stack (see `stack.rs`).

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use rhai::Dynamic;

use crate::{convert, stack};

/// A Rhai array held by Python: converted once, copied into each call that receives it.
#[pyclass(module = "rhai")]
pub struct Array {
    items: rhai::Array,
}

/// Converts `items` (any iterable) item by item, naming a bad one as `items[i]...`.
pub(crate) fn convert_items(items: &Bound<'_, PyAny>) -> PyResult<rhai::Array> {
    let mut out = rhai::Array::new();
    for (i, item) in items.try_iter()?.enumerate() {
        let value =
            convert::to_dynamic(&item?).map_err(|e| e.into_pyerr(&format!("items[{i}]")))?;
        out.push(value);
    }
    Ok(out)
}

/// Frees `values` on a big stack: they may nest as deep as a script's budget allows.
pub(crate) fn free(values: Vec<Dynamic>) {
    if !values.is_empty() {
        stack::run_on_big_stack(stack::MAX_STACK, move || drop(values));
    }
}

impl Array {
    /// An `Array` holding `items` (already in Rhai form).
    pub fn from_items(items: rhai::Array) -> Self {
        Self { items }
    }

    /// A copy of the items for one call (rhai clones nested values recursively).
    pub fn copy_items(&self) -> rhai::Array {
        stack::run_on_big_stack(stack::MAX_STACK, || self.items.clone())
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        free(std::mem::take(&mut self.items));
    }
}

#[pymethods]
impl Array {
    /// Converts every item of `items` now (as a call argument would be converted).
    #[new]
    #[pyo3(signature = (items=None))]
    fn new(items: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let items = match items {
            Some(items) => stack::run_on_big_stack(stack::MAX_STACK, || convert_items(items))?,
            None => rhai::Array::new(),
        };
        Ok(Self { items })
    }

    /// Appends the converted `items`; nothing is appended if one of them cannot be converted.
    fn extend(&mut self, items: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut added = stack::run_on_big_stack(stack::MAX_STACK, || convert_items(items))?;
        self.items.append(&mut added);
        Ok(())
    }

    /// Removes the items at `indices` (any order, repeats allowed); all-or-nothing,
    /// `IndexError` if one is out of range.
    fn remove(&mut self, indices: Vec<i64>) -> PyResult<()> {
        if indices.is_empty() {
            return Ok(());
        }
        let len = self.items.len();
        let mut doomed = vec![false; len];
        for index in indices {
            match usize::try_from(index) {
                Ok(i) if i < len => doomed[i] = true,
                _ => {
                    return Err(PyIndexError::new_err(format!(
                        "index {index} is out of range for an Array of {len} items"
                    )))
                }
            }
        }
        let mut removed = Vec::new();
        let mut kept = rhai::Array::with_capacity(len);
        for (item, gone) in std::mem::take(&mut self.items).into_iter().zip(doomed) {
            if gone {
                removed.push(item);
            } else {
                kept.push(item);
            }
        }
        self.items = kept;
        free(removed);
        Ok(())
    }

    /// The items converted back to Python (a new list; for inspection, not for calls).
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let copy = self.copy_items();
        let value = stack::run_on_big_stack(stack::MAX_STACK, || {
            convert::owned_value_to_python(py, Dynamic::from_array(copy), "Array")
        })?;
        Ok(value.cast_into::<PyList>()?)
    }

    fn __len__(&self) -> usize {
        self.items.len()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to_list(py)?.try_iter().map(Bound::into_any)
    }

    fn __repr__(&self) -> String {
        format!("Array(<{} items>)", self.items.len())
    }
}
