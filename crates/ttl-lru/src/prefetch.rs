//! A software prefetch: the hint that a cache line is about to be read, so that its miss
//! overlaps with other work instead of stalling the code that needs it (an insert at capacity
//! into a large cache would otherwise wait on its sampled victims after waiting on the new key's
//! index probe).

/// Asks the processor to bring the line holding `p` into its caches. A hint only: it reads
/// nothing the program sees, and does nothing off x86-64 or under loom.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(herd_loom)))]
    #[allow(unsafe_code)]
    // SAFETY: `_mm_prefetch` is a hint: it never faults (whatever the address), has no effect on
    // memory the program can observe, and needs only SSE, which every x86-64 processor has.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(herd_loom))))]
    let _ = p;
}
