//! `ResidentLists`: lists of values kept in Rhai form between calls, updated by deltas.
//!
//! rhaipool's worker keeps each region's entries between renders, so a render ships only what
//! changed (its RHP §6.3). The lists live here, in Rust, so that both of the worker's paths use
//! the same ones: its Python path (`worker/resident.py`, the store's Python face) and its native
//! `Lane`, which applies a render's delta straight from the CALL frame.
//!
//! A list is named by `(tenant, key)`: one tenant's lists are never reachable from another's
//! calls. A delta names the version it applies to (`base`); the list is updated before the hook
//! runs, whatever the hook then does. The store is bounded by count and bytes (the items'
//! msgpack sizes, least recently used first out); losing a list is always safe: the next delta
//! finds it missing and the whole list is sent again. A list is taken out while it is updated,
//! so one that a delta cannot apply to (or whose new items cannot be converted) is forgotten,
//! never kept half-changed.

use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rhai::Dynamic;

use crate::array::{self, Array as HeldArray};
use crate::stack;

struct Held {
    version: i64,
    entries: rhai::Array,
    sizes: Vec<usize>,
    total: usize,
    used: u64,
}

/// What a call asks of a list: replace it (`base` is `None`) or apply a delta to version `base`.
pub struct Update<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub version: i64,
    pub base: Option<i64>,
    /// Indices into the list as it was, strictly ascending.
    pub drop: &'a [i64],
}

struct Store {
    max_keys: usize,
    max_bytes: usize,
    held: HashMap<(String, String), Held>,
    bytes: usize,
    tick: u64,
}

impl Store {
    fn take(&mut self, tenant: &str, key: &str) -> Option<Held> {
        let held = self.held.remove(&(tenant.to_string(), key.to_string()))?;
        self.bytes -= held.total;
        Some(held)
    }

    fn keep(&mut self, tenant: &str, key: &str, mut held: Held) {
        self.tick += 1;
        held.used = self.tick;
        self.bytes += held.total;
        self.held
            .insert((tenant.to_string(), key.to_string()), held);
        let mut evicted = Vec::new();
        while self.held.len() > self.max_keys || self.bytes > self.max_bytes {
            let Some(oldest) = self
                .held
                .iter()
                .min_by_key(|(_, h)| h.used)
                .map(|(slot, _)| slot.clone())
            else {
                break;
            };
            if let Some(gone) = self.held.remove(&oldest) {
                self.bytes -= gone.total;
                evicted.push(Dynamic::from_array(gone.entries));
            }
        }
        array::free(evicted);
    }
}

/// Whether every index of `drop` (strictly ascending) is in the list.
fn in_range(held: &Held, drop: &[i64]) -> bool {
    drop.last()
        .is_none_or(|&last| usize::try_from(last).is_ok_and(|l| l < held.entries.len()))
}

/// Applies a delta in place: `added` appended, then the items at `drop` (indices into the list
/// as it was, checked by `in_range`) removed.
fn apply(held: &mut Held, drop: &[i64], added: Vec<Dynamic>, sizes: &[usize]) {
    held.entries.extend(added);
    held.sizes.extend_from_slice(sizes);
    held.total += sizes.iter().sum::<usize>();
    if !drop.is_empty() {
        let mut doomed = vec![false; held.entries.len()];
        for &index in drop {
            if let Ok(i) = usize::try_from(index) {
                doomed[i] = true;
            }
        }
        let mut removed = Vec::with_capacity(drop.len());
        let mut kept = rhai::Array::with_capacity(held.entries.len() - drop.len());
        let mut kept_sizes = Vec::with_capacity(kept.capacity());
        let items = std::mem::take(&mut held.entries).into_iter();
        for ((item, size), gone) in items.zip(held.sizes.iter()).zip(doomed) {
            if gone {
                held.total -= size;
                removed.push(item);
            } else {
                kept.push(item);
                kept_sizes.push(*size);
            }
        }
        held.entries = kept;
        held.sizes = kept_sizes;
        array::free(removed);
    }
}

/// A worker's resident lists; see the module documentation.
#[pyclass(frozen, module = "rhai")]
pub struct ResidentLists {
    store: Mutex<Store>,
}

