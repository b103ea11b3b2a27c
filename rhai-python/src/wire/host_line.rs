//! `HostLine`: a provider call's brokered host calls (`http_get`, `http_post`, `env_var`) from the
//! script's arguments to its `HOST_CALL` frame, and from the `HOST_REPLY` frame back to the script's
//! value, without Python on the script thread's side of the wait.
//!
//! A provider call running on one of the worker's script threads used to wait for its reply in
//! Python: the loop thread read the `HOST_REPLY` into Python objects and put it on the call's queue,
//! and the script thread, woken, took the GIL from the loop thread to turn the value back into
//! Rhai. Now the script thread writes its `HOST_CALL` frame from Rhai values (`msgpack.rs`, byte for
//! byte what `proto` writes), sends it through the worker's socket, and waits on this
//! line's slot with the GIL released; the loop thread's `Lane` reads the `HOST_REPLY` frame straight
//! into Rhai values and fills the slot (`Lane::route_reply`), one wake-up of the waiting thread
//! and no Python object on the way.
//!
//! What this line does not write or read exactly as `proto` from Rhai values (a value the wire
//! flattens or refuses, a reply body the lane would not read plainly) goes through the worker's
//! `Codec` from its Python form (the worker's `fallback` and `deliver`), so both ends stay
//! `proto`'s. A line with `wait`
//! set is the call the worker's loop thread runs itself: it keeps serving the socket while it
//! waits, so its replies come through `wait` (Python), as before.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rhai::{Dynamic, EvalAltResult, NativeCallContext, Position};

use super::msgpack::{Caps, Writer};
use super::socket::Wire;
use crate::{context, convert, host};

/// The reply a native wait is for, once it came; `pending` is the host call waited for (0: none).
#[derive(Default)]
struct Slot {
    pending: u64,
    reply: Option<(bool, Dynamic)>,
    cancelled: bool,
}

/// One provider call's host calls; see the module documentation.
#[pyclass(frozen, module = "rhai")]
pub struct HostLine {
    id: i64,
    header: Vec<u8>,
    max_body: usize,
    caps: Caps,
    hids: AtomicU64,
    slot: Mutex<Slot>,
    ready: Condvar,
    wire: Py<Wire>,
    fallback: Py<PyAny>,
    fail: Py<PyAny>,
    wait: Option<Py<PyAny>>,
}

thread_local! {
    /// The line the brokered functions called on this thread use (`bind_line`).
    static CURRENT: RefCell<Option<Arc<Py<HostLine>>>> = const { RefCell::new(None) };
}

impl HostLine {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `id` of the call this line serves.
    pub fn call_id(&self) -> i64 {
        self.id
    }

    /// Whether a native wait is for host call `hid` now.
    pub fn waits_for(&self, hid: i64) -> bool {
        u64::try_from(hid).is_ok_and(|hid| hid != 0 && self.slot().pending == hid)
    }

    /// Hand the waiting thread the reply to host call `hid`; `false` if nobody waits for it.
    pub fn fill(&self, hid: i64, ok: bool, value: Dynamic) -> bool {
        let mut slot = self.slot();
        if !u64::try_from(hid).is_ok_and(|hid| hid != 0 && slot.pending == hid) {
            return false;
        }
        slot.reply = Some((ok, value));
        drop(slot);
        self.ready.notify_one();
        true
    }

    /// The `HOST_CALL` frame for `args`, or `None` for the worker's `Codec` to write (from Python values).
    fn frame(&self, hid: u64, name: &str, args: &[&mut Dynamic]) -> Option<Vec<u8>> {
        if args.len() > self.caps.container {
            return None;
        }
        let mut w = Writer::new(Vec::with_capacity(256), self.caps);
        w.out.extend_from_slice(&self.header);
        w.map_header(4);
        w.str("id");
        w.int(self.id);
        w.str("hid");
        w.int(i64::try_from(hid).ok()?);
        w.str("name");
        w.str(name);
        w.str("args");
        w.array_header(args.len());
        // The body is level 1, `args` level 2: each argument starts at level 3.
        if !args.iter().all(|a| w.value(a, 3)) {
            return None;
        }
        (w.out.len() - self.header.len() <= self.max_body).then_some(w.out)
    }

