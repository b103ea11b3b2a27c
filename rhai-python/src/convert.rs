//! Values between Python and Rhai, in one place, with depth and range checks.
//!
//! Past 400 lines because both directions walk values iteratively (an explicit work list instead of
//! recursion, for values of any depth), and the two walks mirror each other best side by side.
//!
//! | Python                     | Rhai            |
//! |----------------------------|-----------------|
//! | None                       | ()              |
//! | bool                       | bool            |
//! | int (i64 range)            | INT             |
//! | int beyond i64             | FLOAT (lossy)   |
//! | float                      | FLOAT           |
//! | str                        | string          |
//! | bytes/bytearray/memoryview | blob            |
//! | list, tuple                | array           |
//! | rhai.Array (held)          | array (a copy)  |
//! | dict with str keys         | map (sorted)    |
//! | callable                   | function pointer|
//!
//! Written by hand rather than through serde: it does less work, keeps `bool`
//! apart from `int` and names the path of a bad value. Both directions walk
//! nested values with an explicit stack, not recursion: any depth the engine's
//! own limits let a script build converts (the contract sets no nesting limit of its own),
//! and Rhai -> Python takes the value apart as it goes, so nothing deep is
//! freed recursively either.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple,
};
use rhai::{Array, Blob, Dynamic, ImmutableString, Map};

use crate::array::Array as HeldArray;
use crate::host;

/// A conversion failure and the path (innermost segment first) of the bad value.
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
    /// Prefixes the path of the containers around the bad value (outermost first).
    fn within(mut self, outer: impl DoubleEndedIterator<Item = String>) -> Self {
        self.path.extend(outer.rev());
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

fn type_name_of(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// A Python container being converted: its children still to do, the values done.
struct PyFrame<'py> {
    children: std::vec::IntoIter<(String, Bound<'py, PyAny>)>,
    built: Built,
}

enum Built {
    Array(Array),
    Map(Map, String),
}

impl PyFrame<'_> {
    /// `[i]` or `["key"]` of the child being converted, for error paths (written
    /// only when there is an error: formatting one per child cost every call).
    fn segment(&self) -> String {
        match &self.built {
            Built::Array(items) => format!("[{}]", items.len()),
            Built::Map(_, pending) => format!("[{pending:?}]"),
        }
    }

    fn accept(&mut self, value: Dynamic) {
        match &mut self.built {
            Built::Array(items) => items.push(value),
            Built::Map(map, key) => {
                map.insert(std::mem::take(key).into(), value);
            }
        }
    }
}

enum PyStep<'py> {
    Leaf(Dynamic),
    Open(PyFrame<'py>),
}

fn open_dict<'py>(d: &Bound<'py, PyDict>) -> Result<PyStep<'py>, ConvError> {
    let mut children = Vec::with_capacity(d.len());
    for (k, v) in d.iter() {
        let Ok(key) = k.cast::<PyString>() else {
            return Err(ConvError::new(
                ConvKind::Type,
                format!("map keys must be str, not {}", type_name_of(&k)),
            ));
        };
        children.push((key.to_str()?.to_string(), v));
    }
    Ok(PyStep::Open(PyFrame {
        children: children.into_iter(),
        built: Built::Map(Map::new(), String::new()),
    }))
}

fn open_seq<'py>(items: impl Iterator<Item = Bound<'py, PyAny>>, len: usize) -> PyStep<'py> {
    let children: Vec<_> = items.map(|item| (String::new(), item)).collect();
    PyStep::Open(PyFrame {
        children: children.into_iter(),
        built: Built::Array(Array::with_capacity(len)),
    })
}

/// An int: INT in i64 range, else the nearest FLOAT, as the reference's JSON
/// reading turns a number beyond i64 into a (lossy) float (docs/scripts/host-functions.md#values-between-json-and-rhai). Only an
/// int past the float range (about 1.8e308) has no Rhai form.
fn int_to_dynamic(obj: &Bound<'_, PyAny>) -> Result<Dynamic, ConvError> {
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(Dynamic::from_int(i));
    }
    match obj.extract::<f64>() {
        Ok(f) => Ok(Dynamic::from_float(f)),
        Err(_) => Err(ConvError::new(
            ConvKind::Overflow,
            "int is too large to convert to a float",
        )),
    }
}

