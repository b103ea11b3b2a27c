//! Script calls on a stack of their own, sized from the call's operation budget.
//!
//! rhai frees, clones, compares and prints nested values recursively (closure
//! chains, `curry` chains, nested arrays and maps, function pointers), and the
//! depth a script can build is bounded only by its operation budget: on an 8 MiB
//! thread stack a provider script's closure chain overflowed it and killed the
//! process when the chain was freed. None of those recursions can be hooked, so
//! the whole call runs on a stack big enough for the deepest value its budget
//! can build (measured: at most ~200 bytes of stack per level, one level costs a
//! script at least ~2 operations).
//!
//! The stack is an anonymous `MAP_NORESERVE` mapping with a guard page: only the
//! pages a call really touches use memory. If the mapping cannot be made (address
//! space exhausted), the call runs on the caller's stack as before.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr;

/// Bytes of stack a call gets per operation of its budget.
pub const BYTES_PER_OPERATION: usize = 128;
/// Smallest and largest stack a call is given.
pub const MIN_STACK: usize = 16 << 20;
pub const MAX_STACK: usize = 256 << 20;

/// The stack size for an engine with this operation budget.
pub fn size_for_operations(max_operations: u64) -> usize {
    usize::try_from(max_operations)
        .unwrap_or(usize::MAX)
        .saturating_mul(BYTES_PER_OPERATION)
        .clamp(MIN_STACK, MAX_STACK)
}

/// An anonymous mapping used as a stack; unmapped on drop.
struct Mapping {
    base: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new(size: usize) -> Option<Self> {
        // SAFETY: `sysconf` has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        let len = size.checked_add(page)?.div_ceil(page).checked_mul(page)?;
        // SAFETY: a fresh private anonymous mapping; the result is checked.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let mapping = Self { base, len };
        // The lowest page is the guard: an overflow faults there instead of
        // writing into whatever mapping lies below.
        // SAFETY: `base` is page-aligned and the mapping is at least one page long.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return None;
        }
        Some(mapping)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe a mapping this value made and nothing else uses.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// Runs `f` on a fresh stack of `size` bytes (on the current one if none can be made).
///
/// Thread-locals, the GIL state and Python code inside `f` behave as usual: the
/// thread is the same, only its stack pointer moves.
pub fn run_on_big_stack<R>(size: usize, f: impl FnOnce() -> R) -> R {
    let Some(mapping) = Mapping::new(size) else {
        return f();
    };
    let mut outcome = None;
    {
        let slot = &mut outcome;
        let body = move || *slot = Some(catch_unwind(AssertUnwindSafe(f)));
        // SAFETY: the region is mapped read/write and stays mapped until `mapping` drops
        // below; `body` cannot unwind (it catches every panic).
        unsafe {
            psm::on_stack(mapping.base.cast::<u8>(), mapping.len, body);
        }
    }
    drop(mapping);
    match outcome {
        Some(Ok(value)) => value,
        Some(Err(panic)) => resume_unwind(panic),
        None => unreachable_outcome(),
    }
}

#[cold]
fn unreachable_outcome() -> ! {
    // `psm::on_stack` returns only after running `body`, which always sets the slot.
    std::process::abort()
}
