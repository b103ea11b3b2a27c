//! Python values to and from msgpack exactly as rhaipool's `proto.values` packs and unpacks them,
//! for the worker's `Codec` (`codec.rs`): the messages the worker reads and writes as Python
//! objects (every one but a plain region call's, which `lane.rs` reads and writes as Rhai values).
//!
//! * **`pack`** mirrors `proto.values.pack`: the walk that refuses non-string map keys and
//!   containers over the cap (`_check_packable`, in its order, so the same defect is named), then
//!   msgpack-python's `Packer(use_bin_type=True, strict_types=False, datetime=False)`: the smallest
//!   int form (unsigned for non-negative ints), floats as 64 bits, `bytes`/`bytearray`/`memoryview`
//!   as binaries, lists and tuples as arrays, dicts in their order. An int beyond 64 bits travels as
//!   the nearest float (none past the float range: then the value is refused); a body nesting past
//!   the plain depth travels flattened (one extension value of type 1, RHP §7); a body over the cap
//!   is refused. Every refusal carries the text `proto` gives it.
//! * **`unpack`** mirrors `proto.values.unpack` (msgpack-python's `unpackb` with rhaipool's caps,
//!   then its string-key check, or the flattened form's rebuild with every header checked): the
//!   same values, the same refusals (a `TooLarge` where `proto` says `TooLarge`).
//!
//! Past 400 lines because the two directions and the flattened form of each mirror one module of
//! `proto`, check for check; apart, each would repeat the caps and the refusal texts.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple,
};

use super::pack::{
    put_array_header, put_bin, put_float, put_int, put_length, put_map_header, put_str, put_uint,
};

/// The wire's caps (`proto.values`).
#[derive(Clone, Copy)]
pub struct Limits {
    /// Bytes of one encoded body.
    pub body: usize,
    /// Elements of one array or map.
    pub container: usize,
    /// Deepest nesting sent plainly (the body itself is level 1); deeper bodies travel flattened.
    pub plain_depth: usize,
}

/// msgpack's own nesting limit when unpacking (its unpacker's fixed stack).
const UNPACK_DEPTH: usize = 1024;
/// The one extension type on the wire: a whole body, flattened.
const DEEP_EXT: i8 = 1;

/// Why a value cannot cross the wire: `proto`'s `MalformedMessage` or `TooLarge`, and its text.
#[derive(Debug)]
pub enum Refused {
    Malformed(String),
    TooLarge(String),
}

impl Refused {
    pub fn text(&self) -> &str {
        match self {
            Self::Malformed(t) | Self::TooLarge(t) => t,
        }
    }

