//! Script calls on a stack of their own, sized from the call's operation budget.
//! (Long because the mapping, its guard page, the idle-stack cache and the switch onto it are one
//! unsafe unit, kept together so their invariants are read in one place.)
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
//! The stack is an anonymous `MAP_NORESERVE` mapping with a guard page. Idle ones
//! are kept for the next calls (of any thread), as many as calls were in flight,
//! within `MAX_IDLE` and the address-space share the stacks of running calls get:
//! a worker with 64 provider calls waiting on HTTP starts and ends calls all the
//! time, and mapping a stack per call cost five system calls and page faults. Only
//! the pages a call really touches use memory; after a long call, and after a short
//! one on any but two stacks, the deep pages are given back. If no mapping can be made
//! (address space exhausted, even after unmapping the idle ones), the caller is
//! told so: a script call then fails rather than run on a thread's small stack.
//!
//! A call that gets less than its budget asks for (the share is taken: a worker holding many
//! provider calls gives the next ones `FLOOR_STACK`), or that is nested on another call's stack,
//! runs with the operation budget the stack it runs on can hold (`operations_for_room`): its
//! limits always match its stack, so no value it can build overflows it when freed.
//!
//! Past 400 lines: the stack sizing, the pool of stacks and the budget a smaller stack can hold are
//! one piece of reasoning about the same numbers, kept together.

use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes of stack a call gets per operation of its budget (measured: a chain of
/// maps, arrays and closures needs up to ~100 bytes per operation spent).
pub const BYTES_PER_OPERATION: usize = 128;
/// Smallest and largest stack a call is given.
pub const MIN_STACK: usize = 16 << 20;
pub const MAX_STACK: usize = 64 << 20;
/// What a call gets when the stacks already mapped use up their share of the
/// address space: every concurrent call holds its stack, and a worker's
/// `RLIMIT_AS` counts it (32 provider calls waiting on HTTP at 64 MiB each would
/// leave no room for a thread). The script thread's own stack is no bigger.
pub const FLOOR_STACK: usize = 8 << 20;
/// The share of `RLIMIT_AS` our stacks may hold before calls get `FLOOR_STACK`.
const SHARE_OF_ADDRESS_SPACE: usize = 4;

/// Bytes of all live mappings (in calls and idle).
static MAPPED: AtomicUsize = AtomicUsize::new(0);
/// Stack a call keeps beside what its operations may use: the Python and binding frames around
/// the script (arguments, results, host functions) and the signal handlers that may run on it.
const RESERVE: usize = 512 << 10;

/// The operation budget a call that asked for a `size`-byte stack can run with on `room` bytes:
/// unbounded (its engine's) on the stack it asked for, else what `room` holds.
pub fn operations_for_room(room: usize, size: usize) -> u64 {
    if room.saturating_add(RESERVE) >= size {
        return u64::MAX;
    }
    u64::try_from(room.saturating_sub(RESERVE) / BYTES_PER_OPERATION).unwrap_or(u64::MAX)
}

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
    /// Bytes of the guard page at `base`.
    guard: usize,
    /// Whether pages below the top `KEEP_HOT` bytes may be resident (a short call
    /// ran on it and it was not trimmed after); counted in `DIRTY`.
    dirty: bool,
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
        MAPPED.fetch_add(len, Ordering::Relaxed);
        let mapping = Self {
            base,
            len,
            guard: page,
            dirty: false,
        };
        // The lowest page is the guard: an overflow faults there instead of
        // writing into whatever mapping lies below.
        // SAFETY: `base` is page-aligned and the mapping is at least one page long.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return None;
        }
        Some(mapping)
    }
}

// SAFETY: a `Mapping` owns its region exclusively; which thread unmaps it does not matter.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Gives the pages below the top `KEEP_HOT` bytes back to the kernel (they read
    /// as zero if touched again): a deep call must not keep its stack resident.
    fn trim(&mut self) {
        self.set_dirty(false);
        let Some(cold) = self.len.checked_sub(KEEP_HOT) else {
            return;
        };
        // SAFETY: the range lies inside this mapping; nothing on it is live (the call
        // returned), and MADV_DONTNEED on an anonymous private mapping only drops pages.
        unsafe {
            libc::madvise(self.base, cold, libc::MADV_DONTNEED);
        }
    }
}

impl Mapping {
    /// The lowest address a call on this stack may use (just above its guard page).
    fn limit(&self) -> usize {
        self.base as usize + self.guard
    }

    fn set_dirty(&mut self, dirty: bool) {
        if self.dirty && !dirty {
            DIRTY.fetch_sub(1, Ordering::Relaxed);
        }
        self.dirty = dirty;
    }

    /// After a short call: keeps what it touched if this stack already may, or if
    /// fewer than `UNTRIMMED` stacks may (back-to-back calls of one thread then
    /// cost no system call); else gives the deep pages back.
    fn settle_after_short_call(&mut self) {
        if self.dirty {
            return;
        }
        let reserved = DIRTY.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < UNTRIMMED).then_some(n + 1)
        });
        if reserved.is_ok() {
            self.dirty = true;
        } else {
            self.trim();
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        self.set_dirty(false);
        // SAFETY: `base`/`len` describe a mapping this value made and nothing else uses.
        unsafe {
            libc::munmap(self.base, self.len);
        }
        MAPPED.fetch_sub(self.len, Ordering::Relaxed);
    }
}

