//! `Lane`: a worker's plain region call from its CALL frame to its RESULT frame in one native step.
//! (Long because the CALL reader's checks must refuse exactly what the Python reader refuses, field by
//! field, before anything runs; they are kept in the order `proto.calls.Call.from_body` reads them.)
//!
//! rhaipool's worker reads a CALL, converts its arguments to Rhai, runs the hook, converts the
//! value back, and writes a RESULT. In Python that was ~8 µs of every call around a trivial
//! hook's ~1 µs. The lane does the same work straight from msgpack to Rhai values and back
//! (`msgpack.rs`), with the GIL released while the script runs, and hands the worker the frame
//! to send.
//!
//! It takes only what it can do exactly as the worker's Python logic would with the frame read by
//! the worker's `Codec`, and says so before running anything: a plainly valid CALL of a region
//! script it holds (its source, if sent, ignored as the worker ignores it). A render's `resident`
//! delta is applied to the worker's `ResidentLists` (`resident.rs`), the store the worker's Python
//! logic uses too, before the hook runs, as there. For anything else `run` returns `None` and the
//! worker reads the frame with its `Codec` (which names any defect). After the script ran, a value
//! the lane's writer would not write exactly as `proto` (one the wire refuses or flattens) is
//! written by the `Codec` from its Python form, and a failure comes back as the exception
//! `Script.call` would raise. The frame layout (signature, command bytes, caps) comes from the
//! caller, `proto` being the one definition of the wire; rhaipool's tests check that the lane's
//! frames are byte for byte `proto`'s.
//!
//! The lane also reads the `HOST_REPLY` frames the worker's `Wire` receives (`route`): one a
//! provider call on a script thread waits for (`HostLine`, `open_line`) goes to that thread's slot
//! as Rhai values; any other is left to the worker's `Codec`.
//!
//! Past 400 lines because the CALL reader (every field, and the resident map, checked as the Python
//! path checks them) and the RESULT writer frame the one call they serve; apart, each would repeat
//! the other's field list.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList};
use rhai::{Dynamic, Map};

use super::codec::{peak_rss_bytes, Codec};
use super::host_line::{HostLine, Lines};
use super::msgpack::{Caps, Reader, Scalar, Writer};
use super::resident::{ResidentLists, Update};
use crate::script::Script;
use crate::{context, convert};

struct Held {
    script: Py<Script>,
    used: AtomicU64,
}

/// The fields of a CALL the lane runs.
struct Call<'a> {
    id: i64,
    fn_name: &'a str,
    sha: &'a str,
    tenant: &'a str,
    args: Vec<Dynamic>,
    timeout: Option<f64>,
    resident: Option<Resident<'a>>,
}

/// A CALL's `resident` map: the update to its list, and the items it adds with their sizes.
struct Resident<'a> {
    key: &'a str,
    version: i64,
    base: Option<i64>,
    drop: Vec<i64>,
    entries: Vec<Dynamic>,
    sizes: Vec<usize>,
}

/// A worker's native path for plain region calls; see the module documentation.
#[pyclass(frozen, module = "rhai")]
pub struct Lane {
    call_header: Vec<u8>,
    result_header: Vec<u8>,
    max_id: i64,
    max_body: usize,
    max_resident_key: usize,
    caps: Caps,
    resident: Option<Py<ResidentLists>>,
    reply_header: Option<Vec<u8>>,
    codec: Py<Codec>,
    lines: Lines,
    scripts: Mutex<HashMap<String, Held>>,
    tick: AtomicU64,
    synced: AtomicU64,
}

fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    #[allow(clippy::cast_precision_loss)]
    let seconds = ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
    seconds
}

/// The list a resident CALL's hook gets, updated; `None` when its base is not held.
fn resident_list(lists: &ResidentLists, tenant: &str, r: Resident<'_>) -> Option<rhai::Array> {
    let update = Update {
        tenant,
        key: r.key,
        version: r.version,
        base: r.base,
        drop: &r.drop,
    };
    let added = move || Ok::<_, Infallible>((r.entries, r.sizes));
    lists
        .update(&update, added)
        .unwrap_or_else(|never| match never {})
}

/// What a call the lane ran ends in.
enum Ended {
    Frame(Vec<u8>),
    Failed(PyErr),
}

impl Lane {
    /// Whether `frame` is a `HOST_REPLY` handed here to the script thread waiting for it
    /// (`HostLine`); `false` leaves it to the worker's `Codec`.
    pub fn route(&self, frame: &[u8]) -> bool {
        self.reply_header
            .as_deref()
            .and_then(|h| frame.strip_prefix(h))
            .is_some_and(|body| self.route_reply(body))
    }

