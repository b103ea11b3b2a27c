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
/// The call's operation budget ran out counting its script callbacks too, the CPU its thread
/// spent (`CPU_NANOS_PER_OPERATION`), or the stack it runs on (`stack::operations_for_room`).
pub const TOKEN_OPERATIONS: &str = "operations";
/// Nanoseconds of its thread's CPU time a call may spend per operation of its budget, unless the
/// engine says otherwise (`max_cpu_seconds`): one operation clones, size-checks or frees a whole
/// value, so a value nested 150 000 deep cost quadratic time in 450 000 operations. With this
/// bound the budget limits what a call's operations cost, not only their number. A plain
/// operation costs 20-100 ns, so only such whole-value work reaches it.
pub const CPU_NANOS_PER_OPERATION: u64 = 2_000;
/// Operations between two looks at the clocks (deadline, CPU charge) while operations are cheap.
const CHECK_EVERY: u64 = 256;
/// Operations before the first look, which starts the CPU clock: a call that ends sooner (most
/// region hooks) reads no clock (reading this thread's CPU time is a system call, ~0.5 us), and
/// what its first operations cost is bounded by the data-size limits.
const FIRST_LOOK: u64 = 16;
/// An operation costing more CPU than this on average since the last look makes every operation
/// looked at (each then costs far more than the look): a slow call overruns nothing by 256 of them.
const SLOW_OPERATION_NANOS: u64 = 4_000;

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
    /// The engine's budget, or less on a stack too small for it (`stack::operations_for_room`).
    max_operations: u64,
    /// The CPU time the call may spend (nested calls' excepted), in nanoseconds.
    max_cpu_nanos: u64,
    last_signal_check: Cell<u64>,
    /// The operation count at the last look at the clocks, and operations until the next one.
    last_check: Cell<u64>,
    stride: Cell<u64>,
    /// This thread's CPU time at the first look (0 before it) and at the last one, and what calls
    /// nested in its host functions spent (unrelated calls: not charged to this one).
    cpu_started: Cell<u64>,
    cpu_checked: Cell<u64>,
    cpu_nested: Cell<u64>,
    /// This thread's CPU time when a nested call started (0 for an outermost one).
    cpu_at_push: u64,
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
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            if let Some(ended) = s.pop() {
                if let Some(outer) = s.last() {
                    let spent = thread_cpu_nanos().saturating_sub(ended.cpu_at_push);
                    outer
                        .cpu_nested
                        .set(outer.cpu_nested.get().saturating_add(spent));
                }
            }
        });
    }
}

/// This thread's CPU time in nanoseconds (0 if the clock cannot be read).
fn thread_cpu_nanos() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-parameter.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut now) } != 0 {
        return 0;
    }
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
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
/// again as soon as the host function returns. `budget`: the call's operations (the engine's, or
/// fewer when the stack it runs on could not hold what the engine's allow it to build) and CPU.
pub fn push(
    engine: Arc<rhai::Engine>,
    script: &str,
    deadline: Option<Instant>,
    cancel: Option<Arc<AtomicBool>>,
    output_limit: usize,
    budget: (u64, u64),
) -> Result<CallGuard, &'static str> {
    let (max_operations, max_cpu_nanos) = budget;
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() >= MAX_REENTRANCY {
            return Err("script calls nested inside host functions deeper than 4 levels");
        }
        let check_signals = MAIN_THREAD.get() == Some(&std::thread::current().id());
        let max_operations = max_operations.min(engine.max_operations());
        let cpu_at_push = if s.is_empty() { 0 } else { thread_cpu_nanos() };
        s.push(CallState {
            engine,
            script: script.to_string(),
            deadline,
            cancel,
            check_signals,
            operations: Cell::new(0),
            callback_operations: Cell::new(0),
            max_operations,
            max_cpu_nanos,
            last_signal_check: Cell::new(0),
            last_check: Cell::new(0),
            stride: Cell::new(FIRST_LOOK),
            cpu_started: Cell::new(0),
            cpu_checked: Cell::new(0),
            cpu_nested: Cell::new(0),
            cpu_at_push,
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

/// The engine's `on_progress` hook: per-call budget, deadline, cancel flag, CPU charge and signals.
pub fn on_progress(ops: u64) -> Option<Dynamic> {
    with_top(|st| {
        st.operations.set(ops);
        if st.cancelled() {
            return Some(Dynamic::from(TOKEN_CANCELLED));
        }
        if ops.saturating_add(st.callback_operations.get()) > st.max_operations {
            return Some(Dynamic::from(TOKEN_OPERATIONS));
        }
        if ops.wrapping_sub(st.last_check.get()) < st.stride.get() {
            return None;
        }
        st.look_at_clocks(ops)
    })
    .flatten()
}

impl CallState {
    /// Every `stride` operations: the deadline, the CPU charge, and signals on the main thread.
    fn look_at_clocks(&self, ops: u64) -> Option<Dynamic> {
        let since = ops.wrapping_sub(self.last_check.get()).max(1);
        self.last_check.set(ops);
        if let Some(d) = self.deadline {
            if Instant::now() >= d {
                return Some(Dynamic::from(TOKEN_DEADLINE));
            }
        }
        let cpu = thread_cpu_nanos();
        if self.cpu_started.get() == 0 {
            self.cpu_started.set(cpu);
        }
        let stretch = cpu.saturating_sub(self.cpu_checked.get());
        let slow = self.cpu_checked.get() != 0 && stretch / since > SLOW_OPERATION_NANOS;
        self.cpu_checked.set(cpu);
        self.stride.set(if slow { 1 } else { CHECK_EVERY });
        let charged = cpu
            .saturating_sub(self.cpu_started.get())
            .saturating_sub(self.cpu_nested.get());
        if charged > self.max_cpu_nanos {
            return Some(Dynamic::from(TOKEN_OPERATIONS));
        }
        if self.check_signals && ops.wrapping_sub(self.last_signal_check.get()) >= 1 << 16 {
            self.last_signal_check.set(ops);
            #[allow(clippy::redundant_closure_for_method_calls)]
            // the method form does not type-check
            if let Err(e) = Python::attach(|py| py.check_signals()) {
                *self.pending.borrow_mut() = Some(e);
                return Some(Dynamic::from(TOKEN_SIGNAL));
            }
        }
        None
    }
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