    /// As a Python exception: `OverflowError` for `TooLarge`, `ValueError` for the rest.
    pub fn into_pyerr(self) -> PyErr {
        match self {
            Self::Malformed(t) => PyValueError::new_err(t),
            Self::TooLarge(t) => PyOverflowError::new_err(t),
        }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".to_string(), |n| n.to_string())
}

/// The type's C-level name (`tp_name`), which msgpack's packer names a value it cannot serialize by:
/// `rhai.Callback` for a binding class, where `__name__` says `Callback`.
fn c_type_name(obj: &Bound<'_, PyAny>) -> String {
    let ty = obj.get_type();
    // SAFETY: every CPython type object (the stable ABI's default build) starts with its
    // `PyVarObject` header (reference count, type, size: three pointer-sized words) followed by
    // `tp_name`, a NUL-terminated string that lives as long as the type, which `ty` keeps alive.
    let name = unsafe {
        let words = ty.as_ptr().cast::<*const std::ffi::c_char>();
        let tp_name = *words.add(3);
        if tp_name.is_null() {
            None
        } else {
            Some(
                std::ffi::CStr::from_ptr(tp_name)
                    .to_string_lossy()
                    .into_owned(),
            )
        }
    };
    name.unwrap_or_else(|| type_name(obj))
}

fn is_container(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyDict>()
        || obj.is_instance_of::<PyList>()
        || obj.is_instance_of::<PyTuple>()
}

fn py_refused(e: &PyErr, py: Python<'_>) -> Refused {
    Refused::Malformed(format!("value cannot be encoded: {}", e.value(py)))
}

// -- packing -----------------------------------------------------------------------------------

/// `_check_packable`: refuse non-string keys and containers over the cap; how deep containers nest.
fn check_packable(value: &Bound<'_, PyAny>, cap: usize) -> Result<usize, Refused> {
    let mut stack = vec![(value.clone(), 1usize)];
    let mut deepest = 1;
    let internal = |e: PyErr| Refused::Malformed(format!("value cannot be encoded: {e}"));
    while let Some((node, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        let len = node.len().map_err(internal)?;
        if len > cap {
            return Err(Refused::TooLarge(format!(
                "{} of {len} elements exceeds {cap}",
                type_name(&node)
            )));
        }
        let items: Vec<Bound<'_, PyAny>> = if let Ok(map) = node.cast::<PyDict>() {
            for key in map.keys() {
                if !key.is_instance_of::<PyString>() {
                    return Err(Refused::Malformed(format!(
                        "map key of type {}; keys must be strings",
                        type_name(&key)
                    )));
                }
            }
            map.values().iter().collect()
        } else {
            node.try_iter()
                .map_err(internal)?
                .collect::<PyResult<_>>()
                .map_err(internal)?
        };
        for item in items {
            if is_container(&item) {
                stack.push((item, depth + 1));
            }
        }
    }
    Ok(deepest)
}

/// Whether any int in `value` is past the float range (`float(i)` raises): `proto` then refuses
/// the value, whatever else it holds (its retry converts every wide int before packing again).
fn has_unfloatable_int(value: &Bound<'_, PyAny>) -> bool {
    let mut stack = vec![value.clone()];
    while let Some(node) = stack.pop() {
        if let Ok(map) = node.cast::<PyDict>() {
            stack.extend(map.values().iter());
        } else if is_container(&node) {
            if let Ok(items) = node.try_iter() {
                stack.extend(items.flatten());
            }
        } else if node.is_instance_of::<PyInt>() && !node.is_instance_of::<PyBool>() {
            let fits = node.extract::<i64>().is_ok() || node.extract::<u64>().is_ok();
            if !fits && node.call_method0("__float__").is_err() {
                return true;
            }
        }
    }
    false
}

/// A msgpack writer of Python values, as msgpack-python's `Packer` writes them.
struct Packer<'py> {
    py: Python<'py>,
    out: Vec<u8>,
    /// Ints beyond 64 bits become floats (`proto`'s retry); otherwise they stop the packing.
    widen: bool,
}

/// What stops a packing: a value refused, or (first pass) an int beyond 64 bits.
enum Stop {
    Refused(Refused),
    WideInt,
}

impl From<Refused> for Stop {
    fn from(r: Refused) -> Self {
        Self::Refused(r)
    }
}

