//! Per-call state, kept on a thread-local stack.
//!
//! Rhai's `on_progress`, `on_print` and host-function callbacks are engine-wide and
//! receive no per-call data, so the deadline, the cancel flag, the output buffer and
//! the table of Python callables for *this* call live here. A script runs on the
//! thread that called `Script.call` (the GIL is released, the thread stays), so a
//! thread-local stack is exact; nesting (host function -> `Script.call`) pushes.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::ThreadId;
use std::time::Instant;

use pyo3::prelude::*;
use rhai::{Dynamic, EvalAltResult};

/// Deepest nesting of `Script.call` inside host functions on one thread.
pub const MAX_REENTRANCY: usize = 4;
/// Termination tokens carried by `ErrorTerminated`.
pub const TOKEN_DEADLINE: &str = "deadline";
pub const TOKEN_CANCELLED: &str = "cancelled";
pub const TOKEN_SIGNAL: &str = "signal";
/// The call's operation budget ran out counting its script callbacks too.
pub const TOKEN_OPERATIONS: &str = "operations";

static MAIN_THREAD: OnceLock<ThreadId> = OnceLock::new();

pub fn remember_main_thread() {
    let _ = MAIN_THREAD.set(std::thread::current().id());
}

/// A thread-safe flag that stops a running script from inside the engine.
#[pyclass(frozen, module = "rhai")]
#[derive(Default)]
pub struct CancelToken {
    pub flag: Arc<AtomicBool>,
}

#[pymethods]
impl CancelToken {
    #[new]
    fn new() -> Self {
        Self::default()
    }
    /// Ask every call using this token to stop (idempotent, thread-safe).
    fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }
    #[getter]
    fn cancelled(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
    fn __repr__(&self) -> String {
        format!("CancelToken(cancelled={})", self.cancelled())
    }
}

pub struct CallState {
    pub engine: Arc<rhai::Engine>,
    /// The script's name, for errors raised by its callbacks.
    pub script: String,
    pub deadline: Option<Instant>,
    pub cancel: Option<Arc<AtomicBool>>,
    pub check_signals: bool,
    /// The engine's operation counter as last reported by `on_progress`.
    pub operations: Cell<u64>,
    /// Operations spent in script callbacks that already returned: each runs on
    /// its own copy of the counter, so the budget is enforced here on the sum.
    pub callback_operations: Cell<u64>,
    max_operations: u64,
    last_signal_check: Cell<u64>,
    output_limit: usize,
    output: RefCell<Vec<String>>,
    output_bytes: Cell<usize>,
    truncated: Cell<bool>,
    /// Python callables handed to the script as function pointers, by generated name.
    pub callables: RefCell<HashMap<String, Arc<Py<PyAny>>>>,
    /// Original engine errors of failed callbacks, so they survive a trip through Python.
    pub stash: RefCell<HashMap<u64, Box<EvalAltResult>>>,
    /// A Python exception raised by a signal handler while the script ran.
    pub pending: RefCell<Option<PyErr>>,
}

thread_local! {
    static STACK: RefCell<Vec<CallState>> = const { RefCell::new(Vec::new()) };
}

/// Pops the state it pushed when dropped, even on panic.
pub struct CallGuard(());

impl Drop for CallGuard {
    fn drop(&mut self) {
        STACK.with(|s| s.borrow_mut().pop());
    }
}

/// What a finished call leaves behind besides its value.
pub struct CallReport {
    pub output: Vec<String>,
    pub truncated: bool,
    pub operations: u64,
    pub pending: Option<PyErr>,
}

