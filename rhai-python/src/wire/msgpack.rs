//! msgpack straight to and from Rhai values, for the worker's `Lane` (`lane.rs`).
//!
//! Both directions mirror what `proto` does (and the worker's `Codec`), so a value crosses either to the same
//! bytes and the same Rhai value:
//!
//! * **Reading** mirrors `msgpack.unpackb` (rhaipool's `proto.values.unpack`) followed by
//!   `convert::to_dynamic`: nil, bools, ints (beyond `i64` as the nearest float), floats (32-bit
//!   ones widened), UTF-8 strings, binaries as blobs, arrays, and maps with string keys (a repeated
//!   key: the last one wins, as in a Python dict). Anything else (an extension type, a non-string
//!   key, invalid UTF-8, a container over the cap, nesting past `MAX_READ_DEPTH`, trailing
//!   bytes) is `None`: the caller hands the message to the worker's `Codec`, which names the defect.
//! * **Writing** mirrors `convert::to_python_owned` followed by msgpack-python's `Packer`
//!   (`use_bin_type=True`): the smallest int form (unsigned formats for non-negative ints, as
//!   msgpack-python writes them), every float as 64 bits, `char` as a one-character string,
//!   blobs as binaries, maps in key order. Anything `proto` would refuse, flatten or
//!   convert specially (a function pointer, a custom type, a container over the cap, nesting past
//!   the plain depth) is `None`, and the caller converts the value to Python instead.

use rhai::{Array, Blob, Dynamic, ImmutableString, Map};

use super::pack::{put_array_header, put_bin, put_float, put_int, put_map_header, put_str};

/// Nesting the reader follows (recursively, on the caller's stack): calls nest far less, and a
/// deeper value travels flattened (an extension type) anyway.
pub const MAX_READ_DEPTH: usize = 128;

/// The caps the wire puts on a value (rhaipool's `proto.values`).
#[derive(Clone, Copy)]
pub struct Caps {
    /// Elements of one array or map.
    pub container: usize,
    /// Nesting written plainly; deeper values are flattened by the worker's `Codec`.
    pub depth: usize,
}

/// A msgpack reader over one buffer.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    caps: Caps,
}

/// A map key or a string field, borrowed from the buffer.
pub enum Scalar<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
    Other,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8], caps: Caps) -> Self {
        Self { data, pos: 0, caps }
    }

    /// Bytes read so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Consumes a nil if one comes next.
    pub fn nil(&mut self) -> bool {
        let nil = self.peek() == Some(0xc0);
        self.pos += usize::from(nil);
        nil
    }

    pub fn at_end(&self) -> bool {
        self.pos == self.data.len()
    }

    fn byte(&mut self) -> Option<u8> {
        let b = *self.data.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    fn be(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
        )
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn peek(&self) -> Option<u8> {
        self.data.get(self.pos).copied()
    }

    /// A map header: its number of entries.
    pub fn map_len(&mut self) -> Option<usize> {
        self.container_len(0x80, 0xde)
    }

    /// An array header: its number of elements.
    pub fn array_header(&mut self) -> Option<usize> {
        self.container_len(0x90, 0xdc)
    }

    /// A container header whose fix form starts at `fix` and whose 16-bit form is `code16` (the
    /// 32-bit one `code16 + 1`); `None` past the cap.
    fn container_len(&mut self, fix: u8, code16: u8) -> Option<usize> {
        let b = self.byte()?;
        let n = if b & 0xf0 == fix {
            usize::from(b & 0x0f)
        } else if b == code16 {
            usize::try_from(self.be(2)?).ok()?
        } else if b == code16 + 1 {
            usize::try_from(self.be(4)?).ok()?
        } else {
            return None;
        };
        (n <= self.caps.container).then_some(n)
    }

    /// A string, int, float or nil field; `Other` for anything else (consumed only if scalar).
    pub fn scalar(&mut self) -> Option<Scalar<'a>> {
        let b = self.byte()?;
        let len = match b {
            0xa0..=0xbf => Some(u64::from(b & 0x1f)),
            0xd9 => Some(self.be(1)?),
            0xda => Some(self.be(2)?),
            0xdb => Some(self.be(4)?),
            _ => None,
        };
        if let Some(n) = len {
            let bytes = self.take(usize::try_from(n).ok()?)?;
            return std::str::from_utf8(bytes).ok().map(Scalar::Str);
        }
        Some(match b {
            0xc0 => Scalar::Nil,
            0xc2 => Scalar::Bool(false),
            0xc3 => Scalar::Bool(true),
            0x00..=0x7f => Scalar::Int(i64::from(b)),
            0xe0..=0xff => Scalar::Int(i64::from(i8::from_be_bytes([b]))),
            0xcc => Scalar::Int(i64::try_from(self.be(1)?).ok()?),
            0xcd => Scalar::Int(i64::try_from(self.be(2)?).ok()?),
            0xce => Scalar::Int(i64::try_from(self.be(4)?).ok()?),
            0xcf => Scalar::Int(i64::try_from(self.be(8)?).ok()?),
            0xd0 => Scalar::Int(i64::from(i8::from_be_bytes(self.array::<1>()?))),
            0xd1 => Scalar::Int(i64::from(i16::from_be_bytes(self.array::<2>()?))),
            0xd2 => Scalar::Int(i64::from(i32::from_be_bytes(self.array::<4>()?))),
            0xd3 => Scalar::Int(i64::from_be_bytes(self.array::<8>()?)),
            0xca => Scalar::Float(f64::from(f32::from_be_bytes(self.array::<4>()?))),
            0xcb => Scalar::Float(f64::from_bits(self.be(8)?)),
            _ => {
                self.pos -= 1;
                Scalar::Other
            }
        })
    }

    /// Any value as Rhai's; `None` for what the worker's `Codec` must read.
    pub fn value(&mut self, depth: usize) -> Option<Dynamic> {
        let b = self.peek()?;
        match b {
            0x80..=0x8f | 0xde | 0xdf => {
                if depth >= MAX_READ_DEPTH {
                    return None;
                }
                let n = self.map_len()?;
                let mut map = Map::new();
                for _ in 0..n {
                    let Scalar::Str(key) = self.scalar()? else {
                        return None;
                    };
                    let item = self.value(depth + 1)?;
                    map.insert(key.into(), item);
                }
                Some(Dynamic::from_map(map))
            }
            0x90..=0x9f | 0xdc | 0xdd => {
                if depth >= MAX_READ_DEPTH {
                    return None;
                }
                let n = self.array_header()?;
                let mut items = Array::with_capacity(n.min(4096));
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Some(Dynamic::from_array(items))
            }
            0xc2 | 0xc3 => {
                self.pos += 1;
                Some(Dynamic::from_bool(b == 0xc3))
            }
            0xc4..=0xc6 => {
                self.pos += 1;
                let n = usize::try_from(self.be(1 << (b - 0xc4))?).ok()?;
                Some(Dynamic::from_blob(self.take(n)?.to_vec() as Blob))
            }
            0xcf => {
                self.pos += 1;
                let u = self.be(8)?;
                // Beyond i64: the nearest float, as `convert` reads a Python int that size.
                #[allow(clippy::cast_precision_loss)]
                let nearest = |_| Dynamic::from_float(u as f64);
                Some(i64::try_from(u).map_or_else(nearest, Dynamic::from_int))
            }
            _ => match self.scalar()? {
                Scalar::Nil => Some(Dynamic::UNIT),
                Scalar::Bool(b) => Some(Dynamic::from_bool(b)),
                Scalar::Int(i) => Some(Dynamic::from_int(i)),
                Scalar::Float(f) => Some(Dynamic::from_float(f)),
                Scalar::Str(s) => Some(Dynamic::from(ImmutableString::from(s))),
                Scalar::Other => None,
            },
        }
    }
}