impl Packer<'_> {
    fn array_header(&mut self, n: usize) {
        put_array_header(&mut self.out, n);
    }

    fn map_header(&mut self, n: usize) {
        put_map_header(&mut self.out, n);
    }

    fn str(&mut self, s: &str) {
        put_str(&mut self.out, s);
    }

    fn bin(&mut self, b: &[u8]) {
        put_bin(&mut self.out, b);
    }

    fn uint(&mut self, u: u64) {
        put_uint(&mut self.out, u);
    }

    fn int(&mut self, i: i64) {
        put_int(&mut self.out, i);
    }

    fn float(&mut self, f: f64) {
        put_float(&mut self.out, f);
    }

    /// One value that is not a container (`proto`'s walk decided which are); `containers` says
    /// how to write one met here (plainly, or not at all in a flattened body).
    fn scalar(&mut self, obj: &Bound<'_, PyAny>) -> Result<(), Stop> {
        let py = self.py;
        if obj.is_none() {
            self.out.push(0xc0);
        } else if let Ok(b) = obj.cast::<PyBool>() {
            self.out.push(if b.is_true() { 0xc3 } else { 0xc2 });
        } else if obj.is_instance_of::<PyInt>() {
            if let Ok(i) = obj.extract::<i64>() {
                self.int(i);
            } else if let Ok(u) = obj.extract::<u64>() {
                self.uint(u);
            } else if self.widen {
                let f = obj
                    .call_method0("__float__")
                    .and_then(|f| f.extract::<f64>())
                    .map_err(|e| py_refused(&e, py))?;
                self.float(f);
            } else {
                return Err(Stop::WideInt);
            }
        } else if let Ok(f) = obj.cast::<PyFloat>() {
            self.float(f.value());
        } else if let Ok(b) = obj.cast::<PyBytes>() {
            self.bin(b.as_bytes());
        } else if let Ok(b) = obj.cast::<PyByteArray>() {
            self.bin(&b.to_vec());
        } else if let Ok(s) = obj.cast::<PyString>() {
            let s = s.to_str().map_err(|e| py_refused(&e, py))?;
            self.str(s);
        } else if obj.is_instance_of::<PyMemoryView>() {
            let bytes: Vec<u8> = obj
                .call_method0("tobytes")
                .and_then(|b| b.extract())
                .map_err(|e| py_refused(&e, py))?;
            self.bin(&bytes);
        } else {
            let name = PyString::new(py, &c_type_name(obj));
            let name = name
                .repr()
                .map_or_else(|_| String::new(), |r| r.to_string());
            return Err(Refused::Malformed(format!(
                "value cannot be encoded: can not serialize {name} object"
            ))
            .into());
        }
        Ok(())
    }

    /// `obj` plainly (its nesting was checked to be within the plain depth).
    fn value(&mut self, obj: &Bound<'_, PyAny>) -> Result<(), Stop> {
        let py = self.py;
        if let Ok(map) = obj.cast::<PyDict>() {
            self.map_header(map.len());
            for (key, item) in map.iter() {
                self.scalar(&key)?;
                self.value(&item)?;
            }
        } else if is_container(obj) {
            let items: Vec<Bound<'_, PyAny>> = obj
                .try_iter()
                .and_then(Iterator::collect)
                .map_err(|e| py_refused(&e, py))?;
            self.array_header(items.len());
            for item in &items {
                self.value(item)?;
            }
        } else {
            self.scalar(obj)?;
        }
        Ok(())
    }

    /// `obj` flattened (`proto.values._flatten` then `_pack_flat`): one extension value of type 1
    /// holding the array of its nodes in pre-order, each container replaced by a header.
    fn flattened(&mut self, obj: &Bound<'_, PyAny>) -> Result<(), Stop> {
        let py = self.py;
        let mut nodes = Packer {
            py,
            out: Vec::new(),
            widen: self.widen,
        };
        let mut count = 0usize;
        let mut stack = vec![obj.clone()];
        while let Some(node) = stack.pop() {
            count += 1;
            if let Ok(map) = node.cast::<PyDict>() {
                nodes.out.push(0x92);
                nodes.out.push(1);
                nodes.uint(u64::try_from(map.len()).unwrap_or(u64::MAX));
                let pairs: Vec<_> = map.iter().collect();
                for (key, item) in pairs.into_iter().rev() {
                    stack.push(item);
                    stack.push(key);
                }
            } else if is_container(&node) {
                let items: Vec<Bound<'_, PyAny>> = node
                    .try_iter()
                    .and_then(Iterator::collect)
                    .map_err(|e| py_refused(&e, py))?;
                nodes.out.push(0x92);
                nodes.out.push(0);
                nodes.uint(u64::try_from(items.len()).unwrap_or(u64::MAX));
                stack.extend(items.into_iter().rev());
            } else {
                nodes.scalar(&node)?;
            }
        }
        let mut array = Packer {
            py,
            out: Vec::with_capacity(nodes.out.len() + 5),
            widen: false,
        };
        array.array_header(count);
        array.out.extend_from_slice(&nodes.out);
        self.ext(DEEP_EXT, &array.out);
        Ok(())
    }

    /// msgpack-python's form of `ExtType(code, data)`.
    fn ext(&mut self, code: i8, data: &[u8]) {
        let fixed = match data.len() {
            1 => Some(0xd4),
            2 => Some(0xd5),
            4 => Some(0xd6),
            8 => Some(0xd7),
            16 => Some(0xd8),
            _ => None,
        };
        if let Some(head) = fixed {
            self.out.push(head);
        } else {
            put_length(&mut self.out, data.len(), None, Some(0xc7), 0xc8);
        }
        self.out.push(code.to_be_bytes()[0]);
        self.out.extend_from_slice(data);
    }
}

