//! `Wire`: the worker's DEALER socket driven natively, so the loop thread's receive path and a
//! script thread's sends need no GIL.
//!
//! The socket is pyzmq's (it makes, configures, connects and closes it); this drives it through
//! the libzmq pyzmq itself is linked with (a socket works only with the library that made it), its
//! functions looked up in the already loaded extension (`dlopen` with `RTLD_NOLOAD`: no file is
//! opened). zmq sockets are not thread-safe, but one may change threads behind a full memory
//! barrier (a lock): every send and receive holds `lock`. Sends never wait for it: frames join a
//! FIFO, and whoever holds the lock sends everything queued, then looks again after releasing it.
//! The socket's FD is edge-triggered: a send may consume the edge announcing input, so a send from
//! a thread other than the loop thread that leaves input pending writes `wake` (an eventfd) to
//! wake the loop; the loop thread's own sends need no check, as `wait` receives before it polls.
//!
//! The loop thread waits here (`wait`, the GIL released) and receives here (`drain`): a
//! `HOST_REPLY` a script thread waits for is handed to it by the worker's `Lane` at once, so a
//! reply wakes only the thread it is for, and no Python runs on its way; every other message goes
//! to the worker's Python, in order.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::lane::Lane;

const ZMQ_EVENTS: c_int = 15;
const ZMQ_POLLIN: c_int = 1;
const ZMQ_DONTWAIT: c_int = 1;
const EAGAIN: c_int = 11;
const EINTR: c_int = 4;

/// `zmq_msg_t`: 64 opaque bytes, pointer-aligned.
#[repr(C, align(8))]
struct Msg([u8; 64]);

/// The libzmq functions used, from pyzmq's own copy.
struct Api {
    send: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int,
    msg_init: unsafe extern "C" fn(*mut Msg) -> c_int,
    msg_recv: unsafe extern "C" fn(*mut Msg, *mut c_void, c_int) -> c_int,
    msg_data: unsafe extern "C" fn(*mut Msg) -> *mut c_void,
    msg_size: unsafe extern "C" fn(*const Msg) -> usize,
    msg_more: unsafe extern "C" fn(*const Msg) -> c_int,
    msg_close: unsafe extern "C" fn(*mut Msg) -> c_int,
    getsockopt: unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, *mut usize) -> c_int,
    errno: unsafe extern "C" fn() -> c_int,
    strerror: unsafe extern "C" fn(c_int) -> *const c_char,
}

/// `name` in the library `handle` or its dependencies, as a function pointer of type `T`.
///
/// # Safety
/// `T` must be the C signature of `name`.
unsafe fn symbol<T: Copy>(handle: *mut c_void, name: &CStr) -> PyResult<T> {
    // SAFETY: `handle` came from `dlopen`; `name` is NUL-terminated.
    let found = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if found.is_null() {
        return Err(PyOSError::new_err(format!("libzmq has no {name:?}")));
    }
    // SAFETY: the caller names `T` as the symbol's signature; a function pointer is pointer-sized.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&found) })
}

impl Api {
    fn load(library: &str) -> PyResult<Self> {
        let path = CString::new(library).map_err(|e| PyOSError::new_err(e.to_string()))?;
        // SAFETY: a NUL-terminated path; RTLD_NOLOAD only finds a library already loaded.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return Err(PyOSError::new_err(format!("{library} is not loaded")));
        }
        // SAFETY: each type below is the libzmq 4 signature of the function named.
        unsafe {
            Ok(Self {
                send: symbol(handle, c"zmq_send")?,
                msg_init: symbol(handle, c"zmq_msg_init")?,
                msg_recv: symbol(handle, c"zmq_msg_recv")?,
                msg_data: symbol(handle, c"zmq_msg_data")?,
                msg_size: symbol(handle, c"zmq_msg_size")?,
                msg_more: symbol(handle, c"zmq_msg_more")?,
                msg_close: symbol(handle, c"zmq_msg_close")?,
                getsockopt: symbol(handle, c"zmq_getsockopt")?,
                errno: symbol(handle, c"zmq_errno")?,
                strerror: symbol(handle, c"zmq_strerror")?,
            })
        }
    }

    fn error(&self) -> (c_int, String) {
        // SAFETY: libzmq's own errno and its static message for it.
        unsafe {
            let code = (self.errno)();
            let text = CStr::from_ptr((self.strerror)(code));
            (code, text.to_string_lossy().into_owned())
        }
    }
}