impl ResidentLists {
    /// Applies `update` with the `added` items (their msgpack sizes in `sizes`); the list as the
    /// hook gets it (a copy), or `None` when the delta's base is not held (the list is then
    /// forgotten). `added` is called only once the delta is known to apply (the Python path
    /// converts the items then): if it fails, the list is forgotten too.
    pub fn update<E>(
        &self,
        update: &Update<'_>,
        added: impl FnOnce() -> Result<(Vec<Dynamic>, Vec<usize>), E>,
    ) -> Result<Option<rhai::Array>, E> {
        let Ok(mut store) = self.store.lock() else {
            return Ok(None);
        };
        let old = store.take(update.tenant, update.key);
        let held = match (update.base, old) {
            (None, old) => {
                array::free(old.map(|h| h.entries).unwrap_or_default());
                let (entries, sizes) = added()?;
                let total = sizes.iter().sum();
                Some(Held {
                    version: update.version,
                    entries,
                    sizes,
                    total,
                    used: 0,
                })
            }
            (Some(base), Some(mut held))
                if held.version == base && in_range(&held, update.drop) =>
            {
                let (items, sizes) = match added() {
                    Ok(pair) => pair,
                    Err(e) => {
                        array::free(held.entries);
                        return Err(e);
                    }
                };
                apply(&mut held, update.drop, items, &sizes);
                held.version = update.version;
                Some(held)
            }
            (Some(_), old) => {
                array::free(old.map(|h| h.entries).unwrap_or_default());
                None
            }
        };
        let Some(held) = held else {
            return Ok(None);
        };
        let copy = stack::run_on_big_stack(stack::MAX_STACK, || held.entries.clone());
        if held.total <= store.max_bytes {
            store.keep(update.tenant, update.key, held);
        } else {
            drop(store);
            array::free(held.entries);
        }
        Ok(Some(copy))
    }
}

#[pymethods]
impl ResidentLists {
    #[new]
    #[pyo3(signature = (*, max_keys, max_bytes))]
    fn new(max_keys: usize, max_bytes: usize) -> Self {
        Self {
            store: Mutex::new(Store {
                max_keys,
                max_bytes,
                held: HashMap::new(),
                bytes: 0,
                tick: 0,
            }),
        }
    }

    /// Applies a delta (or a whole list when `base` is `None`) with `items` converted as call
    /// arguments are and `sizer(items)` their msgpack sizes (both only once the delta is known to
    /// apply); the list as an `Array` for the hook, or `None` when `base` is not held.
    #[pyo3(signature = (tenant, key, version, base, drop, items, sizer))]
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        tenant: &str,
        key: &str,
        version: i64,
        base: Option<i64>,
        drop: Vec<i64>,
        items: &Bound<'_, PyAny>,
        sizer: &Bound<'_, PyAny>,
    ) -> PyResult<Option<HeldArray>> {
        let update = Update {
            tenant,
            key,
            version,
            base,
            drop: &drop,
        };
        let converted = || -> PyResult<(Vec<Dynamic>, Vec<usize>)> {
            let converted =
                stack::run_on_big_stack(stack::MAX_STACK, || array::convert_items(items))?;
            let measured: Vec<usize> = sizer.call1((items,))?.extract()?;
            if measured.len() != converted.len() {
                return Err(PyValueError::new_err("sizer must give one size per item"));
            }
            Ok((converted, measured))
        };
        Ok(self.update(&update, converted)?.map(HeldArray::from_items))
    }

    /// Bytes held (the sum of the kept items' msgpack sizes).
    #[getter]
    fn bytes(&self) -> usize {
        self.store.lock().map_or(0, |s| s.bytes)
    }

    fn __len__(&self) -> usize {
        self.store.lock().map_or(0, |s| s.held.len())
    }
}

impl Drop for ResidentLists {
    fn drop(&mut self) {
        if let Ok(store) = self.store.get_mut() {
            let lists = std::mem::take(&mut store.held);
            array::free(
                lists
                    .into_values()
                    .map(|h| Dynamic::from_array(h.entries))
                    .collect(),
            );
        }
    }
}