/// `proto.values.pack(value)`: its bytes, or the refusal `proto` raises.
pub fn pack(value: &Bound<'_, PyAny>, limits: Limits) -> Result<Vec<u8>, Refused> {
    let py = value.py();
    let depth = if is_container(value) {
        check_packable(value, limits.container)?
    } else {
        0
    };
    let once = |widen: bool| {
        let mut p = Packer {
            py,
            out: Vec::with_capacity(128),
            widen,
        };
        if depth > limits.plain_depth {
            p.flattened(value)?;
        } else {
            p.value(value)?;
        }
        Ok::<_, Stop>(p.out)
    };
    let data = match once(false) {
        Ok(data) => data,
        Err(Stop::Refused(r)) => return Err(r),
        Err(Stop::WideInt) => {
            if has_unfloatable_int(value) {
                return Err(Refused::Malformed(
                    "value cannot be encoded: int too large to convert to float".into(),
                ));
            }
            match once(true) {
                Ok(data) => data,
                Err(Stop::Refused(r)) => return Err(r),
                Err(Stop::WideInt) => {
                    return Err(Refused::Malformed(
                        "value cannot be encoded: Integer value out of range".into(),
                    ))
                }
            }
        }
    };
    if data.len() > limits.body {
        return Err(Refused::TooLarge(format!(
            "encoded body of {} bytes exceeds {}",
            data.len(),
            limits.body
        )));
    }
    Ok(data)
}

// -- unpacking ---------------------------------------------------------------------------------

fn invalid(detail: &str) -> Refused {
    Refused::Malformed(format!("invalid msgpack: {detail}"))
}

fn incomplete() -> Refused {
    invalid("Unpack failed: incomplete input")
}

/// What `unpackb` is told: its caps, and whether extension values may appear (the flattened body's
/// one, at the top) or none at all.
#[derive(Clone, Copy)]
struct Rules {
    array: usize,
    map: usize,
    flat_ext: bool,
    /// Maps with a `bytes` key are refused once read (`proto`'s `object_hook`).
    string_keys: bool,
}

/// An unpacked value: a Python object, or the data of the flattened body's extension value.
enum Item<'py> {
    Py(Bound<'py, PyAny>),
    Ext(Vec<u8>),
}

struct Unpacker<'a, 'py> {
    py: Python<'py>,
    data: &'a [u8],
    pos: usize,
    rules: Rules,
}