/// The worker's socket; see the module documentation.
#[pyclass(frozen, module = "rhai")]
pub struct Wire {
    api: Api,
    sock: AtomicPtr<c_void>,
    fd: c_int,
    wake: c_int,
    queue: Mutex<VecDeque<Vec<u8>>>,
    lock: Mutex<()>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One message received: its frames.
type Message = Vec<Vec<u8>>;

impl Wire {
    /// Send `frame` from any thread, in order; a failure is logged (deadlines cover a lost message).
    /// `loop_thread`: the loop thread receives again before it next waits (`wait` receives first),
    /// so no edge check.
    pub fn send_frame(&self, frame: Vec<u8>, loop_thread: bool) {
        locked(&self.queue).push_back(frame);
        self.flush(loop_thread);
    }

    fn flush(&self, loop_thread: bool) {
        while !locked(&self.queue).is_empty() {
            let Ok(guard) = self.lock.try_lock() else {
                return; // the holder sends what we queued
            };
            self.send_queued(loop_thread);
            drop(guard);
        }
    }

    /// (Holding `lock`) send everything queued.
    fn send_queued(&self, loop_thread: bool) {
        let sock = self.sock.load(Ordering::Acquire);
        if sock.is_null() {
            locked(&self.queue).clear(); // closed: a straggler's message has nowhere to go
            return;
        }
        loop {
            let Some(frame) = locked(&self.queue).pop_front() else {
                break;
            };
            loop {
                // SAFETY: a live socket, used only while `lock` is held; the buffer outlives the call.
                let rc = unsafe { (self.api.send)(sock, frame.as_ptr().cast(), frame.len(), 0) };
                if rc >= 0 {
                    break;
                }
                let (code, text) = self.api.error();
                if code != EINTR {
                    eprintln!("rhaipool worker: send failed: {text}");
                    break;
                }
            }
        }
        if !loop_thread && self.events(sock) & ZMQ_POLLIN != 0 {
            self.signal();
        }
    }

    fn events(&self, sock: *mut c_void) -> c_int {
        let mut events: c_int = 0;
        let mut size = std::mem::size_of::<c_int>();
        // SAFETY: a live socket under `lock`; `events` and `size` are valid out-parameters.
        let rc = unsafe {
            (self.api.getsockopt)(sock, ZMQ_EVENTS, (&raw mut events).cast(), &raw mut size)
        };
        if rc == 0 {
            events
        } else {
            0
        }
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes to our own eventfd.
        unsafe { libc::write(self.wake, (&raw const one).cast(), 8) };
    }

    fn clear_wake(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes from our own non-blocking eventfd.
        unsafe { libc::read(self.wake, (&raw mut count).cast(), 8) };
    }

    /// One message if one is pending (`None`: nothing pending, or a receive failed: logged).
    fn recv_one(&self, sock: *mut c_void) -> Option<Message> {
        if self.events(sock) & ZMQ_POLLIN == 0 {
            return None;
        }
        let mut frames = Vec::with_capacity(1);
        loop {
            let mut msg = Msg([0; 64]);
            // SAFETY: `msg` is a zmq_msg_t initialised here and closed below.
            unsafe { (self.api.msg_init)(&raw mut msg) };
            // SAFETY: a live socket under `lock`; `msg` initialised.
            let rc = unsafe { (self.api.msg_recv)(&raw mut msg, sock, ZMQ_DONTWAIT) };
            if rc < 0 {
                let (code, text) = self.api.error();
                // SAFETY: closing the message initialised above.
                unsafe { (self.api.msg_close)(&raw mut msg) };
                if code == EINTR {
                    continue;
                }
                if code != EAGAIN {
                    eprintln!("rhaipool worker: receive failed: {text}");
                }
                return None;
            }
            // SAFETY: `msg` holds a received frame of `msg_size` bytes at `msg_data`.
            let frame = unsafe {
                let data = (self.api.msg_data)(&raw mut msg).cast::<u8>();
                let size = (self.api.msg_size)(&raw const msg);
                std::slice::from_raw_parts(data, size).to_vec()
            };
            // SAFETY: as above; the frame was copied out first.
            let more = unsafe { (self.api.msg_more)(&raw const msg) } != 0;
            unsafe { (self.api.msg_close)(&raw mut msg) };
            frames.push(frame);
            if !more {
                return Some(frames);
            }
        }
    }

