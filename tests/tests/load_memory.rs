//! [9/9]: what loading plugins leaves on the host's heap. Alone in its test binary (its own
//! process): it reads the allocator's totals, which tests running beside it would move.

//!
//! Linux only: it reads glibc's allocator (`mallinfo2`).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // test helpers fail loudly

use rho_worker::loader::{CopyDir, PluginFile};

/// Bytes the allocator holds from the system, every arena together (glibc's `mallinfo2`).
fn heap_bytes() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    info.arena + info.hblkhd
}

#[test]
fn hashing_plugin_files_keeps_no_buffer_on_the_heap() {
    // The hashing thread read each private copy back a megabyte at a time. glibc maps a buffer
    // that large and unmaps it on free, then raises its mmap threshold past it, so from the
    // second load on the buffer came from the thread's arena and stayed there: about a megabyte
    // held for good (a tenth of `mem_plugin` per plugin when ten were loaded). The buffer is now
    // under the threshold.
    let echo = rho_tests::built().join("libecho.so");
    let copies = CopyDir::new().unwrap();
    let open = || {
        let file = PluginFile::open(&echo, &copies).unwrap();
        assert!(!file.sha256.is_empty());
    };
    // The hashing thread starts and makes its arena at the first copy.
    open();
    let before = heap_bytes();
    for _ in 0..6 {
        open();
    }
    let grown = heap_bytes().saturating_sub(before);
    assert!(
        grown < 512 << 10,
        "six plugin files hashed left the heap {} KiB larger",
        grown >> 10
    );
}