impl<'py> Unpacker<'_, 'py> {
    fn take(&mut self, n: usize) -> Result<&[u8], Refused> {
        let end = self.pos.checked_add(n).ok_or_else(incomplete)?;
        let out = self.data.get(self.pos..end).ok_or_else(incomplete)?;
        self.pos = end;
        Ok(out)
    }

    fn be(&mut self, n: usize) -> Result<u64, Refused> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn len_of(&mut self, n: usize) -> Result<usize, Refused> {
        usize::try_from(self.be(n)?).map_err(|_| incomplete())
    }

    fn capped(n: usize, cap: usize, what: &str) -> Result<usize, Refused> {
        if n > cap {
            return Err(Refused::TooLarge(format!(
                "msgpack value too large: {n} exceeds max_{what}_len({cap})"
            )));
        }
        Ok(n)
    }

    fn obj(&mut self, depth: usize) -> Result<Bound<'py, PyAny>, Refused> {
        match self.item(depth)? {
            Item::Py(obj) => Ok(obj),
            Item::Ext(_) => Err(Refused::Malformed(
                "msgpack extension types are not allowed".into(),
            )),
        }
    }

    fn item(&mut self, depth: usize) -> Result<Item<'py>, Refused> {
        let py = self.py;
        let b = *self.data.get(self.pos).ok_or_else(incomplete)?;
        self.pos += 1;
        let obj = match b {
            0x00..=0x7f => PyInt::new(py, b).into_any(),
            0xe0..=0xff => PyInt::new(py, i8::from_be_bytes([b])).into_any(),
            0xc0 => py.None().into_bound(py),
            0xc2 | 0xc3 => PyBool::new(py, b == 0xc3).to_owned().into_any(),
            0xcc..=0xcf => PyInt::new(py, self.be(1 << (b - 0xcc))?).into_any(),
            0xd0 => PyInt::new(py, i8::from_be_bytes([self.take(1)?[0]])).into_any(),
            0xd1 => {
                let raw: [u8; 2] = self.take(2)?.try_into().map_err(|_| incomplete())?;
                PyInt::new(py, i16::from_be_bytes(raw)).into_any()
            }
            0xd2 => {
                let raw: [u8; 4] = self.take(4)?.try_into().map_err(|_| incomplete())?;
                PyInt::new(py, i32::from_be_bytes(raw)).into_any()
            }
            0xd3 => {
                let raw: [u8; 8] = self.take(8)?.try_into().map_err(|_| incomplete())?;
                PyInt::new(py, i64::from_be_bytes(raw)).into_any()
            }
            0xca => {
                let raw: [u8; 4] = self.take(4)?.try_into().map_err(|_| incomplete())?;
                PyFloat::new(py, f64::from(f32::from_be_bytes(raw))).into_any()
            }
            0xcb => PyFloat::new(py, f64::from_bits(self.be(8)?)).into_any(),
            0xa0..=0xbf | 0xd9..=0xdb => {
                let n = match b {
                    0xd9 => self.len_of(1)?,
                    0xda => self.len_of(2)?,
                    0xdb => self.len_of(4)?,
                    _ => usize::from(b & 0x1f),
                };
                let bytes = self.take(n)?;
                let s = std::str::from_utf8(bytes)
                    .map_err(|_| invalid("'utf-8' codec can't decode the bytes of a str"))?;
                PyString::new(py, s).into_any()
            }
            0xc4..=0xc6 => {
                let n = self.len_of(1 << (b - 0xc4))?;
                PyBytes::new(py, self.take(n)?).into_any()
            }
            0x90..=0x9f | 0xdc | 0xdd => {
                let n = match b {
                    0xdc => self.len_of(2)?,
                    0xdd => self.len_of(4)?,
                    _ => usize::from(b & 0x0f),
                };
                self.array(n, depth)?
            }
            0x80..=0x8f | 0xde | 0xdf => {
                let n = match b {
                    0xde => self.len_of(2)?,
                    0xdf => self.len_of(4)?,
                    _ => usize::from(b & 0x0f),
                };
                self.map(n, depth)?
            }
            0xc7..=0xc9 | 0xd4..=0xd8 => {
                let n = match b {
                    0xc7 => self.len_of(1)?,
                    0xc8 => self.len_of(2)?,
                    0xc9 => self.len_of(4)?,
                    _ => 1 << (b - 0xd4),
                };
                return self.ext(n);
            }
            _ => return Err(invalid("")), // 0xc1: never used
        };
        Ok(Item::Py(obj))
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Bound<'py, PyAny>, Refused> {
        let n = Self::capped(n, self.rules.array, "array")?;
        if depth > UNPACK_DEPTH {
            return Err(invalid(""));
        }
        let mut items = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            items.push(self.obj(depth + 1)?);
        }
        Ok(PyList::new(self.py, items)
            .map_err(|e| invalid(&e.to_string()))?
            .into_any())
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Bound<'py, PyAny>, Refused> {
        let n = Self::capped(n, self.rules.map, "map")?;
        if depth > UNPACK_DEPTH {
            return Err(invalid(""));
        }
        let map = PyDict::new(self.py);
        let mut bytes_key = false;
        for _ in 0..n {
            // The key is checked once its value is read too, as msgpack's unpacker does.
            let key = self.obj(depth + 1)?;
            let item = self.obj(depth + 1)?;
            if key.is_exact_instance_of::<PyBytes>() {
                bytes_key = true;
            } else if !key.is_exact_instance_of::<PyString>() {
                return Err(invalid(&format!(
                    "{} is not allowed for map key when strict_map_key=True",
                    type_name(&key)
                )));
            }
            map.set_item(key, item)
                .map_err(|e| invalid(&e.to_string()))?;
        }
        if bytes_key && self.rules.string_keys {
            return Err(Refused::Malformed(
                "map key of type bytes; keys must be strings".into(),
            ));
        }
        Ok(map.into_any())
    }

    /// An extension value of `n` bytes: the flattened body's, where one may appear.
    fn ext(&mut self, n: usize) -> Result<Item<'py>, Refused> {
        let code = i8::from_be_bytes([self.take(1)?[0]]);
        let data = self.take(n)?.to_vec();
        if !self.rules.flat_ext && n > 0 {
            return Err(Refused::Malformed(
                "msgpack extension types are not allowed".into(),
            ));
        }
        if !self.rules.flat_ext || code != DEEP_EXT {
            return Err(Refused::Malformed(format!(
                "msgpack extension type {code} is not allowed"
            )));
        }
        Ok(Item::Ext(data))
    }

    fn whole(mut self) -> Result<Item<'py>, Refused> {
        let item = self.item(1)?;
        if self.pos != self.data.len() {
            return Err(invalid("unpack(b) received extra data."));
        }
        Ok(item)
    }
}