    /// Send the `HOST_CALL` of host call `hid`: the frame from Rhai values (no GIL), or the `Codec`'s.
    fn send_call(
        &self,
        ctx: &NativeCallContext,
        hid: u64,
        name: &str,
        args: &mut [&mut Dynamic],
    ) -> Result<(), Box<EvalAltResult>> {
        if let Some(frame) = self.frame(hid, name, args) {
            self.wire.get().send_frame(frame, false);
            return Ok(());
        }
        Python::attach(|py| {
            let (args, alive) = host::args_to_python(py, ctx, args)?;
            let sent = self.fallback.bind(py).call1((hid, name, args));
            alive.store(false, Ordering::SeqCst);
            sent.map(drop).map_err(|e| host::pyerr_to_engine(py, e))
        })
    }

    /// The reply to host call `hid`, waited for with the GIL released until the call's deadline.
    fn wait_native(&self) -> Result<(bool, Dynamic), &'static str> {
        let deadline = context::with_top(|st| st.deadline).flatten();
        let mut slot = self.slot();
        loop {
            if slot.cancelled {
                return Err("cancel");
            }
            if let Some(reply) = slot.reply.take() {
                return Ok(reply);
            }
            slot = match deadline {
                None => self
                    .ready
                    .wait(slot)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err("deadline");
                    }
                    self.ready
                        .wait_timeout(slot, left)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// One brokered host call made by the script; see the module documentation.
    fn call(
        &self,
        ctx: &NativeCallContext,
        name: &str,
        args: &mut [&mut Dynamic],
    ) -> Result<Dynamic, Box<EvalAltResult>> {
        let hid = self.hids.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(wait) = &self.wait {
            // The loop thread's own call: it serves the socket until the reply (Python's `wait`).
            self.send_call(ctx, hid, name, args)?;
            return Python::attach(|py| {
                let reply = wait
                    .bind(py)
                    .call1((hid,))
                    .and_then(|r| r.extract::<(bool, Bound<'_, PyAny>)>())
                    .map_err(|e| host::pyerr_to_engine(py, e))?;
                let value = convert::to_dynamic(&reply.1)
                    .map_err(|e| host::pyerr_to_engine(py, e.into_pyerr("host reply")))?;
                Ok((reply.0, value))
            })
            .and_then(|(ok, value)| ended(ok, value));
        }
        {
            let mut slot = self.slot();
            slot.pending = hid; // before the HOST_CALL leaves: its reply may come at once
            slot.reply = None;
        }
        let sent = self.send_call(ctx, hid, name, args);
        let waited = sent.and_then(|()| {
            self.wait_native().or_else(|reason| {
                Python::attach(|py| {
                    let err = match self.fail.bind(py).call1((reason,)) {
                        Err(e) => e,
                        Ok(_) => PyValueError::new_err("fail() must raise"),
                    };
                    Err(host::pyerr_to_engine(py, err))
                })
            })
        });
        self.slot().pending = 0;
        let (ok, value) = waited?;
        ended(ok, value)
    }
}

/// The script's value of a reply: its value, or (not `ok`) the value thrown into the script.
fn ended(ok: bool, value: Dynamic) -> Result<Dynamic, Box<EvalAltResult>> {
    if ok {
        Ok(value)
    } else {
        Err(Box::new(EvalAltResult::ErrorRuntime(value, Position::NONE)))
    }
}

/// The brokered function `name` as the engine's, at every parameter-type signature given.
pub fn register(engine: &mut rhai::Engine, name: &str, signatures: &[Vec<std::any::TypeId>]) {
    for types in signatures {
        let name = name.to_string();
        engine.register_raw_fn(
            name.clone(),
            types.clone(),
            move |ctx: NativeCallContext, args: &mut [&mut Dynamic]| {
                let line = CURRENT.with(|c| c.borrow().clone());
                let Some(line) = line else {
                    return Err(Box::new(EvalAltResult::ErrorRuntime(
                        "provider host channel closed".into(),
                        Position::NONE,
                    )));
                };
                let result = line.get().call(&ctx, &name, args);
                // Host functions run outside `on_progress`: re-check the deadline at once.
                if let Some(reason) = context::with_top(context::CallState::stop_reason).flatten() {
                    return Err(Box::new(EvalAltResult::ErrorTerminated(
                        Dynamic::from(reason),
                        ctx.call_position(),
                    )));
                }
                result
            },
        );
    }
}

#[pymethods]
impl HostLine {
    /// A line for call `id`, sending on `wire`; `fallback(hid, name, args)` sends a
    /// `HOST_CALL` through the worker's `Codec` (raising `rhai.Throw` for a value with no wire form);
    /// `fail(reason)` raises the exception a wait ends in ("deadline", "cancel"); `wait(hid)`,
    /// for the call the loop thread runs itself, serves until the reply and returns `(ok, value)`.
    #[new]
    #[pyo3(signature = (id, *, header, max_body, max_container, max_depth, wire, fallback, fail, wait=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        id: i64,
        header: Vec<u8>,
        max_body: usize,
        max_container: usize,
        max_depth: usize,
        wire: Py<Wire>,
        fallback: Py<PyAny>,
        fail: Py<PyAny>,
        wait: Option<Py<PyAny>>,
    ) -> Self {
        Self {
            id,
            header,
            max_body,
            caps: Caps {
                container: max_container,
                depth: max_depth,
            },
            hids: AtomicU64::new(0),
            slot: Mutex::new(Slot::default()),
            ready: Condvar::new(),
            wire,
            fallback,
            fail,
            wait,
        }
    }

    #[getter]
    fn id(&self) -> i64 {
        self.id
    }

    /// Host calls made so far (native and the worker's streams share one count).
    #[getter]
    fn host_calls(&self) -> u64 {
        self.hids.load(Ordering::SeqCst)
    }

    /// The next host call's id (for a host call the worker's Python makes: a stream).
    fn next_hid(&self) -> u64 {
        self.hids.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The host call a native wait is for now (0: none).
    #[getter]
    fn pending(&self) -> u64 {
        self.slot().pending
    }

    /// Hand the waiting thread a reply the worker's `Codec` read; `False` if nobody waits for it.
    fn deliver(&self, hid: i64, ok: bool, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        if !self.waits_for(hid) {
            return Ok(false);
        }
        let value = convert::to_dynamic(value).map_err(|e| e.into_pyerr("host reply"))?;
        Ok(self.fill(hid, ok, value))
    }

    /// End a native wait (now or when it starts) in `fail("cancel")`.
    fn cancel(&self) {
        self.slot().cancelled = true;
        self.ready.notify_all();
    }
}

/// Make `line` the one the brokered functions called on this thread use; returns the previous.
#[pyfunction]
pub fn bind_line(py: Python<'_>, line: Option<Py<HostLine>>) -> Option<Py<HostLine>> {
    let previous = CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), line.map(Arc::new)));
    previous.map(|l| l.clone_ref(py))
}

/// Lines by call id, for the loop thread's `Lane` to fill.
#[derive(Default)]
pub struct Lines(Mutex<std::collections::HashMap<i64, Arc<Py<HostLine>>>>);

impl Lines {
    fn map(&self) -> MutexGuard<'_, std::collections::HashMap<i64, Arc<Py<HostLine>>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn open(&self, line: Py<HostLine>) {
        let id = line.get().call_id();
        self.map().insert(id, Arc::new(line));
    }

    pub fn close(&self, id: i64) {
        self.map().remove(&id);
    }

    pub fn get(&self, id: i64) -> Option<Arc<Py<HostLine>>> {
        self.map().get(&id).cloned()
    }
}
