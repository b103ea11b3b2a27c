//! `Engine`: one hardened configuration, built from explicit limits.
//!
//! Every limit is set explicitly so debug and release builds behave the same
//! (Rhai's defaults differ between them). Built in and not optional: no module
//! resolver (`import` fails at run time) and `eval` rejected at compile time; `print`/`debug`
//! captured per call; `sleep` bounded by the call's deadline; correct `to_json`
//! and `parse_json`. Python functions registered later rebuild the engine; a
//! `Script` keeps the engine it was compiled with.

use std::any::TypeId;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBool;
use rhai::module_resolvers::DummyModuleResolver;
use rhai::packages::{Package, StandardPackage};
use rhai::{Dynamic, EvalAltResult, ImmutableString, Map, NativeCallContext, Position, Shared};

use crate::context::{self, TOKEN_CANCELLED};
use crate::{errors, host, json, script};

#[derive(Clone)]
struct Limits {
    max_operations: u64,
    max_call_levels: usize,
    max_expr_depth: usize,
    max_function_expr_depth: usize,
    max_string_size: usize,
    max_array_size: usize,
    max_map_size: usize,
    max_variables: usize,
    max_functions: usize,
}

struct Registered {
    name: String,
    /// `None`: a brokered host call the binding makes itself (`wire::host_line`).
    func: Option<Arc<Py<PyAny>>>,
    signatures: Vec<Vec<TypeId>>,
}

/// A parameter type name of `register_fn(..., types=[...])` -> the Rhai type it matches.
fn type_id(name: &str) -> PyResult<TypeId> {
    Ok(match name {
        "string" | "str" => TypeId::of::<ImmutableString>(),
        "int" | "i64" | "INT" => TypeId::of::<rhai::INT>(),
        "float" | "f64" | "FLOAT" => TypeId::of::<rhai::FLOAT>(),
        "bool" => TypeId::of::<bool>(),
        "char" => TypeId::of::<char>(),
        "array" => TypeId::of::<rhai::Array>(),
        "map" => TypeId::of::<Map>(),
        "blob" => TypeId::of::<rhai::Blob>(),
        "fnptr" | "FnPtr" => TypeId::of::<rhai::FnPtr>(),
        "any" | "Dynamic" => TypeId::of::<Dynamic>(),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown parameter type {other:?} (use string, int, float, bool, char, array, map, blob, fnptr or any)"
            )))
        }
    })
}

/// A Rhai engine configured for untrusted scripts.
#[pyclass(frozen, module = "rhai")]
pub struct Engine {
    limits: Limits,
    /// Nanoseconds of its thread's CPU one call may spend (`context::CPU_NANOS_PER_OPERATION`).
    max_cpu_nanos: u64,
    output_limit: usize,
    json_functions: bool,
    check_argument_sizes: bool,
    functions: Mutex<Vec<Registered>>,
    built: Mutex<Option<Arc<rhai::Engine>>>,
}

fn std_package() -> Shared<rhai::Module> {
    static PKG: OnceLock<Shared<rhai::Module>> = OnceLock::new();
    PKG.get_or_init(|| StandardPackage::new().as_shared_module())
        .clone()
}

/// An `int` keyword argument; `bool` is refused (`max_operations=True` is a slip, not 1).
fn int_arg(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err("expected an int, not bool"));
    }
    obj.extract()
}

/// A limit must be positive: Rhai reads 0 as "unlimited" (or "none at all").
fn positive<T: TryFrom<i64>>(name: &str, value: i64) -> PyResult<T> {
    match T::try_from(value) {
        Ok(v) if value > 0 => Ok(v),
        _ => Err(PyValueError::new_err(format!(
            "{name} must be a positive integer, not {value} (every limit must be a positive integer; \
             0 would mean unlimited or none)"
        ))),
    }
}