fn unpack_with<'py>(py: Python<'py>, data: &[u8], rules: Rules) -> Result<Item<'py>, Refused> {
    Unpacker {
        py,
        data,
        pos: 0,
        rules,
    }
    .whole()
}

/// `proto.values.unpack(data)`: the value, or the refusal `proto` raises.
pub fn unpack<'py>(
    py: Python<'py>,
    data: &[u8],
    limits: Limits,
) -> Result<Bound<'py, PyAny>, Refused> {
    if data.len() > limits.body {
        return Err(Refused::TooLarge(format!(
            "body of {} bytes exceeds {}",
            data.len(),
            limits.body
        )));
    }
    let plain = Rules {
        array: limits.container,
        map: limits.container,
        flat_ext: false,
        string_keys: true,
    };
    if !matches!(data.first(), Some(0xc7..=0xc9 | 0xd4..=0xd8)) {
        return match unpack_with(py, data, plain)? {
            Item::Py(obj) => Ok(obj),
            Item::Ext(_) => Err(Refused::Malformed(
                "msgpack extension types are not allowed".into(),
            )),
        };
    }
    let outer = Rules {
        flat_ext: true,
        string_keys: false,
        ..plain
    };
    let Item::Ext(nodes) = unpack_with(py, data, outer)? else {
        return Err(Refused::Malformed(
            "extension types are allowed only as a whole flattened body".into(),
        ));
    };
    let inner = Rules {
        array: limits.body,
        map: 0,
        flat_ext: false,
        string_keys: false,
    };
    let Item::Py(nodes) = unpack_with(py, &nodes, inner)? else {
        return Err(Refused::Malformed(
            "msgpack extension types are not allowed".into(),
        ));
    };
    let Ok(nodes) = nodes.cast::<PyList>() else {
        return Err(Refused::Malformed(
            "flattened value is not an array of nodes".into(),
        ));
    };
    rebuild(py, nodes, limits.container)
}

