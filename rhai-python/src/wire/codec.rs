//! `Codec`: the worker's one reader of every message it receives and one writer of every message
//! it sends (rhaipool's RHP/1), apart from the plain region call `Lane` runs frame to frame.
//!
//! Why Python objects: what the worker does with a message other than a plain region call is
//! Python logic (its script cache, the provider call's channel, its threads), so the reader hands
//! Python the fields it needs as one tuple per message, read straight from the frame, and the
//! writers take Python values and write the frame. Running provider calls natively end to end would
//! move that logic into Rust for no gain a user sees: a provider call waits ~100 ms on its API.
//!
//! * **Reading** (`read`): a frame the coordinator sends (HEARTBEAT, SHUTDOWN, CALL, CANCEL, CREDIT,
//!   `HOST_REPLY`, `HOST_CHUNK`), checked as `proto.decode` and the message's `from_body` check it (the
//!   signature, the command, the caps and every field), into `(command, field, ...)`. Anything
//!   `proto` refuses is refused (`ValueError`; `OverflowError` where `proto` says `TooLarge`), and
//!   so is a command only a worker sends (RHP §8.6.2).
//! * **Writing** (`ready`, `heartbeat`, `goodbye`, `result`, `error`, `chunk`, `credit`,
//!   `host_call`): the frame `proto.encode` writes for the same message, byte for byte. A value
//!   without wire form ends as it does in `proto`'s worker: a RESULT or ERROR becomes the ERROR
//!   `InvalidValue` "the return value cannot leave the sandbox: ...", a CHUNK the chunk carrying
//!   its error, and the other messages raise (nothing sent).
//!
//! The frame layout, the caps and the vocabulary come from the caller (`worker/wire.py`), `proto`
//! being the one definition of the wire.
//!
//! Past 400 lines because the reader's field checks (`proto.schema` and every message's
//! `from_body`, the CALL's and its `resident` map's included) and the eight writers are the one
//! message table of the worker's side; split, each half would repeat the command bytes and caps.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::values::{self, Limits, Refused};

/// The command bytes of RHP/1 (`proto.commands.Command`).
#[derive(Clone, Copy, Default)]
struct Commands {
    ready: u8,
    heartbeat: u8,
    goodbye: u8,
    shutdown: u8,
    call: u8,
    result: u8,
    error: u8,
    chunk: u8,
    cancel: u8,
    credit: u8,
    host_call: u8,
    host_reply: u8,
    host_chunk: u8,
}

/// The worker's codec; see the module documentation.
#[pyclass(frozen, module = "rhai")]
pub struct Codec {
    signature: Vec<u8>,
    commands: Commands,
    limits: Limits,
    max_id: i64,
    max_resident_key: usize,
    ops: Py<PyDict>,
    kinds: Py<PyDict>,
    op_call: Py<PyAny>,
    kind_region: Py<PyAny>,
    invalid_value: Py<PyAny>,
}

/// This process's peak resident set, in bytes.
pub fn peak_rss_bytes() -> i64 {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut usage) };
    usage.ru_maxrss.saturating_mul(1024)
}

fn malformed(text: impl Into<String>) -> Refused {
    Refused::Malformed(text.into())
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".to_string(), |n| n.to_string())
}

/// `proto.schema`'s readers over a decoded body.
struct Body<'py> {
    map: Bound<'py, PyDict>,
    max_id: i64,
}