fn lock_err<T>(_: T) -> PyErr {
    PyRuntimeError::new_err("engine lock poisoned")
}

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (*, max_operations=500_000, max_call_levels=64, max_expr_depth=128,
        max_function_expr_depth=128, max_string_size=1_000_000, max_array_size=10_000,
        max_map_size=10_000, max_variables=10_000, max_functions=1_000, output_limit=65_536,
        json_functions=true, check_argument_sizes=true, max_cpu_seconds=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        #[pyo3(from_py_with = int_arg)] max_operations: i64,
        #[pyo3(from_py_with = int_arg)] max_call_levels: i64,
        #[pyo3(from_py_with = int_arg)] max_expr_depth: i64,
        #[pyo3(from_py_with = int_arg)] max_function_expr_depth: i64,
        #[pyo3(from_py_with = int_arg)] max_string_size: i64,
        #[pyo3(from_py_with = int_arg)] max_array_size: i64,
        #[pyo3(from_py_with = int_arg)] max_map_size: i64,
        #[pyo3(from_py_with = int_arg)] max_variables: i64,
        #[pyo3(from_py_with = int_arg)] max_functions: i64,
        #[pyo3(from_py_with = int_arg)] output_limit: i64,
        json_functions: bool,
        check_argument_sizes: bool,
        max_cpu_seconds: Option<f64>,
    ) -> PyResult<Self> {
        let limits = Limits {
            max_operations: positive("max_operations", max_operations)?,
            max_call_levels: positive("max_call_levels", max_call_levels)?,
            max_expr_depth: positive("max_expr_depth", max_expr_depth)?,
            max_function_expr_depth: positive("max_function_expr_depth", max_function_expr_depth)?,
            max_string_size: positive("max_string_size", max_string_size)?,
            max_array_size: positive("max_array_size", max_array_size)?,
            max_map_size: positive("max_map_size", max_map_size)?,
            max_variables: positive("max_variables", max_variables)?,
            max_functions: positive("max_functions", max_functions)?,
        };
        let max_cpu_nanos = match max_cpu_seconds {
            None => limits
                .max_operations
                .saturating_mul(context::CPU_NANOS_PER_OPERATION),
            Some(s) if s.is_finite() && s > 0.0 => {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                // positive and finite; `as` saturates at u64::MAX
                let nanos = (s * 1e9) as u64;
                nanos.max(1)
            }
            Some(_) => {
                return Err(PyValueError::new_err(
                    "max_cpu_seconds must be a positive number of seconds",
                ))
            }
        };
        // 0 keeps no output at all, which is a valid choice.
        let output_limit = usize::try_from(output_limit)
            .map_err(|_| PyValueError::new_err("output_limit must not be negative"))?;
        Ok(Self {
            limits,
            max_cpu_nanos,
            output_limit,
            json_functions,
            check_argument_sizes,
            functions: Mutex::new(Vec::new()),
            built: Mutex::new(None),
        })
    }

    /// Registers a Python callable as a script function at every arity it accepts (<= 8).
    ///
    /// With `types`, registers exactly one typed signature instead; typed functions
    /// take precedence over the standard library's functions of the same signature.
    #[pyo3(signature = (name, func, *, types=None))]
    fn register_fn(
        &self,
        py: Python<'_>,
        name: &str,
        func: Bound<'_, PyAny>,
        types: Option<Vec<String>>,
    ) -> PyResult<()> {
        if !func.is_callable() {
            return Err(PyValueError::new_err("register_fn needs a callable"));
        }
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(PyValueError::new_err(format!(
                "{name:?} is not a valid script function name"
            )));
        }
        let signatures: Vec<Vec<TypeId>> = if let Some(t) = types {
            vec![t.iter().map(|n| type_id(n)).collect::<PyResult<_>>()?]
        } else {
            let arities: Vec<usize> = py
                .import("rhai._arity")?
                .getattr("arities")?
                .call1((&func,))?
                .extract()?;
            arities
                .into_iter()
                .map(|n| vec![TypeId::of::<Dynamic>(); n])
                .collect()
        };
        // Lock order everywhere: `built` before `functions` (see `engine()`).
        let mut built = self.built.lock().map_err(lock_err)?;
        let mut fns = self.functions.lock().map_err(lock_err)?;
        fns.retain(|r| !(r.name == name && r.signatures == signatures));
        fns.push(Registered {
            name: name.to_string(),
            func: Some(Arc::new(func.unbind())),
            signatures,
        });
        *built = None;
        Ok(())
    }

    /// Registers `name` as one of rhaipool's brokered host calls, made natively through the
    /// calling thread's `HostLine` (`bind_line`), at each signature in `signatures`.
    fn register_brokered(&self, name: &str, signatures: Vec<Vec<String>>) -> PyResult<()> {
        let signatures: Vec<Vec<TypeId>> = signatures
            .iter()
            .map(|t| t.iter().map(|n| type_id(n)).collect::<PyResult<_>>())
            .collect::<PyResult<_>>()?;
        let mut built = self.built.lock().map_err(lock_err)?;
        let mut fns = self.functions.lock().map_err(lock_err)?;
        fns.retain(|r| r.name != name);
        fns.push(Registered {
            name: name.to_string(),
            func: None,
            signatures,
        });
        *built = None;
        Ok(())
    }

    /// Compiles `source`; raises `CompileError` with line and column.
    #[pyo3(signature = (source, name="<script>"))]
    fn compile(&self, py: Python<'_>, source: &str, name: &str) -> PyResult<script::Script> {
        let engine = self.engine()?;
        let compiled = py.detach(|| engine.compile(source));
        match compiled {
            Ok(mut ast) => {
                ast.set_source(name);
                Ok(script::Script::new(
                    engine,
                    ast,
                    name.to_string(),
                    self.output_limit,
                    self.check_argument_sizes,
                    self.max_cpu_nanos,
                ))
            }
            Err(e) => Err(errors::compile_error(py, &e, name)),
        }
    }

    fn __repr__(&self) -> String {
        format!("Engine(max_operations={})", self.limits.max_operations)
    }
}