/// A flattened node: a new container and the children it expects, or a scalar (`_node`).
fn node<'py>(
    py: Python<'py>,
    obj: Bound<'py, PyAny>,
    cap: usize,
) -> Result<(Bound<'py, PyAny>, Option<usize>), Refused> {
    let Ok(header) = obj.cast::<PyList>() else {
        return Ok((obj, None));
    };
    let bad = || Refused::Malformed("bad container header in flattened value".into());
    if header.len() != 2 {
        return Err(bad());
    }
    let (kind, count) = (
        header.get_item(0).map_err(|_| bad())?,
        header.get_item(1).map_err(|_| bad())?,
    );
    let is = |n: i64| kind.eq(n).unwrap_or(false);
    if !(is(0) || is(1)) || !count.is_exact_instance_of::<PyInt>() {
        return Err(bad());
    }
    if count.lt(0).unwrap_or(false) {
        return Err(Refused::Malformed(
            "negative element count in flattened value".into(),
        ));
    }
    let n = count.extract::<usize>().unwrap_or(usize::MAX);
    if n > cap {
        return Err(Refused::TooLarge(format!(
            "container of {} elements exceeds {cap}",
            count
                .str()
                .map_or_else(|_| n.to_string(), |s| s.to_string())
        )));
    }
    let container = if is(1) {
        PyDict::new(py).into_any()
    } else {
        PyList::empty(py).into_any()
    };
    Ok((container, Some(n)))
}

/// The value a flattened body stands for; every header checked (`_rebuild`, iterative).
fn rebuild<'py>(
    py: Python<'py>,
    nodes: &Bound<'py, PyList>,
    cap: usize,
) -> Result<Bound<'py, PyAny>, Refused> {
    struct Open<'py> {
        container: Bound<'py, PyAny>,
        left: usize,
        key: Option<Bound<'py, PyAny>>,
    }
    let internal = |e: PyErr| Refused::Malformed(e.to_string());
    let mut open: Vec<Open<'py>> = Vec::new();
    let mut root: Option<Bound<'py, PyAny>> = None;
    for item in nodes.iter() {
        if open.is_empty() && root.is_some() {
            return Err(Refused::Malformed(
                "flattened value has nodes after its end".into(),
            ));
        }
        if let Some(top) = open.last_mut() {
            if top.container.is_instance_of::<PyDict>() && top.key.is_none() {
                if !item.is_exact_instance_of::<PyString>() {
                    return Err(Refused::Malformed(format!(
                        "map key of type {}; keys must be strings",
                        type_name(&item)
                    )));
                }
                top.key = Some(item);
                continue;
            }
        }
        let (value, children) = node(py, item, cap)?;
        match open.last_mut() {
            None => root = Some(value.clone()),
            Some(top) => {
                if let Ok(map) = top.container.cast::<PyDict>() {
                    if let Some(key) = top.key.take() {
                        map.set_item(key, &value).map_err(internal)?;
                    }
                } else if let Ok(list) = top.container.cast::<PyList>() {
                    list.append(&value).map_err(internal)?;
                }
                top.left -= 1;
            }
        }
        if let Some(n) = children.filter(|&n| n > 0) {
            open.push(Open {
                container: value,
                left: n,
                key: None,
            });
        }
        while open.last().is_some_and(|top| top.left == 0) {
            open.pop();
        }
    }
    match root {
        Some(root) if open.is_empty() => Ok(root),
        _ => Err(Refused::Malformed(
            "flattened value ends inside a container".into(),
        )),
    }
}