impl<'py> Body<'py> {
    fn opt(&self, key: &str) -> Option<Bound<'py, PyAny>> {
        self.map.get_item(key).ok().flatten()
    }

    fn get(&self, key: &str) -> Result<Bound<'py, PyAny>, Refused> {
        self.opt(key)
            .ok_or_else(|| malformed(format!("missing field {key:?}")))
    }

    fn wrong(key: &str, value: &Bound<'_, PyAny>, expected: &str) -> Refused {
        malformed(format!(
            "field {key:?} is {}, expected {expected}",
            type_name(value)
        ))
    }

    fn int(&self, key: &str) -> Result<Bound<'py, PyAny>, Refused> {
        let value = self.get(key)?;
        if !value.is_exact_instance_of::<PyInt>() {
            return Err(Self::wrong(key, &value, "int"));
        }
        Ok(value)
    }

    /// An int within `range`, else `out` names the defect.
    fn int_in(
        &self,
        key: &str,
        range: std::ops::RangeInclusive<i64>,
        out: impl Fn(&Bound<'py, PyAny>) -> String,
    ) -> Result<Bound<'py, PyAny>, Refused> {
        let value = self.int(key)?;
        if !value.extract::<i64>().is_ok_and(|v| range.contains(&v)) {
            return Err(malformed(out(&value)));
        }
        Ok(value)
    }

    fn id(&self, key: &str) -> Result<Bound<'py, PyAny>, Refused> {
        self.int_in(key, 0..=self.max_id, |v| {
            format!("field {key:?} = {v} is outside 0..2**63-1")
        })
    }

    fn hid(&self) -> Result<Bound<'py, PyAny>, Refused> {
        let hid = self.id("hid")?;
        if hid.extract::<i64>().is_ok_and(|h| h == 0) {
            return Err(malformed("field 'hid' must be >= 1"));
        }
        Ok(hid)
    }

    fn str(&self, key: &str) -> Result<Bound<'py, PyAny>, Refused> {
        let value = self.get(key)?;
        if !value.is_exact_instance_of::<PyString>() {
            return Err(Self::wrong(key, &value, "str"));
        }
        Ok(value)
    }

    fn opt_str(&self, key: &str) -> Result<Bound<'py, PyAny>, Refused> {
        let value = self
            .opt(key)
            .unwrap_or_else(|| self.map.py().None().into_bound(self.map.py()));
        if !value.is_none() && !value.is_exact_instance_of::<PyString>() {
            return Err(Self::wrong(key, &value, "str or nil"));
        }
        Ok(value)
    }

    fn list(&self, key: &str) -> Result<Bound<'py, PyList>, Refused> {
        let value = self.get(key)?;
        if !value.is_exact_instance_of::<PyList>() {
            return Err(Self::wrong(key, &value, "array"));
        }
        value
            .cast_into::<PyList>()
            .map_err(|e| malformed(e.to_string()))
    }

    fn dict(&self, key: &str) -> Result<Bound<'py, PyDict>, Refused> {
        let value = self.get(key)?;
        if !value.is_exact_instance_of::<PyDict>() {
            return Err(Self::wrong(key, &value, "map"));
        }
        value
            .cast_into::<PyDict>()
            .map_err(|e| malformed(e.to_string()))
    }

    fn bool(&self, key: &str) -> Result<Bound<'py, PyAny>, Refused> {
        let value = self.get(key)?;
        if !value.is_exact_instance_of::<PyBool>() {
            return Err(Self::wrong(key, &value, "bool"));
        }
        Ok(value)
    }
}

