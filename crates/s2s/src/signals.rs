//! SIGINT/SIGTERM for long commands: the first asks the training loop to stop after the
//! current step (it then checkpoints and exits 0); the second exits at once with 130.
//!
//! Written against the C library directly (two `extern` declarations, Unix only) rather
//! than with a crate: the handler only touches an atomic flag and calls async-signal-safe
//! `write` and `_exit`.

#[cfg(unix)]
mod imp {
    use std::sync::atomic::{AtomicBool, Ordering};

    unsafe extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
        fn write(fd: i32, buf: *const u8, count: usize) -> isize;
        fn _exit(status: i32) -> !;
    }

    const SIGINT: i32 = 2;
    const SIGTERM: i32 = 15;
    static SEEN: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_signal(_: i32) {
        if SEEN.swap(true, Ordering::SeqCst) {
            // SAFETY: `_exit` is async-signal-safe.
            unsafe { _exit(130) }
        }
        let msg = b"\nstopping after this step (signal again to abort without a checkpoint)\n";
        // SAFETY: `write` is async-signal-safe; the buffer is static.
        unsafe {
            write(2, msg.as_ptr(), msg.len());
        }
        s2s_train::interrupt::request_stop();
    }

    pub fn install() {
        // SAFETY: installs a handler that only uses async-signal-safe operations.
        unsafe {
            signal(SIGINT, on_signal as extern "C" fn(i32) as usize);
            signal(SIGTERM, on_signal as extern "C" fn(i32) as usize);
        }
    }
}

/// Installs the handlers (no-op where signals do not exist).
pub fn install() {
    #[cfg(unix)]
    imp::install();
}
