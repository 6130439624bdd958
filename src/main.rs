//! The `sinklab` binary: parses the command line and dispatches to [`sinklab::commands`].

use clap::Parser;

/// mimalloc keeps freed tensor buffers mapped, which removes most page-fault time from the
/// training loop (glibc malloc returns large buffers to the OS every step).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Never return freed pages to the OS: the training loop frees and reallocates the same
    // tensor sizes every step, and re-faulting zeroed pages cost ~5% of a step.
    // `mi_option_purge_delay` is entry 15 of `mi_option_e` in both mimalloc v2 and v3
    // (c_src/mimalloc/v*/include/mimalloc.h); -1 means "never purge".
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: sets a process-wide allocator option; no memory is touched.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
    }
    if let Err(e) = sinklab::commands::run(sinklab::commands::Cli::parse()) {
        eprintln!("error: {e:#}");
        // Another process holds the directory this command would write: EX_TEMPFAIL, which a
        // sweep tells apart from a failure.
        let busy = sinklab::lock::is_busy(&e);
        std::process::exit(if busy { sinklab::lock::EXIT_BUSY } else { 1 });
    }
}