/// The share of the address space as last read by `address_space_share`: read when
/// a stack is mapped (a system call), used when one is released (every call).
static SHARE_SEEN: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The share of the address space our stacks may hold: `RLIMIT_AS / SHARE_OF_ADDRESS_SPACE`,
/// unbounded without a limit (and remembered in `SHARE_SEEN`).
fn address_space_share() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-parameter.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_AS, &raw mut limit) } == 0;
    let share = if known && limit.rlim_cur != libc::RLIM_INFINITY {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX) / SHARE_OF_ADDRESS_SPACE
    } else {
        usize::MAX
    };
    SHARE_SEEN.store(share, Ordering::Relaxed);
    share
}

/// Stacks no call is running on, kept for the next calls (of any thread).
struct Idle {
    stacks: Vec<Mapping>,
    /// Sum of `stacks`' lengths.
    bytes: usize,
}

impl Idle {
    fn take(&mut self, index: usize) -> Mapping {
        let mapping = self.stacks.swap_remove(index);
        self.bytes -= mapping.len;
        mapping
    }

    fn keep(&mut self, mapping: Mapping) {
        self.bytes += mapping.len;
        self.stacks.push(mapping);
    }

    /// The index of the smallest idle stack of at least `size` bytes, the last kept
    /// of those (its top pages are likely still hot, and a thread's back-to-back
    /// calls keep using one stack).
    fn smallest_fitting(&self, size: usize) -> Option<usize> {
        let fitting = self
            .stacks
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, m)| m.len >= size);
        fitting.min_by_key(|(_, m)| m.len).map(|(index, _)| index)
    }

    fn index_of_largest(&self) -> Option<usize> {
        let largest = self.stacks.iter().enumerate().max_by_key(|(_, m)| m.len);
        largest.map(|(index, _)| index)
    }

    fn index_of_smallest(&self) -> Option<usize> {
        let smallest = self.stacks.iter().enumerate().min_by_key(|(_, m)| m.len);
        smallest.map(|(index, _)| index)
    }
}

/// Idle stacks, kept between calls: a fresh mapping per call costs five system
/// calls and a page fault for every stack page the call touches (~8 us a call),
/// and with many calls in flight (a worker's provider calls waiting on HTTP) calls
/// end and start all the time, so a few kept stacks are not enough.
static IDLE: Mutex<Idle> = Mutex::new(Idle {
    stacks: Vec::new(),
    bytes: 0,
});

/// A stack for a call that wants `size` bytes: an idle one that is big enough; a new
/// one of `size` while the stacks calls are running on stay within their share of
/// the address space (idle ones are unmapped to make room: a kept stack must never
/// cost a call its full size); else the biggest idle one or a new `FLOOR_STACK`.
/// New stacks are mapped under the lock, so concurrent calls cannot all take the
/// last room in the share.
fn acquire(size: usize) -> Option<Mapping> {
    let mut idle = IDLE.lock().ok()?;
    if let Some(index) = idle.smallest_fitting(size) {
        return Some(idle.take(index));
    }
    let in_calls = MAPPED.load(Ordering::Relaxed).saturating_sub(idle.bytes);
    let full_size_fits = |share: usize| in_calls.saturating_add(size) <= share;
    // Steady state under a limit: the share is taken, an idle smaller stack serves
    // (no system call).
    if !full_size_fits(SHARE_SEEN.load(Ordering::Relaxed)) {
        if let Some(index) = idle.index_of_largest() {
            return Some(idle.take(index));
        }
    }
    let share = address_space_share();
    if full_size_fits(share) {
        while MAPPED.load(Ordering::Relaxed).saturating_add(size) > share {
            let Some(index) = idle.index_of_smallest() else {
                break;
            };
            drop(idle.take(index));
        }
        return map_or_free_idle(&mut idle, size);
    }
    if let Some(index) = idle.index_of_largest() {
        return Some(idle.take(index));
    }
    map_or_free_idle(&mut idle, size.min(FLOOR_STACK))
}

/// A new mapping of `size`, unmapping every idle stack first if the address space
/// has no room for it: a kept stack must not make a call fail.
fn map_or_free_idle(idle: &mut Idle, size: usize) -> Option<Mapping> {
    Mapping::new(size).or_else(|| {
        while let Some(index) = idle.index_of_smallest() {
            drop(idle.take(index));
        }
        Mapping::new(size)
    })
}

