//! Engine errors -> the Python exception tree of `rhai.errors`.
//!
//! The classes are plain Python (multiple inheritance such as
//! `DeadlineExceeded(LimitExceeded, TimeoutError)` is easy there); this module only
//! decides which one and fills in message, position, script and kind. A Python
//! exception raised by a host function travels through the engine inside
//! `ErrorSystem` and comes out as the *original* object, with a note.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use rhai::{Dynamic, EvalAltResult, ParseError, Position};

use crate::context::{self, TOKEN_CANCELLED, TOKEN_DEADLINE, TOKEN_OPERATIONS, TOKEN_SIGNAL};
use crate::convert;

fn variant_name(err: &impl std::fmt::Debug) -> String {
    let text = format!("{err:?}");
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap_or("")
        .to_string()
}

fn pos_fields(pos: Position) -> (Option<usize>, Option<usize>) {
    (pos.line(), pos.position())
}

/// Builds `rhai.errors.<class>(message, line=, column=, script=, kind=, **extra)`.
fn build(
    py: Python<'_>,
    class: &str,
    message: &str,
    pos: Position,
    script: &str,
    kind: &str,
    extra: Option<&Bound<'_, PyDict>>,
) -> PyErr {
    let make = || -> PyResult<PyErr> {
        let cls = py.import("rhai.errors")?.getattr(class)?;
        let kw = PyDict::new(py);
        let (line, column) = pos_fields(pos);
        kw.set_item("line", line)?;
        kw.set_item("column", column)?;
        kw.set_item("script", script)?;
        kw.set_item("kind", kind)?;
        if let Some(extra) = extra {
            kw.update(extra.as_mapping())?;
        }
        let exc = cls.call((message,), Some(&kw))?;
        Ok(PyErr::from_value(exc))
    };
    make().unwrap_or_else(|e| e)
}

pub fn compile_error(py: Python<'_>, err: &ParseError, script: &str) -> PyErr {
    let kind = variant_name(err.err_type());
    build(
        py,
        "CompileError",
        &err.err_type().to_string(),
        err.position(),
        script,
        &kind,
        None,
    )
}

/// A short human message for a thrown value: its `message` field, the string, or its text.
fn thrown_message(value: &Dynamic) -> String {
    if let Ok(map) = value.as_map_ref() {
        if let Some(m) = map.get("message") {
            return m.to_string();
        }
    }
    value.to_string()
}

/// Maps an engine error to the exception the caller of `Script.call` sees.
pub fn runtime_error(py: Python<'_>, err: Box<EvalAltResult>, script: &str) -> PyErr {
    map_error(py, &err, script)
}

/// Like `runtime_error`, by reference (the original error may be kept elsewhere).
pub fn map_error(py: Python<'_>, err: &EvalAltResult, script: &str) -> PyErr {
    // Walk `ErrorInFunctionCall` wrappers to the cause, keeping the frames.
    let mut frames: Vec<(&str, &str, Option<usize>, Option<usize>)> = Vec::new();
    let mut err = err;
    let mut outer_pos = err.position();
    while let EvalAltResult::ErrorInFunctionCall(name, src, inner, pos) = err {
        let (l, c) = pos_fields(*pos);
        frames.push((name.as_str(), src.as_str(), l, c));
        if outer_pos.is_none() {
            outer_pos = *pos;
        }
        err = inner.as_ref();
    }
    let pos = if err.position().is_none() {
        outer_pos
    } else {
        err.position()
    };
    let kind = variant_name(err);
    let extra = PyDict::new(py);
    if let Ok(t) = PyTuple::new(py, frames) {
        let _ = extra.set_item("frames", t);
    }
    let b =
        |class: &str, message: &str| build(py, class, message, pos, script, &kind, Some(&extra));
    match err {
        EvalAltResult::ErrorSystem(msg, inner) => match inner.downcast_ref::<PyErr>() {
            Some(pyerr) => {
                let pyerr = pyerr.clone_ref(py);
                let (l, _) = pos_fields(pos);
                let note = format!(
                    "raised in a host function called by script {script} at line {}",
                    l.unwrap_or(0)
                );
                let _ = pyerr.value(py).call_method1("add_note", (note,));
                pyerr
            }
            None => b("ScriptError", &format!("{msg}: {inner}")),
        },
        EvalAltResult::ErrorRuntime(value, _) => {
            let message = thrown_message(value);
            match convert::value_to_python(py, value, "thrown value") {
                Ok(v) => {
                    let _ = extra.set_item("value", v);
                }
                Err(_) => {
                    let _ = extra.set_item("value", value.to_string());
                }
            }
            b("ScriptThrow", &message)
        }
        EvalAltResult::ErrorTerminated(token, _) => {
            let token = token.to_string();
            if token == TOKEN_SIGNAL {
                if let Some(e) = context::with_top(|st| st.pending.take()).flatten() {
                    return e;
                }
            }
            match token.as_str() {
                TOKEN_DEADLINE => b("DeadlineExceeded", "script exceeded its deadline"),
                TOKEN_CANCELLED => b("Cancelled", "script was cancelled"),
                TOKEN_OPERATIONS => {
                    let kind = "ErrorTooManyOperations";
                    build(
                        py,
                        "TooManyOperations",
                        "Too many operations",
                        pos,
                        script,
                        kind,
                        Some(&extra),
                    )
                }
                _ => b("Cancelled", "script was terminated"),
            }
        }
        EvalAltResult::ErrorFunctionNotFound(sig, _) => {
            let _ = extra.set_item("signature", sig);
            b("FunctionNotFound", &err.to_string())
        }
        EvalAltResult::ErrorTooManyOperations(_) => b("TooManyOperations", &err.to_string()),
        EvalAltResult::ErrorDataTooLarge(what, _) => {
            let _ = extra.set_item("what", what);
            b("DataTooLarge", &err.to_string())
        }
        EvalAltResult::ErrorStackOverflow(_) => b("CallDepthExceeded", &err.to_string()),
        EvalAltResult::ErrorTooManyVariables(_) | EvalAltResult::ErrorTooManyModules(_) => {
            b("LimitExceeded", &err.to_string())
        }
        other => b("ScriptError", &other.to_string()),
    }
}

pub fn reentrancy_error(msg: &str) -> PyErr {
    PyRuntimeError::new_err(msg.to_string())
}