impl Engine {
    fn engine(&self) -> PyResult<Arc<rhai::Engine>> {
        let mut built = self.built.lock().map_err(lock_err)?;
        if let Some(e) = built.as_ref() {
            return Ok(e.clone());
        }
        let mut e = build(&self.limits, self.json_functions);
        for r in self.functions.lock().map_err(lock_err)?.iter() {
            match &r.func {
                Some(func) => host::register(&mut e, &r.name, func, &r.signatures),
                None => crate::wire::host_line::register(&mut e, &r.name, &r.signatures),
            }
        }
        let e = Arc::new(e);
        *built = Some(e.clone());
        Ok(e)
    }
}

fn build(l: &Limits, json_functions: bool) -> rhai::Engine {
    let mut e = rhai::Engine::new_raw();
    e.register_global_module(std_package());
    // No resolver: every `import` fails at run time ("Module not found"), as in the reference
    // runtime, which compiles `import`/`export`; only `eval` is refused at compile time.
    e.set_module_resolver(DummyModuleResolver::new());
    e.disable_symbol("eval");
    e.set_max_operations(l.max_operations)
        .set_max_call_levels(l.max_call_levels)
        .set_max_expr_depths(l.max_expr_depth, l.max_function_expr_depth)
        .set_max_string_size(l.max_string_size)
        .set_max_array_size(l.max_array_size)
        .set_max_map_size(l.max_map_size)
        .set_max_variables(l.max_variables)
        .set_max_functions(l.max_functions)
        .set_max_modules(usize::MAX); // a cap of 0 would fail `import` as "Too many modules"
    e.on_progress(context::on_progress);
    e.on_print(|s| {
        context::with_top(|st| st.record_output(s));
    });
    e.on_debug(|s, _src, _pos| {
        context::with_top(|st| st.record_output(s));
    });
    #[allow(clippy::cast_precision_loss)] // whole seconds far below 2^52
    e.register_fn("sleep", |ctx: NativeCallContext, secs: rhai::INT| {
        bounded_sleep(&ctx, secs as f64)
    });
    e.register_fn("sleep", |ctx: NativeCallContext, secs: rhai::FLOAT| {
        bounded_sleep(&ctx, secs)
    });
    register_json(&mut e, json_functions);
    e
}

fn to_json_fn(ctx: &NativeCallContext, v: &Dynamic) -> Result<ImmutableString, Box<EvalAltResult>> {
    let _ = ctx;
    json::dump(v)
        .map(Into::into)
        .map_err(|m| format!("to_json: {m}").into())
}

fn not_found(name: &str, pos: Position) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorFunctionNotFound(name.to_string(), pos))
}

/// Correct JSON functions; with `json_functions=False` (region hooks) only the
/// map method stays (Rhai has it built in, now with correct escaping).
fn register_json(e: &mut rhai::Engine, full: bool) {
    e.register_fn("to_json", |ctx: NativeCallContext, m: Map| {
        to_json_fn(&ctx, &Dynamic::from_map(m))
    });
    if full {
        e.register_fn("to_json", |ctx: NativeCallContext, v: Dynamic| {
            to_json_fn(&ctx, &v)
        });
        e.register_fn(
            "parse_json",
            |ctx: NativeCallContext, text: ImmutableString| {
                let _ = ctx;
                json::load(&text)
                    .map_err(|m| -> Box<EvalAltResult> { format!("parse_json: {m}").into() })
            },
        );
    } else {
        e.register_fn(
            "to_json",
            |ctx: NativeCallContext, _v: Dynamic| -> Result<Dynamic, Box<EvalAltResult>> {
                Err(not_found("to_json", ctx.call_position()))
            },
        );
        e.register_fn(
            "parse_json",
            |ctx: NativeCallContext, _t: ImmutableString| -> Result<Dynamic, Box<EvalAltResult>> {
                Err(not_found("parse_json (string)", ctx.call_position()))
            },
        );
    }
}

/// `sleep` that never outlives the call's deadline and wakes on cancellation.
fn bounded_sleep(ctx: &NativeCallContext, secs: f64) -> Result<(), Box<EvalAltResult>> {
    if !secs.is_finite() || secs <= 0.0 {
        return Ok(());
    }
    let end = Instant::now() + Duration::from_secs_f64(secs.min(1e9));
    loop {
        if let Some(reason) = context::with_top(context::CallState::stop_reason).flatten() {
            let token = if reason == TOKEN_CANCELLED {
                TOKEN_CANCELLED
            } else {
                context::TOKEN_DEADLINE
            };
            return Err(Box::new(EvalAltResult::ErrorTerminated(
                Dynamic::from(token),
                ctx.call_position(),
            )));
        }
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(Duration::from_millis(5)));
    }
}