    /// Fill the slot of the script thread waiting for the `HOST_REPLY` in `body`, if one waits for
    /// it and the body is plainly valid (`proto.host.HostReply.from_body`'s checks); `false`
    /// leaves the frame to the worker's `Codec`.
    fn route_reply(&self, body: &[u8]) -> bool {
        let mut r = Reader::new(body, self.caps);
        let (mut id, mut hid, mut ok, mut value) = (None, None, None, None);
        let Some(n) = r.map_len() else {
            return false;
        };
        for _ in 0..n {
            let Some(Scalar::Str(key)) = r.scalar() else {
                return false;
            };
            let seen = if key == "value" {
                let Some(v) = r.value(1) else {
                    return false;
                };
                value.replace(v).is_some()
            } else {
                match (key, r.scalar()) {
                    ("id", Some(Scalar::Int(i))) if (0..=self.max_id).contains(&i) => {
                        id.replace(i).is_some()
                    }
                    ("hid", Some(Scalar::Int(h))) if (1..=self.max_id).contains(&h) => {
                        hid.replace(h).is_some()
                    }
                    ("ok", Some(Scalar::Bool(b))) => ok.replace(b).is_some(),
                    _ => return false,
                }
            };
            if seen {
                return false;
            }
        }
        let (Some(id), Some(hid), Some(ok), Some(value)) = (id, hid, ok, value) else {
            return false;
        };
        if !r.at_end() {
            return false;
        }
        self.lines
            .get(id)
            .is_some_and(|line| line.get().fill(hid, ok, value))
    }