impl Codec {
    fn header(&self, command: u8) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.signature.len() + 1 + 64);
        out.extend_from_slice(&self.signature);
        out.push(command);
        out
    }

    /// The frame of command `command` whose body is `body`'s fields in order.
    /// The frame of `command` with `body` as Python bytes; raises, nothing written, for a field
    /// without wire form.
    fn written<'py>(
        &self,
        py: Python<'py>,
        command: u8,
        body: &[(&str, Bound<'py, PyAny>)],
    ) -> PyResult<Bound<'py, PyBytes>> {
        let frame = self.frame(py, command, body).map_err(Refused::into_pyerr)?;
        Ok(PyBytes::new(py, &frame))
    }

    fn frame<'py>(
        &self,
        py: Python<'py>,
        command: u8,
        body: &[(&str, Bound<'py, PyAny>)],
    ) -> Result<Vec<u8>, Refused> {
        let map = PyDict::new(py);
        for (key, value) in body {
            map.set_item(key, value)
                .map_err(|e| malformed(e.to_string()))?;
        }
        let packed = values::pack(map.as_any(), self.limits)?;
        let mut out = self.header(command);
        out.extend_from_slice(&packed);
        Ok(out)
    }

    fn error_body<'py>(
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
        cls: &Bound<'py, PyAny>,
        message: &Bound<'py, PyAny>,
        rest: [Bound<'py, PyAny>; 5],
    ) -> Vec<(&'static str, Bound<'py, PyAny>)> {
        let [kind, line, column, value, limit] = rest;
        let limit = if limit.is_none() {
            limit
        } else {
            limit.str().map_or(limit, Bound::into_any)
        };
        let cls = cls.str().map_or_else(|_| cls.clone(), Bound::into_any);
        let _ = py;
        vec![
            ("id", id.clone()),
            ("cls", cls),
            ("message", message.clone()),
            ("kind", kind),
            ("line", line),
            ("column", column),
            ("value", value),
            ("limit", limit),
        ]
    }

    /// The ERROR `InvalidValue` a call ends in when its value cannot leave the sandbox.
    fn invalid_value<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
        refused: &Refused,
    ) -> Vec<u8> {
        let text = PyString::new(
            py,
            &format!(
                "the return value cannot leave the sandbox: {}",
                refused.text()
            ),
        );
        let none = || py.None().into_bound(py);
        let body = Self::error_body(
            py,
            id,
            self.invalid_value.bind(py),
            text.as_any(),
            [
                PyString::new(py, "").into_any(),
                none(),
                none(),
                none(),
                none(),
            ],
        );
        self.frame(py, self.commands.error, &body)
            .unwrap_or_default()
    }

    /// The RESULT frame of a call's value (an `InvalidValue` ERROR if it has no wire form).
    pub fn result_frame<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        (wall, cpu, ops): (f64, f64, u64),
        output: &Bound<'py, PyAny>,
    ) -> Vec<u8> {
        let body = [
            ("id", id.clone()),
            ("value", value.clone()),
            ("wall", PyFloat::new(py, wall).into_any()),
            ("cpu", PyFloat::new(py, cpu).into_any()),
            ("peak_rss", PyInt::new(py, peak_rss_bytes()).into_any()),
            ("ops", PyInt::new(py, ops).into_any()),
            ("output", output.clone()),
        ];
        self.frame(py, self.commands.result, &body)
            .unwrap_or_else(|refused| self.invalid_value(py, id, &refused))
    }

    fn command_name(&self, byte: u8) -> Option<&'static str> {
        let c = self.commands;
        let names = [
            (c.heartbeat, "HEARTBEAT"),
            (c.shutdown, "SHUTDOWN"),
            (c.call, "CALL"),
            (c.cancel, "CANCEL"),
            (c.credit, "CREDIT"),
            (c.host_reply, "HOST_REPLY"),
            (c.host_chunk, "HOST_CHUNK"),
        ];
        names.iter().find(|(b, _)| *b == byte).map(|(_, n)| *n)
    }

    fn worker_sent(&self, byte: u8) -> bool {
        let c = self.commands;
        [c.ready, c.goodbye, c.result, c.error, c.chunk, c.host_call].contains(&byte)
    }

    fn read_frame<'py>(
        &self,
        py: Python<'py>,
        frame: &[u8],
    ) -> Result<Bound<'py, PyTuple>, Refused> {
        let header = self.signature.len() + 1;
        if frame.len() < header {
            return Err(malformed(format!(
                "frame of {} bytes is shorter than the {header}-byte header",
                frame.len()
            )));
        }
        let magic = &self.signature[..self.signature.len() - 1];
        if frame[..self.signature.len()] != self.signature[..] {
            if frame.starts_with(magic) {
                return Err(malformed(format!(
                    "protocol version {} is not spoken here",
                    frame[self.signature.len() - 1]
                )));
            }
            return Err(malformed("signature is not RHP"));
        }
        let byte = frame[header - 1];
        let Some(name) = self.command_name(byte) else {
            if self.worker_sent(byte) {
                return Err(malformed(format!(
                    "command 0x{byte:02x} is sent by workers, not to them"
                )));
            }
            return Err(malformed(format!("command 0x{byte:02x}")));
        };
        let decoded = values::unpack(py, &frame[header..], self.limits)?;
        let Ok(map) = decoded.cast_into::<PyDict>() else {
            return Err(malformed("body is not a map"));
        };
        let b = Body {
            map,
            max_id: self.max_id,
        };
        let command = PyInt::new(py, byte).into_any();
        let fields: Vec<Bound<'py, PyAny>> = match name {
            "HEARTBEAT" => vec![command, b.dict("stats")?.into_any()],
            "SHUTDOWN" => vec![command, b.str("reason")?],
            "CANCEL" => vec![command, b.id("id")?],
            "CREDIT" => {
                let n = b.int_in("n", 1..=1024, |_| "field 'n' must be in 1..1024".into())?;
                vec![command, b.id("id")?, b.id("hid")?, n]
            }
            "HOST_REPLY" => vec![
                command,
                b.id("id")?,
                b.hid()?,
                b.bool("ok")?,
                b.get("value")?,
            ],
            "HOST_CHUNK" => vec![
                command,
                b.id("id")?,
                b.hid()?,
                b.id("seq")?,
                b.get("value")?,
            ],
            _ => self.call_fields(py, command, &b)?,
        };
        PyTuple::new(py, fields).map_err(|e| malformed(e.to_string()))
    }

    /// A CALL's fields in `proto.calls.Call`'s order (`_call_fields`' checks).
    fn call_fields<'py>(
        &self,
        py: Python<'py>,
        command: Bound<'py, PyAny>,
        b: &Body<'py>,
    ) -> Result<Vec<Bound<'py, PyAny>>, Refused> {
        let (op_name, kind_name, sha) = (b.str("op")?, b.str("kind")?, b.str("sha")?);
        let op = self.ops.bind(py).get_item(&op_name).ok().flatten();
        let kind = self.kinds.bind(py).get_item(&kind_name).ok().flatten();
        let (Some(op), Some(kind)) = (op, kind) else {
            return Err(malformed(format!(
                "unknown op {op_name} or kind {kind_name}"
            )));
        };
        let sha_ok = sha.extract::<&str>().is_ok_and(|s| {
            s.len() == 64
                && s.bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        });
        if !sha_ok {
            return Err(malformed("field 'sha' must be 64 lowercase hex digits"));
        }
        let timeout = match b.opt("timeout") {
            None => py.None().into_bound(py),
            Some(t) if t.is_none() => t,
            Some(t) if t.is_exact_instance_of::<PyFloat>() => t,
            Some(t) if t.is_exact_instance_of::<PyInt>() => {
                let f = t
                    .call_method0("__float__")
                    .map_err(|e| malformed(e.to_string()))?;
                f
            }
            Some(t) => return Err(Body::wrong("timeout", &t, "float")),
        };
        if !timeout.is_none() && !timeout.extract::<f64>().is_ok_and(|t| t > 0.0) {
            return Err(malformed("field 'timeout' must be positive"));
        }
        let window = b.int_in("window", 1..=1024, |_| {
            "field 'window' must be in 1..1024".into()
        })?;
        let args = b.list("args")?;
        let id = b.id("id")?;
        let (fn_name, tenant, name) = (b.str("fn")?, b.str("tenant")?, b.str("name")?);
        let source = b.opt_str("source")?;
        let resident = match b.opt("resident") {
            Some(r) if !r.is_none() => self.resident(py, b, &op, &kind, &args)?.into_any(),
            _ => py.None().into_bound(py),
        };
        Ok(vec![
            command,
            id,
            op,
            kind,
            sha,
            fn_name,
            args.into_any(),
            timeout,
            tenant,
            name,
            source,
            window,
            resident,
        ])
    }

    /// The CALL's `resident` map, checked as `proto.calls.check_resident` checks it.
    fn resident<'py>(
        &self,
        py: Python<'py>,
        b: &Body<'py>,
        op: &Bound<'py, PyAny>,
        kind: &Bound<'py, PyAny>,
        args: &Bound<'py, PyList>,
    ) -> Result<Bound<'py, PyDict>, Refused> {
        let resident = b
            .dict("resident")
            .map_err(|_| malformed("field 'resident' is not a map"))?;
        let first_is_map = args
            .get_item(0)
            .is_ok_and(|a| a.is_exact_instance_of::<PyDict>());
        if !op.is(self.op_call.bind(py)) || !kind.is(self.kind_region.bind(py)) || !first_is_map {
            return Err(malformed(
                "field 'resident' needs op=call, kind=region and a map as first argument",
            ));
        }
        let r = Body {
            map: resident.clone(),
            max_id: self.max_id,
        };
        let key = r.str("key")?;
        let key_len = key.extract::<&str>().map_or(0, |k| k.chars().count());
        if !(16..=self.max_resident_key).contains(&key_len) {
            return Err(malformed(format!(
                "field 'resident.key' must be 16..{} characters",
                self.max_resident_key
            )));
        }
        r.id("version")?;
        let base = r.opt("base").filter(|v| !v.is_none());
        if let Some(base) = &base {
            if !base.is_exact_instance_of::<PyInt>() {
                return Err(Body::wrong("base", base, "int or nil"));
            }
        }
        let drop = r.list("drop")?;
        r.list("entries")?;
        if let Some(base) = &base {
            if !base
                .extract::<i64>()
                .is_ok_and(|v| (0..=self.max_id).contains(&v))
            {
                return Err(malformed("field 'resident.base' must be an id or nil"));
            }
        } else if !drop.is_empty() {
            return Err(malformed(
                "field 'resident.drop' must be empty for a full list",
            ));
        }
        let mut previous: Option<Bound<'py, PyAny>> = None;
        for index in drop.iter() {
            if !index.is_exact_instance_of::<PyInt>() {
                return Err(malformed(
                    "field 'resident.drop' must be strictly ascending ints",
                ));
            }
            if let Some(p) = &previous {
                if !index.gt(p).unwrap_or(false) {
                    return Err(malformed(
                        "field 'resident.drop' must be strictly ascending ints",
                    ));
                }
            } else if index.lt(0).unwrap_or(true) {
                return Err(malformed("field 'resident.drop' must not be negative"));
            }
            previous = Some(index);
        }
        Ok(resident)
    }
}

