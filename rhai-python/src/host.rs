//! Python callables on both sides of the engine.
//!
//! * A Python function registered with `Engine.register_fn` becomes a raw host
//!   function (one per accepted arity, every parameter `Dynamic`).
//! * A Python callable passed *into* a script becomes a native function pointer
//!   (`on_chunk.call(map)`).
//! * A script closure passed *to* a host function (also inside a map or array)
//!   becomes a `Callback`, callable only during that host call and only on the
//!   script's thread; the operations it runs count against the call's budget.
//!
//! Errors: `rhai.Throw(value)` is thrown into the script as a catchable value;
//! any other Python exception travels inside `ErrorSystem` (not catchable) and is
//! re-raised unchanged to whoever called `Script.call`.

// `NativeCallContextStore` and `FnPtr::from_fn` are marked deprecated only as "volatile";
// rhai is pinned exactly for that reason.
#![allow(deprecated)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use rhai::{Dynamic, EvalAltResult, NativeCallContext, NativeCallContextStore, Position};

use crate::context;
use crate::{convert, errors, stack};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
const STASH_ATTR: &str = "_rhai_stash_id";

/// A script function pointer seen from Python (opaque; pass it back to a script).
#[pyclass(frozen, module = "rhai")]
pub struct FnPtr {
    pub inner: rhai::FnPtr,
}

impl Drop for FnPtr {
    /// A pointer can hold a closure chain as deep as a script's budget allowed;
    /// Python may free it on any thread, so it is freed on a stack big enough.
    fn drop(&mut self) {
        if self.inner.curry().is_empty() {
            return;
        }
        let curried: Vec<Dynamic> = self.inner.iter_curry_mut().map(std::mem::take).collect();
        stack::run_on_fresh_stack(stack::MAX_STACK, move || drop(curried));
    }
}

#[pymethods]
impl FnPtr {
    #[getter]
    fn name(&self) -> String {
        self.inner.fn_name().to_string()
    }
    fn __repr__(&self) -> String {
        format!("FnPtr({:?})", self.inner.fn_name())
    }
}

/// A script closure handed to a host function; valid only during that host call.
#[pyclass(frozen, module = "rhai")]
pub struct Callback {
    fnptr: rhai::FnPtr,
    store: NativeCallContextStore,
    engine: Arc<rhai::Engine>,
    alive: Arc<AtomicBool>,
    thread: ThreadId,
}

#[pymethods]
impl Callback {
    #[getter]
    fn name(&self) -> String {
        self.fnptr.fn_name().to_string()
    }

    #[pyo3(signature = (*args))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if !self.alive.load(Ordering::SeqCst) {
            return Err(PyRuntimeError::new_err(
                "script callback used after its host call returned",
            ));
        }
        if std::thread::current().id() != self.thread {
            return Err(PyRuntimeError::new_err(
                "script callback called from another thread",
            ));
        }
        let args = convert::args_to_dynamic(args)?;
        let result = py.detach(|| {
            #[allow(deprecated)]
            let ctx = self.store.create_context(&self.engine);
            self.fnptr.call_raw(&ctx, None, args)
        });
        // The callback counted on a copy of the host call's counter, starting at `base`:
        // add what it spent to the call's total and put the counter back where it was.
        let base = self.store.global.num_operations;
        context::with_top(|st| {
            let spent = st.operations.get().saturating_sub(base);
            st.callback_operations
                .set(st.callback_operations.get().saturating_add(spent));
            st.operations.set(base);
        });
        match result {
            Ok(v) => convert::owned_value_to_python(py, v, "callback result"),
            Err(e) => Err(stash_error(py, e)),
        }
    }

    fn __repr__(&self) -> String {
        format!("Callback({:?})", self.fnptr.fn_name())
    }
}

/// Turns an engine error into a Python exception but keeps the original, so that
/// a host function letting it escape gives the script back exactly that error.
fn stash_error(py: Python<'_>, err: Box<EvalAltResult>) -> PyErr {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let script = context::with_top(|st| st.script.clone()).unwrap_or_else(|| "<callback>".into());
    let pyerr = errors::map_error(py, &err, &script);
    let _ = pyerr.value(py).setattr(STASH_ATTR, id);
    context::with_top(|st| st.stash.borrow_mut().insert(id, err));
    pyerr
}

/// A Python exception leaving a host function -> the engine error it stands for.
pub fn pyerr_to_engine(py: Python<'_>, err: PyErr) -> Box<EvalAltResult> {
    let value = err.value(py);
    if let Ok(id) = value.getattr(STASH_ATTR).and_then(|v| v.extract::<u64>()) {
        if let Some(orig) = context::with_top(|st| st.stash.borrow_mut().remove(&id)).flatten() {
            return orig;
        }
    }
    if let Ok(throw_cls) = py.import("rhai.errors").and_then(|m| m.getattr("Throw")) {
        if value.is_instance(&throw_cls).unwrap_or(false) {
            let thrown = value
                .getattr("value")
                .map_err(convert::ConvError::from)
                .and_then(|v| convert::to_dynamic(&v));
            return match thrown {
                Ok(v) => Box::new(EvalAltResult::ErrorRuntime(v, Position::NONE)),
                Err(e) => system_error(e.into_pyerr("Throw.value")),
            };
        }
    }
    system_error(err)
}

fn system_error(err: PyErr) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorSystem(String::new(), Box::new(err)))
}

