//! msgpack's smallest encodings of a length, an int, a float, a string and bytes, as msgpack-python
//! writes them: the one copy both writers use, `msgpack.rs`'s of Rhai values and `values.rs`'s of
//! Python values.

/// A length in msgpack's smallest form: `fix | n` below `fix`'s bound, else the 8-bit form (if the
/// type has one), the 16-bit form `code16`, or the 32-bit one (`code16 + 1` in every type).
pub fn put_length(
    out: &mut Vec<u8>,
    n: usize,
    fix: Option<(u8, usize)>,
    code8: Option<u8>,
    code16: u8,
) {
    if let Some((base, below)) = fix {
        if let Ok(small) = u8::try_from(n) {
            if n < below {
                out.push(base | small);
                return;
            }
        }
    }
    if let (Some(code), Ok(m)) = (code8, u8::try_from(n)) {
        out.extend_from_slice(&[code, m]);
    } else if let Ok(m) = u16::try_from(n) {
        out.push(code16);
        out.extend_from_slice(&m.to_be_bytes());
    } else {
        out.push(code16 + 1);
        out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
    }
}

pub fn put_map_header(out: &mut Vec<u8>, n: usize) {
    put_length(out, n, Some((0x80, 16)), None, 0xde);
}

pub fn put_array_header(out: &mut Vec<u8>, n: usize) {
    put_length(out, n, Some((0x90, 16)), None, 0xdc);
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_length(out, s.len(), Some((0xa0, 32)), Some(0xd9), 0xda);
    out.extend_from_slice(s.as_bytes());
}

pub fn put_bin(out: &mut Vec<u8>, b: &[u8]) {
    put_length(out, b.len(), None, Some(0xc4), 0xc5);
    out.extend_from_slice(b);
}

/// An unsigned format, the smallest that holds `u`.
pub fn put_uint(out: &mut Vec<u8>, u: u64) {
    if u < 0x80 {
        out.push(u.to_le_bytes()[0]);
    } else if let Ok(m) = u8::try_from(u) {
        out.extend_from_slice(&[0xcc, m]);
    } else if let Ok(m) = u16::try_from(u) {
        out.push(0xcd);
        out.extend_from_slice(&m.to_be_bytes());
    } else if let Ok(m) = u32::try_from(u) {
        out.push(0xce);
        out.extend_from_slice(&m.to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&u.to_be_bytes());
    }
}

/// msgpack-python's choice: unsigned formats for non-negative ints, signed for negative ones.
pub fn put_int(out: &mut Vec<u8>, i: i64) {
    if let Ok(u) = u64::try_from(i) {
        put_uint(out, u);
    } else if i >= -32 {
        out.push(i.to_le_bytes()[0]);
    } else if let Ok(m) = i8::try_from(i) {
        out.extend_from_slice(&[0xd0, m.to_be_bytes()[0]]);
    } else if let Ok(m) = i16::try_from(i) {
        out.push(0xd1);
        out.extend_from_slice(&m.to_be_bytes());
    } else if let Ok(m) = i32::try_from(i) {
        out.push(0xd2);
        out.extend_from_slice(&m.to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&i.to_be_bytes());
    }
}

pub fn put_float(out: &mut Vec<u8>, f: f64) {
    out.push(0xcb);
    out.extend_from_slice(&f.to_bits().to_be_bytes());
}
