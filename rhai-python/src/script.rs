//! `Script`: a compiled AST plus the engine it was compiled with.
//!
//! `call` runs one public function on a fresh scope; top-level statements run
//! before each call (the reference runtime's semantics). The GIL is released
//! while the script runs, so one `Script` serves many threads at once.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use rhai::{CallFnOptions, Dynamic, FnAccess, Scope, AST};

use crate::context::{self, CancelToken};
use crate::{convert, errors, stack};

/// What `Script.call_detailed` returns.
#[pyclass(frozen, module = "rhai", get_all)]
pub struct CallResult {
    value: Py<PyAny>,
    output: Vec<String>,
    output_truncated: bool,
    operations: u64,
    elapsed: f64,
}

#[pymethods]
impl CallResult {
    fn __repr__(&self) -> String {
        format!(
            "CallResult(operations={}, elapsed={:.6}, output_lines={}, output_truncated={})",
            self.operations,
            self.elapsed,
            self.output.len(),
            self.output_truncated
        )
    }
}

/// A compiled script, immutable and safe to share between threads.
#[pyclass(frozen, module = "rhai")]
pub struct Script {
    engine: Arc<rhai::Engine>,
    ast: AST,
    #[pyo3(get)]
    name: String,
    functions: Vec<(String, usize)>,
    output_limit: usize,
    check_argument_sizes: bool,
    max_cpu_nanos: u64,
}

impl Script {
    pub fn new(
        engine: Arc<rhai::Engine>,
        ast: AST,
        name: String,
        output_limit: usize,
        check_argument_sizes: bool,
        max_cpu_nanos: u64,
    ) -> Self {
        let mut functions: Vec<(String, usize)> = ast
            .iter_functions()
            .filter(|f| f.access == FnAccess::Public && f.this_type.is_none())
            .map(|f| (f.name.to_string(), f.params.len()))
            .collect();
        functions.sort();
        functions.dedup();
        Self {
            engine,
            ast,
            name,
            functions,
            output_limit,
            check_argument_sizes,
            max_cpu_nanos,
        }
    }

    /// Runs the call on a stack of its own (see `stack.rs`): everything the script
    /// builds is freed there, however deep.
    fn run(
        &self,
        py: Python<'_>,
        fn_name: &str,
        args: &Bound<'_, PyTuple>,
        timeout: Option<f64>,
        cancel: Option<&CancelToken>,
    ) -> PyResult<(Py<PyAny>, context::CallReport, f64)> {
        let cancel_flag: Option<Arc<AtomicBool>> = cancel.map(|c| c.flag.clone());
        self.run_with(
            py,
            fn_name,
            args.len(),
            || convert::args_to_dynamic(args),
            timeout,
            cancel_flag,
            |py, result, report, elapsed| match result {
                // Converted while this call's table of Python callables is still in place.
                Ok(v) => convert::owned_value_to_python(py, v, "result")
                    .map(|v| (v.unbind(), report, elapsed)),
                Err(e) => Err(e),
            },
        )
    }

    /// One call, from arguments to `finish`, on the call's own stack with its state pushed:
    /// `Script.call` finishes by converting the value to Python, the worker's `Lane` by writing
    /// it as msgpack. `finish` gets the script's failure already as the Python exception
    /// `call` raises (a signal handler's exception first).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_with<T>(
        &self,
        py: Python<'_>,
        fn_name: &str,
        arity: usize,
        args: impl FnOnce() -> PyResult<Vec<Dynamic>>,
        timeout: Option<f64>,
        cancel: Option<Arc<AtomicBool>>,
        finish: impl FnOnce(Python<'_>, PyResult<Dynamic>, context::CallReport, f64) -> PyResult<T>,
    ) -> PyResult<T> {
        let size = stack::size_for_operations(self.engine.max_operations());
        stack::try_run_on_big_stack(size, |room| {
            let max_operations = stack::operations_for_room(room, size);
            self.run_here(
                py,
                fn_name,
                arity,
                args,
                (timeout, cancel, max_operations),
                finish,
            )
        })
        .unwrap_or_else(|| {
            Err(PyMemoryError::new_err(format!(
                "no address space for this call's {} MiB stack",
                size >> 20
            )))
        })
    }