/// Calls `func` with engine arguments; shared by host functions and native pointers.
fn call_python(
    ctx: &NativeCallContext,
    func: &Py<PyAny>,
    args: &mut [&mut Dynamic],
) -> Result<Dynamic, Box<EvalAltResult>> {
    let result = Python::attach(|py| {
        let alive = Arc::new(AtomicBool::new(true));
        let py_args = python_args(py, ctx, args, &alive)?;
        let out = PyTuple::new(py, py_args)
            .and_then(|t| func.bind(py).call1(t))
            .map_err(|e| pyerr_to_engine(py, e))
            .and_then(|r| {
                convert::to_dynamic(&r)
                    .map_err(|e| pyerr_to_engine(py, e.into_pyerr("host result")))
            });
        alive.store(false, Ordering::SeqCst);
        out
    });
    // Host functions run outside `on_progress`: re-check the deadline at once.
    if let Some(reason) = context::with_top(context::CallState::stop_reason).flatten() {
        return Err(Box::new(EvalAltResult::ErrorTerminated(
            Dynamic::from(reason),
            ctx.call_position(),
        )));
    }
    result
}

/// Host arguments -> the list a Python host function would get; the callbacks in it are valid
/// until the flag returned is cleared.
pub fn args_to_python<'py>(
    py: Python<'py>,
    ctx: &NativeCallContext,
    args: &[&mut Dynamic],
) -> Result<(Bound<'py, PyList>, Arc<AtomicBool>), Box<EvalAltResult>> {
    let alive = Arc::new(AtomicBool::new(true));
    let py_args = python_args(py, ctx, args, &alive)?;
    let list = PyList::new(py, py_args).map_err(|e| pyerr_to_engine(py, e))?;
    Ok((list, alive))
}

/// Each host argument -> Python (read, never taken: in method-call style the first is the caller's
/// own variable); an argument that does not convert is named by its position.
fn python_args<'py>(
    py: Python<'py>,
    ctx: &NativeCallContext,
    args: &[&mut Dynamic],
    alive: &Arc<AtomicBool>,
) -> Result<Vec<Bound<'py, PyAny>>, Box<EvalAltResult>> {
    let mut py_args = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        match arg_to_python(py, ctx, a, alive) {
            Ok(obj) => py_args.push(obj),
            Err(e) => {
                return Err(pyerr_to_engine(
                    py,
                    e.into_pyerr(&format!("host argument {i}")),
                ))
            }
        }
    }
    Ok(py_args)
}

/// A host argument -> Python; script function pointers anywhere inside it become
/// `Callback`s valid during this host call.
fn arg_to_python<'py>(
    py: Python<'py>,
    ctx: &NativeCallContext,
    value: &Dynamic,
    alive: &Arc<AtomicBool>,
) -> Result<Bound<'py, PyAny>, convert::ConvError> {
    let engine = context::with_top(|st| st.engine.clone());
    let as_callback = |py: Python<'py>, fp: rhai::FnPtr| -> PyResult<Bound<'py, PyAny>> {
        match (&engine, python_callable(&fp)) {
            (Some(engine), None) => {
                #[allow(deprecated)]
                let cb = Callback {
                    fnptr: fp,
                    store: ctx.store_data(),
                    engine: engine.clone(),
                    alive: alive.clone(),
                    thread: std::thread::current().id(),
                };
                Ok(Bound::new(py, cb)?.into_any())
            }
            _ => fnptr_to_python(py, fp),
        }
    };
    convert::to_python_with(py, value, &as_callback)
}

/// Registers `func` as `name` once per parameter-type signature.
pub fn register(
    engine: &mut rhai::Engine,
    name: &str,
    func: &Arc<Py<PyAny>>,
    signatures: &[Vec<std::any::TypeId>],
) {
    for types in signatures {
        let f = func.clone();
        engine.register_raw_fn(
            name,
            types.clone(),
            move |ctx: NativeCallContext, args: &mut [&mut Dynamic]| call_python(&ctx, &f, args),
        );
    }
}

fn python_callable(fp: &rhai::FnPtr) -> Option<Arc<Py<PyAny>>> {
    context::with_top(|st| st.callables.borrow().get(fp.fn_name()).cloned()).flatten()
}

/// A Python object that should travel into a script as a function pointer.
pub fn fnptr_from_python(obj: &Bound<'_, PyAny>) -> PyResult<Option<rhai::FnPtr>> {
    if let Ok(fp) = obj.cast::<FnPtr>() {
        return Ok(Some(fp.get().inner.clone()));
    }
    if let Ok(cb) = obj.cast::<Callback>() {
        return Ok(Some(cb.get().fnptr.clone()));
    }
    if !obj.is_callable() {
        return Ok(None);
    }
    let name = format!("host_fn_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
    let func = Arc::new(obj.clone().unbind());
    context::with_top(|st| st.callables.borrow_mut().insert(name.clone(), func.clone()));
    #[allow(deprecated)]
    let fp = rhai::FnPtr::from_fn(
        name,
        move |ctx: NativeCallContext, args: &mut [&mut Dynamic]| call_python(&ctx, &func, args),
    )
    .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok(Some(fp))
}

/// A function pointer leaving the engine: the original Python callable if it was one.
pub fn fnptr_to_python(py: Python<'_>, fp: rhai::FnPtr) -> PyResult<Bound<'_, PyAny>> {
    if let Some(f) = python_callable(&fp) {
        return Ok(f.bind(py).clone());
    }
    Ok(Bound::new(py, FnPtr { inner: fp })?.into_any())
}