fn command_byte(commands: &Bound<'_, PyDict>, name: &str) -> PyResult<u8> {
    commands
        .get_item(name)?
        .ok_or_else(|| PyValueError::new_err(format!("commands lacks {name}")))?
        .extract()
}

#[pymethods]
impl Codec {
    /// A codec for frames that start with `signature` (`RHP` and the version byte), with the
    /// command bytes `commands` (name → byte, `proto.commands.Command`), the caps of
    /// `proto.values` and `proto.schema`, and the vocabulary the reader hands back: `ops` and
    /// `kinds` (wire string → member), the members a resident CALL needs (`op_call`,
    /// `kind_region`) and the class of the ERROR a value without wire form ends in.
    #[new]
    #[pyo3(signature = (
        *, signature, commands, max_id, max_body, max_container, max_depth, max_resident_key,
        ops, kinds, op_call, kind_region, invalid_value
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        signature: Vec<u8>,
        commands: &Bound<'_, PyDict>,
        max_id: i64,
        max_body: usize,
        max_container: usize,
        max_depth: usize,
        max_resident_key: usize,
        ops: Py<PyDict>,
        kinds: Py<PyDict>,
        op_call: Py<PyAny>,
        kind_region: Py<PyAny>,
        invalid_value: Py<PyAny>,
    ) -> PyResult<Self> {
        if signature.len() < 2 || max_id < 0 {
            return Err(PyValueError::new_err(
                "the signature needs a version byte and max_id must not be negative",
            ));
        }
        let c = |name| command_byte(commands, name);
        Ok(Self {
            signature,
            commands: Commands {
                ready: c("READY")?,
                heartbeat: c("HEARTBEAT")?,
                goodbye: c("GOODBYE")?,
                shutdown: c("SHUTDOWN")?,
                call: c("CALL")?,
                result: c("RESULT")?,
                error: c("ERROR")?,
                chunk: c("CHUNK")?,
                cancel: c("CANCEL")?,
                credit: c("CREDIT")?,
                host_call: c("HOST_CALL")?,
                host_reply: c("HOST_REPLY")?,
                host_chunk: c("HOST_CHUNK")?,
            },
            limits: Limits {
                body: max_body,
                container: max_container,
                plain_depth: max_depth,
            },
            max_id,
            max_resident_key,
            ops,
            kinds,
            op_call,
            kind_region,
            invalid_value,
        })
    }

    /// The message in `frames` (one received message), as `(command byte, field, ...)` in the
    /// order of `proto`'s message class; raises `ValueError` (`OverflowError` past a cap) for
    /// anything `proto.decode` refuses and for a command the coordinator does not send.
    fn read<'py>(
        &self,
        py: Python<'py>,
        frames: Vec<Bound<'py, PyBytes>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if frames.len() != 1 {
            return Err(PyValueError::new_err(format!(
                "{} frames, expected 1",
                frames.len()
            )));
        }
        self.read_frame(py, frames[0].as_bytes())
            .map_err(Refused::into_pyerr)
    }

    /// READY (raises for a value without wire form).
    fn ready<'py>(
        &self,
        py: Python<'py>,
        pid: Bound<'py, PyAny>,
        versions: Bound<'py, PyAny>,
        capacity: Bound<'py, PyAny>,
        sandbox: Bound<'py, PyAny>,
        probe: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let body = [
            ("pid", pid),
            ("versions", versions),
            ("capacity", capacity),
            ("sandbox", sandbox),
            ("probe", probe),
        ];
        self.written(py, self.commands.ready, &body)
    }

    /// HEARTBEAT with counters `stats`.
    fn heartbeat<'py>(
        &self,
        py: Python<'py>,
        stats: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.written(py, self.commands.heartbeat, &[("stats", stats)])
    }

    /// GOODBYE.
    fn goodbye<'py>(
        &self,
        py: Python<'py>,
        reason: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.written(py, self.commands.goodbye, &[("reason", reason)])
    }

    /// CREDIT.
    fn credit<'py>(
        &self,
        py: Python<'py>,
        id: Bound<'py, PyAny>,
        hid: Bound<'py, PyAny>,
        n: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.written(
            py,
            self.commands.credit,
            &[("id", id), ("hid", hid), ("n", n)],
        )
    }

    /// `HOST_CALL` (raises, nothing written, for arguments without wire form).
    fn host_call<'py>(
        &self,
        py: Python<'py>,
        id: Bound<'py, PyAny>,
        hid: Bound<'py, PyAny>,
        name: Bound<'py, PyAny>,
        args: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let body = [("id", id), ("hid", hid), ("name", name), ("args", args)];
        self.written(py, self.commands.host_call, &body)
    }

    /// RESULT of call `id` (peak RSS measured here), or the ERROR `InvalidValue` if its value or
    /// output has no wire form.
    #[allow(clippy::too_many_arguments)]
    fn result<'py>(
        &self,
        py: Python<'py>,
        id: Bound<'py, PyAny>,
        value: Bound<'py, PyAny>,
        wall: f64,
        cpu: f64,
        ops: u64,
        output: Bound<'py, PyAny>,
    ) -> Bound<'py, PyBytes> {
        PyBytes::new(
            py,
            &self.result_frame(py, &id, &value, (wall, cpu, ops), &output),
        )
    }

    /// ERROR of call `id`, or the ERROR `InvalidValue` if its thrown value has no wire form.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (id, cls, message, kind, line, column, value, limit))]
    fn error<'py>(
        &self,
        py: Python<'py>,
        id: Bound<'py, PyAny>,
        cls: Bound<'py, PyAny>,
        message: Bound<'py, PyAny>,
        kind: Bound<'py, PyAny>,
        line: Bound<'py, PyAny>,
        column: Bound<'py, PyAny>,
        value: Bound<'py, PyAny>,
        limit: Bound<'py, PyAny>,
    ) -> Bound<'py, PyBytes> {
        let body = Self::error_body(py, &id, &cls, &message, [kind, line, column, value, limit]);
        let frame = self
            .frame(py, self.commands.error, &body)
            .unwrap_or_else(|refused| self.invalid_value(py, &id, &refused));
        PyBytes::new(py, &frame)
    }

    /// Each item's size as the wire packs it alone (the resident store's bound, `resident.rs`).
    fn sizes(&self, items: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<usize>> {
        items
            .iter()
            .map(|item| values::pack(item, self.limits).map(|b| b.len()))
            .collect::<Result<_, _>>()
            .map_err(Refused::into_pyerr)
    }

    /// CHUNK `seq` of call `id`; a value without wire form becomes the chunk carrying its error.
    fn chunk<'py>(
        &self,
        py: Python<'py>,
        id: Bound<'py, PyAny>,
        seq: Bound<'py, PyAny>,
        value: Bound<'py, PyAny>,
    ) -> Bound<'py, PyBytes> {
        let none = py.None().into_bound(py);
        let body = [
            ("id", id.clone()),
            ("seq", seq.clone()),
            ("value", value),
            ("error", none.clone()),
        ];
        let frame = self
            .frame(py, self.commands.chunk, &body)
            .unwrap_or_else(|refused| {
                let text = format!("chunk has no wire form: {}", refused.text());
                let body = [
                    ("id", id),
                    ("seq", seq),
                    ("value", none),
                    ("error", PyString::new(py, &text).into_any()),
                ];
                self.frame(py, self.commands.chunk, &body)
                    .unwrap_or_default()
            });
        PyBytes::new(py, &frame)
    }
}