/// Keeps `mapping` for the next call while at most `MAX_IDLE` stacks holding at most
/// the address-space share are idle; a full pool keeps the bigger stack (a big
/// stack serves every call), else `mapping` is unmapped.
fn release(mapping: Mapping) {
    let Ok(mut idle) = IDLE.lock() else {
        return;
    };
    let share = SHARE_SEEN.load(Ordering::Relaxed);
    if idle.stacks.len() < MAX_IDLE && idle.bytes.saturating_add(mapping.len) <= share {
        idle.keep(mapping);
        return;
    }
    let Some(index) = idle.index_of_smallest() else {
        return;
    };
    let smallest = idle.stacks[index].len;
    if smallest < mapping.len && idle.bytes - smallest + mapping.len <= share {
        let replaced = idle.take(index);
        idle.keep(mapping);
        drop(idle);
        drop(replaced);
    }
}

thread_local! {
    /// The lowest usable address of the stack of ours this thread runs on now (nested calls stay
    /// on it), 0 while it runs on its own.
    static LIMIT: Cell<usize> = const { Cell::new(0) };
}

/// Bytes of stack below the caller's frame, down to `limit`.
#[inline(never)]
fn room_below(limit: usize) -> usize {
    let marker = 0u8;
    (ptr::addr_of!(marker) as usize).saturating_sub(limit)
}

/// The limit of the stack of ours this thread runs on (0: none; `usize::MAX`: unknown, the
/// thread is ending).
fn current_limit() -> usize {
    LIMIT.try_with(Cell::get).unwrap_or(usize::MAX)
}

/// How many idle stacks the process keeps at most: one per script thread of a busy
/// worker (64 provider calls in flight each hold one). What a kept stack costs is
/// the address space it reserves, bounded by the share of `RLIMIT_AS` together with
/// the stacks in calls, and the pages left resident at its top (`KEEP_HOT`).
const MAX_IDLE: usize = 128;
/// Stacks that may keep what a short call touched untrimmed (back-to-back calls of
/// one thread reuse them without a system call); every other stack is trimmed
/// after each call, so what idle stacks hold resident stays bounded.
const UNTRIMMED: usize = 2;
/// A call that ran this long may have touched deep stack pages: give them back.
const TRIM_AFTER: Duration = Duration::from_millis(1);
/// What stays resident at the top of a trimmed stack (a provider call waiting on
/// HTTP touches ~100 KiB).
const KEEP_HOT: usize = 256 << 10;
/// How many stacks are `dirty` (at most `UNTRIMMED`).
static DIRTY: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` on a stack of at least `size` bytes if it can be had (on the current one if `f` is
/// nested inside another such call); `f` is told the bytes of stack it has below it (less than
/// `size` when the share is taken or it is nested). `None` if no stack can be made (address space
/// exhausted): running a script on the caller's small stack is what crashed.
///
/// Thread-locals, the GIL state and Python code inside `f` behave as usual: the
/// thread is the same, only its stack pointer moves.
pub fn try_run_on_big_stack<R>(size: usize, f: impl FnOnce(usize) -> R) -> Option<R> {
    match current_limit() {
        0 => {}
        usize::MAX => return Some(f(0)),
        limit => return Some(f(room_below(limit))),
    }
    let mut mapping = acquire(size)?;
    let started = Instant::now();
    let limit = mapping.limit();
    LIMIT.set(limit);
    let outcome = run_on(&mapping, move || f(room_below(limit)));
    LIMIT.set(0);
    if started.elapsed() >= TRIM_AFTER {
        mapping.trim();
    } else {
        mapping.settle_after_short_call();
    }
    release(mapping);
    Some(unwrap_outcome(outcome))
}

/// Like `try_run_on_big_stack`, running `f` on the current stack if no stack can be
/// made: for work that is iterative anyway and only frees deep values.
pub fn run_on_big_stack<R>(size: usize, f: impl FnOnce() -> R) -> R {
    let mut f = Some(f);
    match try_run_on_big_stack(size, |_| f.take().map(|f| f())) {
        Some(Some(value)) => value,
        _ => match f.take() {
            Some(f) => f(),
            None => unreachable_outcome(),
        },
    }
}

/// Runs `f` on a stack of `size` bytes made for it alone (unless already on one of
/// ours): for rare work, such as freeing a value Python held, that must not keep
/// a big stack cached on an arbitrary thread.
pub fn run_on_fresh_stack<R>(size: usize, f: impl FnOnce() -> R) -> R {
    if current_limit() != 0 {
        return f();
    }
    let Some(mapping) = Mapping::new(size) else {
        return f();
    };
    let _ = LIMIT.try_with(|a| a.set(mapping.limit()));
    let outcome = run_on(&mapping, f);
    let _ = LIMIT.try_with(|a| a.set(0));
    drop(mapping);
    unwrap_outcome(outcome)
}

fn run_on<R>(mapping: &Mapping, f: impl FnOnce() -> R) -> Option<std::thread::Result<R>> {
    let mut outcome = None;
    {
        let slot = &mut outcome;
        let body = move || *slot = Some(catch_unwind(AssertUnwindSafe(f)));
        // SAFETY: the region is mapped read/write and stays mapped while `mapping`
        // is borrowed; `body` cannot unwind (it catches every panic).
        unsafe {
            psm::on_stack(mapping.base.cast::<u8>(), mapping.len, body);
        }
    }
    outcome
}

fn unwrap_outcome<R>(outcome: Option<std::thread::Result<R>>) -> R {
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
