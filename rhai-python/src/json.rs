//! JSON exactly as docs/scripts/host-functions.md#values-between-json-and-rhai states it, for scripts and for Python: byte for byte
//! what the reference's `serde_json` writes, and the one JSON writer rhaipool uses on
//! its behalf (`rhai.to_json`).
//!
//! Rhai's own `parse_json` parses its input as a Rhai expression and *evaluates*
//! it, and its map `to_json` writes Rust debug escapes (`\u{202f}`) that are not
//! JSON. Both are replaced: compact output, keys sorted by bytes, floats always
//! with a fraction or exponent in ryu's spelling (`1e21`, `1e-7`), NaN/inf as null,
//! invisible characters raw.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rhai::{Array, Dynamic, ImmutableString, Map};
use serde_json::Value;

use crate::{convert, stack};

/// JSON value -> Rhai value (integers beyond i64 become floats, as in docs/scripts/host-functions.md#values-between-json-and-rhai).
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

/// `serde_json`'s compact text of a value, written without recursion: any depth.
pub fn dump(v: &Dynamic) -> Result<String, String> {
    dump_owned(v.clone())
}

/// A container being written: its children still to write.
enum Open {
    Array(std::vec::IntoIter<Dynamic>, bool),
    Map(
        std::collections::btree_map::IntoIter<rhai::Identifier, Dynamic>,
        bool,
    ),
}

/// Like `dump`, taking the value apart as it is written.
pub fn dump_owned(v: Dynamic) -> Result<String, String> {
    let mut out = String::new();
    let mut stack: Vec<Open> = Vec::new();
    if let Some(open) = write_value(&mut out, v)? {
        stack.push(open);
    }
    while let Some(top) = stack.last_mut() {
        let next = match top {
            Open::Array(rest, first) => rest.next().inspect(|_| {
                if !std::mem::take(first) {
                    out.push(',');
                }
            }),
            Open::Map(rest, first) => rest.next().map(|(key, child)| {
                if !std::mem::take(first) {
                    out.push(',');
                }
                write_str(&mut out, key.as_str());
                out.push(':');
                child
            }),
        };
        match next {
            Some(child) => {
                if let Some(open) = write_value(&mut out, child)? {
                    stack.push(open);
                }
            }
            None => {
                out.push(match stack.pop() {
                    Some(Open::Map(..)) => '}',
                    _ => ']',
                });
            }
        }
    }
    Ok(out)
}

/// Writes a scalar, or the opening bracket of a container and returns its children.
fn write_value(out: &mut String, v: Dynamic) -> Result<Option<Open>, String> {
    if v.is_unit() {
        out.push_str("null");
    } else if let Ok(b) = v.as_bool() {
        out.push_str(if b { "true" } else { "false" });
    } else if let Ok(i) = v.as_int() {
        out.push_str(&i.to_string());
    } else if let Ok(f) = v.as_float() {
        write_float(out, f);
    } else if let Ok(c) = v.as_char() {
        write_str(out, c.encode_utf8(&mut [0; 4]));
    } else if v.is_string() {
        let s = v.into_immutable_string()?;
        write_str(out, s.as_str());
    } else if v.is_array() {
        let items = v.into_array()?;
        out.push('[');
        return Ok(Some(Open::Array(items.into_iter(), true)));
    } else if v.is_map() {
        let type_name = v.type_name();
        let map = v.try_cast::<Map>().ok_or(type_name)?;
        out.push('{');
        return Ok(Some(Open::Map(map.into_iter(), true)));
    } else {
        return Err(format!("a {} is not plain data", v.type_name()));
    }
    Ok(None)
}

/// A float as `serde_json` (ryu) writes it: `1e-7`, `1e21`, `0.1`, `-0.0`, `3.0`;
/// NaN and the infinities have no JSON form and become `null`.
pub fn write_float(out: &mut String, f: f64) {
    if f.is_finite() {
        out.push_str(ryu::Buffer::new().format_finite(f));
    } else {
        out.push_str("null");
    }
}

/// A JSON string exactly as `serde_json` escapes it: `"`, `\`, and control
/// characters only (`\n`-style where JSON has one, else `\u00xx`); the rest raw.
pub fn write_str(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    let mut start = 0;
    for (i, byte) in s.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

pub fn load(text: &str) -> Result<Dynamic, String> {
    serde_json::from_str::<Value>(text)
        .map(from_value)
        .map_err(|e| e.to_string())
}

/// `to_json(value) -> str`: the compact, key-sorted JSON text of a value.
#[pyfunction]
pub fn to_json(value: &Bound<'_, PyAny>) -> PyResult<String> {
    let size = stack::size_for_operations(0);
    stack::run_on_big_stack(size, || {
        let dynamic = convert::to_dynamic(value).map_err(|e| e.into_pyerr("value"))?;
        dump_owned(dynamic).map_err(|e| PyValueError::new_err(format!("to_json: {e}")))
    })
}

/// `parse_json(text) -> value`: any JSON value, converted as scripts see it.
#[pyfunction]
pub fn parse_json<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let value = load(text).map_err(|e| PyValueError::new_err(format!("parse_json: {e}")))?;
    convert::owned_value_to_python(py, value, "parsed value")
}