    /// The CALL's fields, if the lane can run it exactly as the worker's Python logic would.
    fn read_call<'a>(&self, frame: &'a [u8]) -> Option<Call<'a>> {
        let body = frame.strip_prefix(self.call_header.as_slice())?;
        let mut r = Reader::new(body, self.caps);
        let (mut id, mut op, mut kind, mut sha, mut fn_name) = (None, None, None, None, None);
        let (mut args, mut timeout, mut window) = (None, None, None);
        let (mut tenant, mut resident, mut name, mut source) = (None, None, false, false);
        for _ in 0..r.map_len()? {
            let Scalar::Str(key) = r.scalar()? else {
                return None;
            };
            let seen = match key {
                "args" => {
                    let n = r.array_header()?;
                    let mut values = Vec::with_capacity(n.min(64));
                    for _ in 0..n {
                        values.push(r.value(1)?);
                    }
                    args.replace(values).is_some()
                }
                "timeout" => match r.scalar()? {
                    Scalar::Nil => timeout.replace(None).is_some(),
                    Scalar::Float(t) if t > 0.0 => timeout.replace(Some(t)).is_some(),
                    _ => return None,
                },
                "resident" if r.nil() => false,
                "resident" => resident.replace(self.read_resident(&mut r)?).is_some(),
                // Ignored, as the worker ignores the source of a script it holds.
                "source" => match r.scalar()? {
                    Scalar::Nil | Scalar::Str(_) => std::mem::replace(&mut source, true),
                    _ => return None,
                },
                _ => match (key, r.scalar()?) {
                    ("id", Scalar::Int(i)) if (0..=self.max_id).contains(&i) => {
                        id.replace(i).is_some()
                    }
                    ("window", Scalar::Int(w)) if (1..=1024).contains(&w) => {
                        window.replace(w).is_some()
                    }
                    // Checked as they come (they precede `args`): a provider CALL costs no parse.
                    ("op", Scalar::Str("call")) => op.replace(()).is_some(),
                    ("kind", Scalar::Str("region")) => kind.replace(()).is_some(),
                    ("sha", Scalar::Str(s)) => sha.replace(s).is_some(),
                    ("fn", Scalar::Str(s)) => fn_name.replace(s).is_some(),
                    ("tenant", Scalar::Str(s)) => tenant.replace(s).is_some(),
                    ("name", Scalar::Str(_)) => std::mem::replace(&mut name, true),
                    _ => return None,
                },
            };
            if seen {
                return None; // a repeated key, or a field the lane leaves to the worker's `Codec`
            }
        }
        if !(r.at_end() && name && source && window.is_some() && op.is_some() && kind.is_some()) {
            return None;
        }
        let args = args?;
        if resident.is_some() && !args.first().is_some_and(Dynamic::is_map) {
            return None;
        }
        Some(Call {
            id: id?,
            fn_name: fn_name?,
            sha: sha?,
            tenant: tenant?,
            args,
            timeout: timeout?,
            resident,
        })
    }

    /// A `resident` map the lane can apply exactly as the worker's Python logic does (a store is set, every
    /// field plainly valid), with each added item's size: its bytes in the frame.
    fn read_resident<'a>(&self, r: &mut Reader<'a>) -> Option<Resident<'a>> {
        self.resident.as_ref()?;
        let (mut key, mut version, mut base, mut drop, mut entries) =
            (None, None, None, None, None);
        for _ in 0..r.map_len()? {
            let Scalar::Str(field) = r.scalar()? else {
                return None;
            };
            let seen = match field {
                "drop" => {
                    let n = r.array_header()?;
                    let mut indices = Vec::with_capacity(n.min(1024));
                    for _ in 0..n {
                        let Scalar::Int(i) = r.scalar()? else {
                            return None;
                        };
                        indices.push(i);
                    }
                    drop.replace(indices).is_some()
                }
                "entries" => {
                    let n = r.array_header()?;
                    let (mut items, mut sizes) = (Vec::with_capacity(n.min(4096)), Vec::new());
                    for _ in 0..n {
                        let start = r.pos();
                        items.push(r.value(1)?);
                        sizes.push(r.pos() - start);
                    }
                    entries.replace((items, sizes)).is_some()
                }
                _ => match (field, r.scalar()?) {
                    ("key", Scalar::Str(s)) => key.replace(s).is_some(),
                    ("version", Scalar::Int(v)) if (0..=self.max_id).contains(&v) => {
                        version.replace(v).is_some()
                    }
                    ("base", Scalar::Nil) => base.replace(None).is_some(),
                    ("base", Scalar::Int(b)) if (0..=self.max_id).contains(&b) => {
                        base.replace(Some(b)).is_some()
                    }
                    _ => return None,
                },
            };
            if seen {
                return None;
            }
        }
        let (key, base, drop, (entries, sizes)) = (key?, base?, drop?, entries?);
        let ascending = drop.first().is_none_or(|&first| first >= 0)
            && drop.windows(2).all(|pair| pair[0] < pair[1]);
        let key_len = key.chars().count();
        if !ascending
            || (base.is_none() && !drop.is_empty())
            || !(16..=self.max_resident_key).contains(&key_len)
        {
            return None;
        }
        Some(Resident {
            key,
            version: version?,
            base,
            drop,
            entries,
            sizes,
        })
    }

    fn script_for(&self, py: Python<'_>, sha: &str) -> Option<Py<Script>> {
        let scripts = self.scripts.lock().ok()?;
        let held = scripts.get(sha)?;
        held.used.store(
            self.tick.fetch_add(1, Ordering::Relaxed) + 1,
            Ordering::Relaxed,
        );
        Some(held.script.clone_ref(py))
    }

    /// The RESULT frame from Rhai values, or `None` when a part of it is for the `Codec` to write.
    fn result_frame(
        &self,
        id: i64,
        value: &Dynamic,
        (wall, cpu, ops): (f64, f64, u64),
        output: &[String],
    ) -> Option<Vec<u8>> {
        if output.len() > self.caps.container {
            return None;
        }
        let mut w = Writer::new(Vec::with_capacity(128), self.caps);
        w.out.extend_from_slice(&self.result_header);
        w.map_header(7);
        w.str("id");
        w.int(id);
        w.str("value");
        if !w.value(value, 2) {
            return None;
        }
        w.str("wall");
        w.float(wall);
        w.str("cpu");
        w.float(cpu);
        w.str("peak_rss");
        w.int(peak_rss_bytes());
        w.str("ops");
        w.int(i64::try_from(ops).ok()?);
        w.str("output");
        w.array_header(output.len());
        for line in output {
            w.str(line);
        }
        (w.out.len() - self.result_header.len() <= self.max_body).then_some(w.out)
    }

    fn finish(
        &self,
        py: Python<'_>,
        id: i64,
        result: PyResult<Dynamic>,
        report: context::CallReport,
        started: (Instant, f64),
    ) -> Ended {
        let value = match result {
            Ok(value) => value,
            Err(e) => return Ended::Failed(e),
        };
        let wall = started.0.elapsed().as_secs_f64();
        let cpu = thread_cpu_seconds() - started.1;
        let mut output = report.output;
        if report.truncated {
            output.push("[output truncated]".to_string());
        }
        if let Some(frame) = self.result_frame(id, &value, (wall, cpu, report.operations), &output)
        {
            return Ended::Frame(frame);
        }
        // A value the wire flattens or refuses: written from its Python form, as the codec writes
        // every RESULT it does not write from Rhai values.
        let value = match convert::owned_value_to_python(py, value, "result") {
            Ok(v) => v,
            Err(e) => return Ended::Failed(e),
        };
        let id = PyInt::new(py, id).into_any();
        let output = match PyList::new(py, output) {
            Ok(output) => output.into_any(),
            Err(e) => return Ended::Failed(e),
        };
        let figures = (wall, cpu, report.operations);
        Ended::Frame(
            self.codec
                .get()
                .result_frame(py, &id, &value, figures, &output),
        )
    }
}

