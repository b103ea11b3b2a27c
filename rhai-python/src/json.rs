//! JSON exactly as SPEC §2.5 states it, for scripts and for Python.
//!
//! Rhai's own `parse_json` parses its input as a Rhai expression and *evaluates*
//! it, and its map `to_json` writes Rust debug escapes (`\u{202f}`) that are not
//! JSON. Both are replaced: compact output, keys sorted by bytes, floats always
//! with a fraction or exponent in ryu's spelling (`1e21`, `1e-7`), NaN/inf as null,
//! invisible characters raw.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rhai::{Array, Dynamic, ImmutableString, Map};
use serde_json::{Number, Value};

use crate::convert;

const MAX_DEPTH: usize = 64;

/// Rhai value -> JSON value; `Err` names what is not plain data.
pub fn to_value(v: &Dynamic, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("nesting deeper than {MAX_DEPTH} levels"));
    }
    if v.is_unit() {
        return Ok(Value::Null);
    }
    if let Ok(b) = v.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Ok(i) = v.as_int() {
        return Ok(Value::Number(i.into()));
    }
    if let Ok(f) = v.as_float() {
        return Ok(Number::from_f64(f).map_or(Value::Null, Value::Number));
    }
    if let Ok(c) = v.as_char() {
        return Ok(Value::String(c.to_string()));
    }
    if let Ok(s) = v.as_immutable_string_ref() {
        return Ok(Value::String(s.as_str().to_string()));
    }
    if let Ok(arr) = v.as_array_ref() {
        return arr
            .iter()
            .map(|x| to_value(x, depth + 1))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    if let Ok(map) = v.as_map_ref() {
        let mut obj = serde_json::Map::new();
        for (k, x) in map.iter() {
            obj.insert(k.to_string(), to_value(x, depth + 1)?);
        }
        return Ok(Value::Object(obj));
    }
    Err(format!("a {} is not plain data", v.type_name()))
}

/// JSON value -> Rhai value (integers beyond i64 become floats, as in SPEC §2.5).
pub fn from_value(v: Value) -> Dynamic {
    match v {
        Value::Null => Dynamic::UNIT,
        Value::Bool(b) => Dynamic::from_bool(b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Dynamic::from_int(i),
            None => Dynamic::from_float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Dynamic::from(ImmutableString::from(s)),
        Value::Array(items) => {
            Dynamic::from_array(items.into_iter().map(from_value).collect::<Array>())
        }
        Value::Object(obj) => {
            let mut map = Map::new();
            for (k, x) in obj {
                map.insert(k.into(), from_value(x));
            }
            Dynamic::from_map(map)
        }
    }
}

/// `serde_json`'s compact output with floats written by `ryu`: `1e21`, `1e-7`, `0.00001`, `3.0`.
struct RyuFloats;

impl serde_json::ser::Formatter for RyuFloats {
    fn write_f64<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        value: f64,
    ) -> std::io::Result<()> {
        // `Value` holds only finite floats (NaN and infinities became null in `to_value`).
        writer.write_all(ryu::Buffer::new().format_finite(value).as_bytes())
    }
}

pub fn dump(v: &Dynamic) -> Result<String, String> {
    let value = to_value(v, 0)?;
    let mut out = Vec::new();
    serde::Serialize::serialize(
        &value,
        &mut serde_json::Serializer::with_formatter(&mut out, RyuFloats),
    )
    .map_err(|e| e.to_string())?;
    String::from_utf8(out).map_err(|e| e.to_string())
}

pub fn load(text: &str) -> Result<Dynamic, String> {
    serde_json::from_str::<Value>(text)
        .map(from_value)
        .map_err(|e| e.to_string())
}

/// `to_json(value) -> str`: the compact, key-sorted JSON text of a value.
#[pyfunction]
pub fn to_json(value: &Bound<'_, PyAny>) -> PyResult<String> {
    let dynamic = convert::to_dynamic(value, 0).map_err(|e| e.into_pyerr("value"))?;
    dump(&dynamic).map_err(|e| PyValueError::new_err(format!("to_json: {e}")))
}

/// `parse_json(text) -> value`: any JSON value, converted as scripts see it.
#[pyfunction]
pub fn parse_json<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let value = load(text).map_err(|e| PyValueError::new_err(format!("parse_json: {e}")))?;
    convert::value_to_python(py, &value, "parsed value")
}
