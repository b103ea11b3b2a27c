//! Values between Python and Rhai, in one place, with depth and range checks.
//!
//! | Python                     | Rhai            |
//! |----------------------------|-----------------|
//! | None                       | ()              |
//! | bool                       | bool            |
//! | int (i64 range)            | INT             |
//! | float                      | FLOAT           |
//! | str                        | string          |
//! | bytes/bytearray/memoryview | blob            |
//! | list, tuple                | array           |
//! | dict with str keys         | map (sorted)    |
//! | callable                   | function pointer|
//!
//! Written by hand rather than through serde: it does less work, keeps `bool`
//! apart from `int`, names the path of a bad value and bounds nesting.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple,
};
use rhai::{Array, Blob, Dynamic, ImmutableString, Map};

use crate::host;

/// Deepest nesting converted in either direction.
pub const MAX_DEPTH: usize = 64;

/// A conversion failure, with the path built while unwinding.
pub struct ConvError {
    kind: ConvKind,
    message: String,
    path: Vec<String>,
}

#[derive(Clone, Copy)]
enum ConvKind {
    Type,
    Overflow,
    Value,
}

impl ConvError {
    fn new(kind: ConvKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            path: Vec::new(),
        }
    }
    fn at(mut self, segment: String) -> Self {
        self.path.push(segment);
        self
    }
    /// The Python exception, naming where in `root` the bad value sits.
    pub fn into_pyerr(self, root: &str) -> PyErr {
        let mut path = root.to_string();
        for seg in self.path.iter().rev() {
            path.push_str(seg);
        }
        let msg = format!("{path}: {}", self.message);
        match self.kind {
            ConvKind::Type => PyTypeError::new_err(msg),
            ConvKind::Overflow => PyOverflowError::new_err(msg),
            ConvKind::Value => PyValueError::new_err(msg),
        }
    }
}

impl From<PyErr> for ConvError {
    fn from(e: PyErr) -> Self {
        // A `ValueError` (a str with lone surrogates cannot be UTF-8) stays one.
        let kind = Python::attach(|py| {
            if e.is_instance_of::<PyValueError>(py) {
                ConvKind::Value
            } else {
                ConvKind::Type
            }
        });
        ConvError::new(kind, e.to_string())
    }
}

fn too_deep() -> ConvError {
    ConvError::new(
        ConvKind::Value,
        format!("nesting deeper than {MAX_DEPTH} levels"),
    )
}

/// Python -> Rhai. `depth` counts containers entered so far.
pub fn to_dynamic(obj: &Bound<'_, PyAny>, depth: usize) -> Result<Dynamic, ConvError> {
    if obj.is_none() {
        return Ok(Dynamic::UNIT);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Dynamic::from(ImmutableString::from(s.to_str()?)));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Dynamic::from_bool(b.is_true()));
    }
    if obj.cast::<PyInt>().is_ok() {
        return match obj.extract::<i64>() {
            Ok(i) => Ok(Dynamic::from_int(i)),
            Err(_) => Err(ConvError::new(
                ConvKind::Overflow,
                "int does not fit in a 64-bit signed integer",
            )),
        };
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Dynamic::from_float(f.value()));
    }
    if depth >= MAX_DEPTH
        && (obj.cast::<PyDict>().is_ok()
            || obj.cast::<PyList>().is_ok()
            || obj.cast::<PyTuple>().is_ok())
    {
        return Err(too_deep());
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let Ok(key) = k.cast::<PyString>() else {
                let tn = k
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default();
                return Err(ConvError::new(
                    ConvKind::Type,
                    format!("map keys must be str, not {tn}"),
                ));
            };
            let key = key.to_str()?;
            let value = to_dynamic(&v, depth + 1).map_err(|e| e.at(format!("[{key:?}]")))?;
            map.insert(key.into(), value);
        }
        return Ok(Dynamic::from_map(map));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return seq_to_dynamic(l.iter(), l.len(), depth);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return seq_to_dynamic(t.iter(), t.len(), depth);
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Dynamic::from_blob(b.as_bytes().to_vec()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Dynamic::from_blob(b.to_vec()));
    }
    if obj.cast::<PyMemoryView>().is_ok() {
        let bytes: Vec<u8> = obj.call_method0("tobytes")?.extract()?;
        return Ok(Dynamic::from_blob(bytes as Blob));
    }
    if let Some(fp) = host::fnptr_from_python(obj)? {
        return Ok(Dynamic::from(fp));
    }
    let tn = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    Err(ConvError::new(
        ConvKind::Type,
        format!("cannot pass a {tn} to a script"),
    ))
}

fn seq_to_dynamic<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    len: usize,
    depth: usize,
) -> Result<Dynamic, ConvError> {
    let mut arr = Array::with_capacity(len);
    for (i, item) in items.enumerate() {
        arr.push(to_dynamic(&item, depth + 1).map_err(|e| e.at(format!("[{i}]")))?);
    }
    Ok(Dynamic::from_array(arr))
}