#[pymethods]
impl Lane {
    #[new]
    #[pyo3(signature = (
        *, call_header, result_header, max_id, max_body, max_container, max_depth, codec,
        max_resident_key=128, resident=None, reply_header=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        call_header: Vec<u8>,
        result_header: Vec<u8>,
        max_id: i64,
        max_body: usize,
        max_container: usize,
        max_depth: usize,
        codec: Py<Codec>,
        max_resident_key: usize,
        resident: Option<Py<ResidentLists>>,
        reply_header: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        if call_header.is_empty() || result_header.is_empty() || max_id < 0 {
            return Err(PyValueError::new_err(
                "headers must not be empty and max_id must not be negative",
            ));
        }
        Ok(Self {
            call_header,
            result_header,
            max_id,
            max_body,
            max_resident_key,
            resident,
            reply_header,
            codec,
            lines: Lines::default(),
            caps: Caps {
                container: max_container,
                depth: max_depth,
            },
            scripts: Mutex::new(HashMap::new()),
            tick: AtomicU64::new(0),
            synced: AtomicU64::new(0),
        })
    }

    /// Serve calls of script `sha` (a region script) from now on.
    fn put(&self, sha: String, script: Py<Script>) {
        if let Ok(mut scripts) = self.scripts.lock() {
            let used = AtomicU64::new(self.tick.load(Ordering::Relaxed));
            scripts.insert(sha, Held { script, used });
        }
    }

    /// Stop serving calls of script `sha` (evicted from the worker's cache).
    fn discard(&self, sha: &str) {
        if let Ok(mut scripts) = self.scripts.lock() {
            scripts.remove(sha);
        }
    }

    /// The scripts the lane ran since the last `take_used`, least recently used first: the
    /// worker's cache replays them, so its least-recently-used order sees the lane's calls too.
    fn take_used(&self) -> Vec<String> {
        let since = self
            .synced
            .swap(self.tick.load(Ordering::Relaxed), Ordering::Relaxed);
        let Ok(scripts) = self.scripts.lock() else {
            return Vec::new();
        };
        let mut used: Vec<(u64, &String)> = scripts
            .iter()
            .map(|(sha, held)| (held.used.load(Ordering::Relaxed), sha))
            .filter(|(tick, _)| *tick > since)
            .collect();
        used.sort_unstable();
        used.into_iter().map(|(_, sha)| sha.clone()).collect()
    }

    /// Route the `HOST_REPLY` frames of call `line.id` to `line` (a provider call on a script thread).
    fn open_line(&self, line: Py<HostLine>) {
        self.lines.open(line);
    }

    /// Stop routing call `id`'s replies (its call ended).
    fn close_line(&self, id: i64) {
        self.lines.close(id);
    }

    fn __len__(&self) -> usize {
        self.scripts.lock().map_or(0, |s| s.len())
    }

    /// Run the CALL in `frame` if the lane can: its RESULT frame (`bytes`; the ERROR
    /// `InvalidValue` when its value has no wire form); `(id, exception)` when the call failed;
    /// `(id, "missing", base)` when its resident list's base is not held; `None` when nothing ran
    /// and the worker's `Codec` must read the frame.
    fn run<'py>(
        &self,
        py: Python<'py>,
        frame: &Bound<'py, PyBytes>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(call) = self.read_call(frame.as_bytes()) else {
            return Ok(None);
        };
        let Some(script) = self.script_for(py, call.sha) else {
            return Ok(None);
        };
        let (id, mut args) = (call.id, call.args);
        if let (Some(update), Some(lists)) = (call.resident, &self.resident) {
            // Before the call, as the worker's Python logic does: the list changes whatever the hook does.
            let base = update.base.unwrap_or_default();
            let Some(list) = resident_list(lists.get(), call.tenant, update) else {
                return Ok(Some((id, "missing", base).into_pyobject(py)?.into_any()));
            };
            if let Some(mut first) = args.first_mut().and_then(Dynamic::write_lock::<Map>) {
                first.insert("entries".into(), Dynamic::from_array(list));
            }
        }
        let started = (Instant::now(), thread_cpu_seconds());
        let ended = script
            .get()
            .run_with(
                py,
                call.fn_name,
                args.len(),
                || Ok(args),
                call.timeout,
                None,
                |py, result, report, _| Ok(self.finish(py, id, result, report, started)),
            )
            .unwrap_or_else(Ended::Failed);
        let out = match ended {
            Ended::Frame(bytes) => PyBytes::new(py, &bytes).into_any(),
            Ended::Failed(e) => (id, e.into_value(py)).into_pyobject(py)?.into_any(),
        };
        Ok(Some(out))
    }
}