/// Starts a call. A call nested in a host function keeps its own deadline and token:
/// rhaipool's worker serves unrelated calls nested on one thread (a region hook run
/// while a provider call waits for its host reply), and a host function's own Python
/// code is not bounded by the outer deadline anyway; the outer call's limits apply
/// again as soon as the host function returns.
pub fn push(
    engine: Arc<rhai::Engine>,
    script: &str,
    deadline: Option<Instant>,
    cancel: Option<Arc<AtomicBool>>,
    output_limit: usize,
) -> Result<CallGuard, &'static str> {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() >= MAX_REENTRANCY {
            return Err("script calls nested inside host functions deeper than 4 levels");
        }
        let check_signals = MAIN_THREAD.get() == Some(&std::thread::current().id());
        let max_operations = engine.max_operations();
        s.push(CallState {
            engine,
            script: script.to_string(),
            deadline,
            cancel,
            check_signals,
            operations: Cell::new(0),
            callback_operations: Cell::new(0),
            max_operations,
            last_signal_check: Cell::new(0),
            output_limit,
            output: RefCell::new(Vec::new()),
            output_bytes: Cell::new(0),
            truncated: Cell::new(false),
            callables: RefCell::new(HashMap::new()),
            stash: RefCell::new(HashMap::new()),
            pending: RefCell::new(None),
        });
        Ok(CallGuard(()))
    })
}

/// Runs `f` on the innermost call state, if any.
pub fn with_top<R>(f: impl FnOnce(&CallState) -> R) -> Option<R> {
    STACK.with(|s| s.try_borrow().ok().and_then(|s| s.last().map(f)))
}

/// Collects the report of the innermost call (call before its guard drops).
pub fn take_report() -> CallReport {
    with_top(|st| CallReport {
        output: st.output.take(),
        truncated: st.truncated.get(),
        operations: st.operations.get() + st.callback_operations.get(),
        pending: st.pending.take(),
    })
    .unwrap_or(CallReport {
        output: Vec::new(),
        truncated: false,
        operations: 0,
        pending: None,
    })
}

impl CallState {
    /// Why the call must stop now, if it must (deadline, cancellation).
    pub fn stop_reason(&self) -> Option<&'static str> {
        if self.cancelled() {
            return Some(TOKEN_CANCELLED);
        }
        match self.deadline {
            Some(d) if Instant::now() >= d => Some(TOKEN_DEADLINE),
            _ => None,
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }

    pub fn record_output(&self, text: &str) {
        if self.truncated.get() {
            return;
        }
        let used = self.output_bytes.get();
        if used + text.len() > self.output_limit {
            self.truncated.set(true);
            return;
        }
        self.output_bytes.set(used + text.len());
        self.output.borrow_mut().push(text.to_string());
    }
}

/// The engine's `on_progress` hook: per-call deadline, cancel flag and signals.
pub fn on_progress(ops: u64) -> Option<Dynamic> {
    with_top(|st| {
        st.operations.set(ops);
        if st.cancelled() {
            return Some(Dynamic::from(TOKEN_CANCELLED));
        }
        let spent = st.callback_operations.get();
        if spent > 0 && ops.saturating_add(spent) > st.max_operations {
            return Some(Dynamic::from(TOKEN_OPERATIONS));
        }
        if ops & 255 != 0 {
            return None;
        }
        if let Some(d) = st.deadline {
            if Instant::now() >= d {
                return Some(Dynamic::from(TOKEN_DEADLINE));
            }
        }
        if st.check_signals && ops.wrapping_sub(st.last_signal_check.get()) >= 1 << 16 {
            st.last_signal_check.set(ops);
            #[allow(clippy::redundant_closure_for_method_calls)]
            // the method form does not type-check
            if let Err(e) = Python::attach(|py| py.check_signals()) {
                *st.pending.borrow_mut() = Some(e);
                return Some(Dynamic::from(TOKEN_SIGNAL));
            }
        }
        None
    })
    .flatten()
}

/// Seconds left before the innermost call's deadline (for host functions' own timeouts).
#[pyfunction]
pub fn current_call_remaining() -> Option<f64> {
    with_top(|st| {
        st.deadline
            .map(|d| d.saturating_duration_since(Instant::now()).as_secs_f64())
    })
    .flatten()
}