/// One Python value: a finished Rhai value, or a container to walk.
fn py_step<'py>(obj: &Bound<'py, PyAny>) -> Result<PyStep<'py>, ConvError> {
    if obj.is_none() {
        return Ok(PyStep::Leaf(Dynamic::UNIT));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(PyStep::Leaf(Dynamic::from(ImmutableString::from(
            s.to_str()?,
        ))));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(PyStep::Leaf(Dynamic::from_bool(b.is_true())));
    }
    if obj.cast::<PyInt>().is_ok() {
        return int_to_dynamic(obj).map(PyStep::Leaf);
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(PyStep::Leaf(Dynamic::from_float(f.value())));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        return open_dict(d);
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return Ok(open_seq(l.iter(), l.len()));
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return Ok(open_seq(t.iter(), t.len()));
    }
    if let Ok(held) = obj.cast::<HeldArray>() {
        return Ok(PyStep::Leaf(Dynamic::from_array(
            held.try_borrow().map_err(PyErr::from)?.copy_items(),
        )));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(PyStep::Leaf(Dynamic::from_blob(b.as_bytes().to_vec())));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(PyStep::Leaf(Dynamic::from_blob(b.to_vec())));
    }
    if obj.cast::<PyMemoryView>().is_ok() {
        let bytes: Vec<u8> = obj.call_method0("tobytes")?.extract()?;
        return Ok(PyStep::Leaf(Dynamic::from_blob(bytes as Blob)));
    }
    if let Some(fp) = host::fnptr_from_python(obj)? {
        return Ok(PyStep::Leaf(Dynamic::from(fp)));
    }
    Err(ConvError::new(
        ConvKind::Type,
        format!("cannot pass a {} to a script", type_name_of(obj)),
    ))
}

/// Python -> Rhai, at any depth.
pub fn to_dynamic(obj: &Bound<'_, PyAny>) -> Result<Dynamic, ConvError> {
    let mut stack: Vec<PyFrame<'_>> = Vec::new();
    let mut done = match py_step(obj)? {
        PyStep::Leaf(v) => return Ok(v),
        PyStep::Open(frame) => {
            stack.push(frame);
            None
        }
    };
    while let Some(top) = stack.last_mut() {
        if let Some(value) = done.take() {
            top.accept(value);
        }
        if let Some((key, child)) = top.children.next() {
            if let Built::Map(_, pending) = &mut top.built {
                *pending = key;
            }
            match py_step(&child) {
                Ok(PyStep::Leaf(v)) => done = Some(v),
                Ok(PyStep::Open(frame)) => stack.push(frame),
                Err(e) => return Err(e.within(stack.iter().map(PyFrame::segment))),
            }
        } else if let Some(frame) = stack.pop() {
            done = Some(match frame.built {
                Built::Array(items) => Dynamic::from_array(items),
                Built::Map(map, _) => Dynamic::from_map(map),
            });
        }
    }
    Ok(done.unwrap_or(Dynamic::UNIT))
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

/// What a function pointer found while converting becomes.
pub type FnPtrHook<'a, 'py> = &'a dyn Fn(Python<'py>, rhai::FnPtr) -> PyResult<Bound<'py, PyAny>>;

/// Rhai -> Python. Maps come back with keys in sorted (byte) order.
pub fn to_python<'py>(py: Python<'py>, value: &Dynamic) -> Result<Bound<'py, PyAny>, ConvError> {
    to_python_owned(py, value.clone(), None)
}

/// Like `to_python`, with function pointers at any depth handed to `on_fnptr`.
pub fn to_python_with<'py>(
    py: Python<'py>,
    value: &Dynamic,
    on_fnptr: FnPtrHook<'_, 'py>,
) -> Result<Bound<'py, PyAny>, ConvError> {
    to_python_owned(py, value.clone(), Some(on_fnptr))
}

/// A Rhai container being converted, taken apart child by child.
struct RhaiFrame<'py> {
    children: RhaiChildren,
    out: Out<'py>,
}

enum RhaiChildren {
    Array(std::vec::IntoIter<Dynamic>),
    Map(std::collections::btree_map::IntoIter<rhai::Identifier, Dynamic>),
}

enum Out<'py> {
    List(Vec<Bound<'py, PyAny>>),
    Dict(Bound<'py, PyDict>, Option<Bound<'py, PyString>>),
}

enum RhaiStep<'py> {
    Leaf(Bound<'py, PyAny>),
    Open(RhaiFrame<'py>),
}

fn rhai_step<'py>(
    py: Python<'py>,
    value: Dynamic,
    on_fnptr: Option<FnPtrHook<'_, 'py>>,
) -> Result<RhaiStep<'py>, ConvError> {
    if value.is_unit() {
        return Ok(RhaiStep::Leaf(py.None().into_bound(py)));
    }
    // `is_*` first: a failed `as_*` builds its error from `type_name()`, which
    // costs more than the check itself on this hot path.
    if value.is_string() {
        if let Ok(s) = value.as_immutable_string_ref() {
            return Ok(RhaiStep::Leaf(PyString::new(py, s.as_str()).into_any()));
        }
    }
    if value.is_int() {
        if let Ok(i) = value.as_int() {
            return Ok(RhaiStep::Leaf(PyInt::new(py, i).into_any()));
        }
    }
    if value.is_bool() {
        if let Ok(b) = value.as_bool() {
            return Ok(RhaiStep::Leaf(PyBool::new(py, b).to_owned().into_any()));
        }
    }
    if value.is_float() {
        if let Ok(f) = value.as_float() {
            return Ok(RhaiStep::Leaf(PyFloat::new(py, f).into_any()));
        }
    }
    if value.is_char() {
        if let Ok(c) = value.as_char() {
            return Ok(RhaiStep::Leaf(
                PyString::new(py, c.encode_utf8(&mut [0; 4])).into_any(),
            ));
        }
    }
    if let Ok(b) = value.as_blob_ref() {
        return Ok(RhaiStep::Leaf(PyBytes::new(py, &b).into_any()));
    }
    let type_name = value.type_name();
    // Consumed, not cloned: a copy of each level would make deep values quadratic.
    if value.is_array() {
        if let Ok(items) = value.into_array() {
            let len = items.len();
            return Ok(RhaiStep::Open(RhaiFrame {
                children: RhaiChildren::Array(items.into_iter()),
                out: Out::List(Vec::with_capacity(len)),
            }));
        }
    } else if value.is_map() {
        if let Some(map) = value.try_cast::<Map>() {
            return Ok(RhaiStep::Open(RhaiFrame {
                children: RhaiChildren::Map(map.into_iter()),
                out: Out::Dict(PyDict::new(py), None),
            }));
        }
    } else if value.is_fnptr() {
        if let Some(fp) = value.flatten().try_cast::<rhai::FnPtr>() {
            return Ok(RhaiStep::Leaf(match on_fnptr {
                Some(hook) => hook(py, fp)?,
                None => host::fnptr_to_python(py, fp)?,
            }));
        }
    }
    Err(ConvError::new(
        ConvKind::Type,
        format!("a script value of type {type_name} has no Python form"),
    ))
}