    /// Every message pending now, the replies `lane` routes to their threads taken out.
    fn drain_into(&self, lane: &Lane, out: &mut Vec<Message>) {
        {
            let _guard = locked(&self.lock);
            let sock = self.sock.load(Ordering::Acquire);
            if sock.is_null() {
                return;
            }
            while let Some(message) = self.recv_one(sock) {
                if message.len() == 1 && lane.route(&message[0]) {
                    continue;
                }
                out.push(message);
            }
        }
        // What script threads queued meanwhile; it may precede our wait: check the edge.
        self.flush(false);
    }

    /// Wait until the socket or `wake` is readable, at most `timeout`.
    fn poll(&self, timeout: Duration) {
        let mut fds = [
            libc::pollfd {
                fd: self.fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
        // SAFETY: two valid pollfd entries.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n > 0 && fds[1].revents != 0 {
            self.clear_wake(); // only then: reading an unset eventfd costs a syscall
        }
    }
}

fn to_python(py: Python<'_>, messages: Vec<Message>) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    for frames in messages {
        let frames: Vec<Bound<'_, PyBytes>> = frames.iter().map(|f| PyBytes::new(py, f)).collect();
        out.append(PyList::new(py, frames)?)?;
    }
    Ok(out)
}

impl Drop for Wire {
    fn drop(&mut self) {
        // SAFETY: our own eventfd, closed once.
        unsafe { libc::close(self.wake) };
    }
}

#[pymethods]
impl Wire {
    /// Drive the zmq socket at address `socket` (pyzmq's `Socket.underlying`), whose FD is `fd`
    /// (`Socket.FD`), with the libzmq the extension module at `library` is linked with.
    #[new]
    #[pyo3(signature = (socket, *, fd, library))]
    fn new(socket: usize, fd: c_int, library: &str) -> PyResult<Self> {
        let api = Api::load(library)?;
        // SAFETY: creating a fresh eventfd.
        let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if wake < 0 {
            return Err(PyOSError::new_err("eventfd failed"));
        }
        Ok(Self {
            api,
            sock: AtomicPtr::new(socket as *mut c_void),
            fd,
            wake,
            queue: Mutex::new(VecDeque::new()),
            lock: Mutex::new(()),
        })
    }

    /// Send `frames` (one message of one frame) from any thread; see the module documentation.
    #[pyo3(signature = (frames, *, loop_thread=false))]
    fn send(&self, py: Python<'_>, frames: Vec<Vec<u8>>, loop_thread: bool) {
        py.detach(|| {
            for frame in frames {
                self.send_frame(frame, loop_thread);
            }
        });
    }

    /// (Loop thread) every message pending now, the replies `lane` routes taken out.
    fn drain<'py>(&self, py: Python<'py>, lane: &Bound<'py, Lane>) -> PyResult<Bound<'py, PyList>> {
        let lane = lane.get();
        let mut out = Vec::new();
        py.detach(|| self.drain_into(lane, &mut out));
        to_python(py, out)
    }

    /// (Loop thread) wait up to `timeout` seconds for messages for Python, the GIL released:
    /// the replies `lane` routes are handed on meanwhile. Returns them (empty at the timeout).
    ///
    /// It receives before it first polls: a message that arrived after the loop thread's last
    /// receive, before one of its own sends (a RESULT), had its edge consumed by that send, and
    /// polling first would leave it unseen until the timeout.
    fn wait<'py>(
        &self,
        py: Python<'py>,
        lane: &Bound<'py, Lane>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyList>> {
        let lane = lane.get();
        let until = Instant::now() + Duration::from_secs_f64(timeout.clamp(0.0, 1e6));
        let mut out = Vec::new();
        py.detach(|| loop {
            self.drain_into(lane, &mut out);
            if !out.is_empty() || Instant::now() >= until {
                break;
            }
            let left = until.saturating_duration_since(Instant::now());
            // +1 ms: never spin on a sub-millisecond remainder
            self.poll(left + Duration::from_millis(1));
        });
        to_python(py, out)
    }

    /// Send what is queued, then stop using the socket (the caller closes it).
    fn close(&self, py: Python<'_>) {
        py.detach(|| {
            let _guard = locked(&self.lock);
            self.send_queued(true);
            self.sock.store(std::ptr::null_mut(), Ordering::Release);
        });
    }
}