    /// `limits`: the call's timeout, cancel flag and operation budget (what its stack can hold).
    fn run_here<T>(
        &self,
        py: Python<'_>,
        fn_name: &str,
        arity: usize,
        args: impl FnOnce() -> PyResult<Vec<Dynamic>>,
        limits: (Option<f64>, Option<Arc<AtomicBool>>, u64),
        finish: impl FnOnce(Python<'_>, PyResult<Dynamic>, context::CallReport, f64) -> PyResult<T>,
    ) -> PyResult<T> {
        let (timeout, cancel, max_operations) = limits;
        if !self.has_function(fn_name, arity) {
            let err = rhai::EvalAltResult::ErrorFunctionNotFound(
                format!("{fn_name}/{arity}"),
                rhai::Position::NONE,
            );
            return Err(errors::runtime_error(py, Box::new(err), &self.name));
        }
        let deadline = match timeout {
            Some(t) if !(t.is_finite() && t >= 0.0) => {
                return Err(PyValueError::new_err(
                    "timeout must be a non-negative number of seconds",
                ))
            }
            Some(t) => Some(Instant::now() + Duration::from_secs_f64(t.min(1e9))),
            None => None,
        };
        let guard = context::push(
            self.engine.clone(),
            &self.name,
            deadline,
            cancel,
            self.output_limit,
            (max_operations, self.max_cpu_nanos),
        )
        .map_err(errors::reentrancy_error)?;
        let dyn_args = args()?;
        for a in dyn_args.iter().filter(|_| self.check_argument_sizes) {
            if let Err(e) = self.engine.ensure_data_size_within_limits(a) {
                return Err(errors::runtime_error(py, e, &self.name));
            }
        }
        let started = Instant::now();
        let result = py.detach(|| {
            let mut scope = Scope::new();
            self.engine.call_fn_with_options::<Dynamic>(
                CallFnOptions::new(),
                &mut scope,
                &self.ast,
                fn_name,
                dyn_args,
            )
        });
        let elapsed = started.elapsed().as_secs_f64();
        let mut report = context::take_report();
        let result = match result {
            Ok(v) => Ok(v),
            Err(e) => Err(match report.pending.take() {
                Some(p) => p,
                None => errors::runtime_error(py, e, &self.name),
            }),
        };
        let outcome = finish(py, result, report, elapsed);
        drop(guard);
        outcome
    }
}

#[pymethods]
impl Script {
    /// Public script functions as `(name, arity)` pairs, sorted.
    #[getter]
    fn functions(&self) -> Vec<(String, usize)> {
        self.functions.clone()
    }

    fn has_function(&self, name: &str, arity: usize) -> bool {
        self.functions.iter().any(|(n, a)| n == name && *a == arity)
    }

    /// Runs public function `name` with `args`; returns its value.
    #[pyo3(signature = (name, *args, timeout=None, cancel=None))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        args: &Bound<'py, PyTuple>,
        timeout: Option<f64>,
        cancel: Option<PyRef<'py, CancelToken>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (value, _report, _elapsed) = self.run(py, name, args, timeout, cancel.as_deref())?;
        Ok(value.into_bound(py))
    }

    /// Like `call`, and also returns captured output, operations and elapsed time.
    #[pyo3(signature = (name, *args, timeout=None, cancel=None))]
    fn call_detailed<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        args: &Bound<'py, PyTuple>,
        timeout: Option<f64>,
        cancel: Option<PyRef<'py, CancelToken>>,
    ) -> PyResult<CallResult> {
        let (value, report, elapsed) = self.run(py, name, args, timeout, cancel.as_deref())?;
        Ok(CallResult {
            value,
            output: report.output,
            output_truncated: report.truncated,
            operations: report.operations,
            elapsed,
        })
    }

    fn __repr__(&self) -> String {
        format!("Script({:?}, functions={:?})", self.name, self.functions)
    }
}