impl<'py> RhaiFrame<'py> {
    /// `[i]` or `["key"]` of the child being converted, for error paths (written
    /// only when there is an error).
    fn segment(&self) -> String {
        match &self.out {
            Out::List(items) => format!("[{}]", items.len()),
            Out::Dict(_, pending) => {
                let key = pending.as_ref().map(|k| k.to_string_lossy().into_owned());
                format!("[{:?}]", key.unwrap_or_default())
            }
        }
    }

    fn accept(&mut self, value: Bound<'py, PyAny>) -> PyResult<()> {
        match &mut self.out {
            Out::List(items) => items.push(value),
            Out::Dict(dict, key) => {
                if let Some(key) = key.take() {
                    dict.set_item(key, value)?;
                }
            }
        }
        Ok(())
    }

    fn next_child(&mut self, py: Python<'py>, keys: &mut KeyCache<'py>) -> Option<Dynamic> {
        match (&mut self.children, &mut self.out) {
            (RhaiChildren::Array(rest), Out::List(_)) => rest.next(),
            (RhaiChildren::Map(rest), Out::Dict(_, pending)) => {
                let (key, child) = rest.next()?;
                *pending = Some(keys.get(py, key.as_str()));
                Some(child)
            }
            _ => None,
        }
    }

    fn finish(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.out {
            Out::List(items) => Ok(PyList::new(py, items)?.into_any()),
            Out::Dict(dict, _) => Ok(dict.into_any()),
        }
    }
}

/// Rhai -> Python, consuming `value`: at any depth, and freeing it as it goes.
pub fn to_python_owned<'py>(
    py: Python<'py>,
    value: Dynamic,
    on_fnptr: Option<FnPtrHook<'_, 'py>>,
) -> Result<Bound<'py, PyAny>, ConvError> {
    let mut keys = KeyCache { slots: Vec::new() };
    let mut stack: Vec<RhaiFrame<'py>> = Vec::new();
    let mut done = match rhai_step(py, value, on_fnptr)? {
        RhaiStep::Leaf(v) => return Ok(v),
        RhaiStep::Open(frame) => {
            stack.push(frame);
            None
        }
    };
    while let Some(top) = stack.last_mut() {
        if let Some(value) = done.take() {
            top.accept(value)?;
        }
        if let Some(child) = top.next_child(py, &mut keys) {
            match rhai_step(py, child, on_fnptr) {
                Ok(RhaiStep::Leaf(v)) => done = Some(v),
                Ok(RhaiStep::Open(frame)) => stack.push(frame),
                Err(e) => return Err(e.within(stack.iter().map(RhaiFrame::segment))),
            }
        } else if let Some(frame) = stack.pop() {
            done = Some(frame.finish(py)?);
        }
    }
    Ok(done.unwrap_or_else(|| py.None().into_bound(py)))
}

/// Converts call arguments, naming the bad one as `args[i]...`.
pub fn args_to_dynamic(args: &Bound<'_, PyTuple>) -> PyResult<Vec<Dynamic>> {
    let mut out = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        out.push(to_dynamic(&a).map_err(|e| e.into_pyerr(&format!("args[{i}]")))?);
    }
    Ok(out)
}

pub fn value_to_python<'py>(
    py: Python<'py>,
    value: &Dynamic,
    root: &str,
) -> PyResult<Bound<'py, PyAny>> {
    to_python(py, value).map_err(|e| e.into_pyerr(root))
}

/// Like `value_to_python`, taking the value apart instead of copying it.
pub fn owned_value_to_python<'py>(
    py: Python<'py>,
    value: Dynamic,
    root: &str,
) -> PyResult<Bound<'py, PyAny>> {
    to_python_owned(py, value, None).map_err(|e| e.into_pyerr(root))
}