/// Map keys repeat across the entries of a ctx (`content`, `tokens`, ...): reuse
/// their Python strings (hash already computed) instead of building new ones.
struct KeyCache<'py> {
    slots: Vec<(ImmutableString, Bound<'py, PyString>)>,
}

impl<'py> KeyCache<'py> {
    const SIZE: usize = 32;

    fn get(&mut self, py: Python<'py>, key: &str) -> Bound<'py, PyString> {
        if let Some((_, s)) = self.slots.iter().find(|(k, _)| k.as_str() == key) {
            return s.clone();
        }
        let s = PyString::new(py, key);
        if self.slots.len() < Self::SIZE {
            self.slots.push((key.into(), s.clone()));
        }
        s
    }
}

/// Rhai -> Python. Maps come back with keys in sorted (byte) order.
pub fn to_python<'py>(
    py: Python<'py>,
    value: &Dynamic,
    depth: usize,
) -> Result<Bound<'py, PyAny>, ConvError> {
    to_python_cached(py, value, depth, &mut KeyCache { slots: Vec::new() }, None)
}

/// What a function pointer found while converting becomes.
pub type FnPtrHook<'a, 'py> = &'a dyn Fn(Python<'py>, rhai::FnPtr) -> PyResult<Bound<'py, PyAny>>;

/// Like `to_python`, with function pointers at any depth handed to `on_fnptr`.
pub fn to_python_with<'py>(
    py: Python<'py>,
    value: &Dynamic,
    on_fnptr: FnPtrHook<'_, 'py>,
) -> Result<Bound<'py, PyAny>, ConvError> {
    to_python_cached(
        py,
        value,
        0,
        &mut KeyCache { slots: Vec::new() },
        Some(on_fnptr),
    )
}

fn to_python_cached<'py>(
    py: Python<'py>,
    value: &Dynamic,
    depth: usize,
    keys: &mut KeyCache<'py>,
    on_fnptr: Option<FnPtrHook<'_, 'py>>,
) -> Result<Bound<'py, PyAny>, ConvError> {
    if value.is_unit() {
        return Ok(py.None().into_bound(py));
    }
    // `is_*` first: a failed `as_*` builds its error from `type_name()`, which
    // costs more than the check itself on this hot path.
    if value.is_string() {
        if let Ok(s) = value.as_immutable_string_ref() {
            return Ok(PyString::new(py, s.as_str()).into_any());
        }
    }
    if value.is_int() {
        if let Ok(i) = value.as_int() {
            return Ok(PyInt::new(py, i).into_any());
        }
    }
    if value.is_bool() {
        if let Ok(b) = value.as_bool() {
            return Ok(PyBool::new(py, b).to_owned().into_any());
        }
    }
    if value.is_float() {
        if let Ok(f) = value.as_float() {
            return Ok(PyFloat::new(py, f).into_any());
        }
    }
    if value.is_char() {
        if let Ok(c) = value.as_char() {
            return Ok(PyString::new(py, c.encode_utf8(&mut [0; 4])).into_any());
        }
    }
    if value.is_map() || value.is_array() {
        if depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        if let Ok(map) = value.as_map_ref() {
            let dict = PyDict::new(py);
            for (k, v) in map.iter() {
                let pv = to_python_cached(py, v, depth + 1, keys, on_fnptr)
                    .map_err(|e| e.at(format!("[{:?}]", k.as_str())))?;
                dict.set_item(keys.get(py, k.as_str()), pv)?;
            }
            return Ok(dict.into_any());
        }
        if let Ok(arr) = value.as_array_ref() {
            let mut items = Vec::with_capacity(arr.len());
            for (i, v) in arr.iter().enumerate() {
                items.push(
                    to_python_cached(py, v, depth + 1, keys, on_fnptr)
                        .map_err(|e| e.at(format!("[{i}]")))?,
                );
            }
            return Ok(PyList::new(py, items)?.into_any());
        }
    }
    if let Ok(b) = value.as_blob_ref() {
        return Ok(PyBytes::new(py, &b).into_any());
    }
    if value.is_fnptr() {
        if let Some(fp) = value.clone().flatten().try_cast::<rhai::FnPtr>() {
            return Ok(match on_fnptr {
                Some(hook) => hook(py, fp)?,
                None => host::fnptr_to_python(py, fp)?,
            });
        }
    }
    Err(ConvError::new(
        ConvKind::Type,
        format!(
            "a script value of type {} has no Python form",
            value.type_name()
        ),
    ))
}

/// Converts call arguments, naming the bad one as `args[i]...`.
pub fn args_to_dynamic(args: &Bound<'_, PyTuple>) -> PyResult<Vec<Dynamic>> {
    let mut out = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        out.push(to_dynamic(&a, 0).map_err(|e| e.into_pyerr(&format!("args[{i}]")))?);
    }
    Ok(out)
}

pub fn value_to_python<'py>(
    py: Python<'py>,
    value: &Dynamic,
    root: &str,
) -> PyResult<Bound<'py, PyAny>> {
    to_python(py, value, 0).map_err(|e| e.into_pyerr(root))
}