/// A msgpack writer: the bytes msgpack-python writes for the same values.
pub struct Writer {
    pub out: Vec<u8>,
    caps: Caps,
}

impl Writer {
    pub fn new(out: Vec<u8>, caps: Caps) -> Self {
        Self { out, caps }
    }

    pub fn map_header(&mut self, n: usize) {
        put_map_header(&mut self.out, n);
    }

    pub fn array_header(&mut self, n: usize) {
        put_array_header(&mut self.out, n);
    }

    pub fn str(&mut self, s: &str) {
        put_str(&mut self.out, s);
    }

    fn bin(&mut self, b: &[u8]) {
        put_bin(&mut self.out, b);
    }

    pub fn int(&mut self, i: i64) {
        put_int(&mut self.out, i);
    }

    pub fn float(&mut self, f: f64) {
        put_float(&mut self.out, f);
    }

    /// `value` as `proto` would write it; `false` (the buffer then holds a partial value)
    /// for anything that path converts, refuses or flattens instead.
    pub fn value(&mut self, value: &Dynamic, depth: usize) -> bool {
        if value.is_unit() {
            self.out.push(0xc0);
        } else if value.is_string() {
            match value.as_immutable_string_ref() {
                Ok(s) => self.str(s.as_str()),
                Err(_) => return false,
            }
        } else if value.is_int() {
            match value.as_int() {
                Ok(i) => self.int(i),
                Err(_) => return false,
            }
        } else if value.is_bool() {
            match value.as_bool() {
                Ok(b) => self.out.push(if b { 0xc3 } else { 0xc2 }),
                Err(_) => return false,
            }
        } else if value.is_float() {
            match value.as_float() {
                Ok(f) => self.float(f),
                Err(_) => return false,
            }
        } else if value.is_char() {
            match value.as_char() {
                Ok(c) => self.str(c.encode_utf8(&mut [0; 4])),
                Err(_) => return false,
            }
        } else if let Ok(b) = value.as_blob_ref() {
            self.bin(&b);
        } else if value.is_array() {
            return self.array(value, depth);
        } else if value.is_map() {
            return self.map(value, depth);
        } else {
            return false; // a function pointer or a custom type: the worker's `Codec` decides
        }
        true
    }

    fn array(&mut self, value: &Dynamic, depth: usize) -> bool {
        let Ok(items) = value.as_array_ref() else {
            return false;
        };
        if items.len() > self.caps.container || depth >= self.caps.depth {
            return false;
        }
        self.array_header(items.len());
        items.iter().all(|item| self.value(item, depth + 1))
    }

    fn map(&mut self, value: &Dynamic, depth: usize) -> bool {
        let Some(map) = value.read_lock::<Map>() else {
            return false;
        };
        if map.len() > self.caps.container || depth >= self.caps.depth {
            return false;
        }
        self.map_header(map.len());
        map.iter().all(|(key, item)| {
            self.str(key.as_str());
            self.value(item, depth + 1)
        })
    }
}
