//! Threads that run a recurrence in lockstep (issue 12).
//!
//! The LSTM layer kernel ([`crate::fused_lstm`]) gives each thread a range of hidden units;
//! every time step, each thread needs every other thread's previous state. Forking the step
//! onto rayon's pool and joining it again costs 20–60 µs a step on the 2-core VM (measured:
//! two 400 µs halves took 459 µs), because the idle worker falls asleep between steps and has
//! to be woken. [`run`] instead keeps the threads for the whole layer, and each waits only
//! for what it reads: every worker publishes each step's buffer ([`Progress::publish`]) and
//! waits for another's just before it reads it ([`Progress::wait_published`]). With a
//! barrier per step instead, both threads waited for the slower one every step (a median of
//! ~170–300 thousand TSC cycles a step per thread on the 2-core VM, whose two vCPUs' speed
//! differs from step to step; with these waits, 0–16).
//!
//! Waiting for publications is enough when each worker's buffer is doubled (step `s` writes
//! `[s % 2]`) and every worker waits for every buffer it reads: a worker rewrites the buffer
//! that others read in step `s` only two steps later, after it has waited for what they
//! published in between, which each of them published only after its reads of step `s`.
//!
//! The calling thread is worker 0; the others are scoped OS threads, so all of them run at
//! once whatever rayon is doing (a wait among rayon tasks could wait for a task that never
//! starts). A waiting thread spins briefly, then yields its core, so an oversubscribed
//! machine (tests running side by side) still makes progress. A panic in one worker poisons
//! the [`Progress`]: the others stop waiting and panic too, and the panic reaches the caller.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How far each lockstep worker has got: the steps whose buffers it has published.
#[derive(Debug)]
pub struct Progress {
    /// `published[i] = s + 1`: worker `i` has published its buffer of step `s`.
    published: Vec<AtomicUsize>,
    poisoned: AtomicBool,
}

impl Progress {
    fn new(workers: usize) -> Self {
        Self {
            published: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Worker `i` has written its buffer of step `s`: what it wrote is visible to every worker
    /// that [waits](Progress::wait_published) for it.
    pub fn publish(&self, i: usize, s: usize) {
        self.published[i].store(s + 1, Ordering::Release);
    }

    /// Returns once worker `j` has published its buffer of step `s`, spinning, then yielding,
    /// meanwhile.
    ///
    /// # Panics
    /// When another worker panicked.
    pub fn wait_published(&self, j: usize, s: usize) {
        let mut spins = 0u32;
        while self.published[j].load(Ordering::Acquire) <= s {
            assert!(!self.poisoned.load(Ordering::Relaxed), "another lockstep worker panicked");
            if spins < 4096 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The workers other than `i`, from `i + 1` round to `i − 1`.
    pub fn others(&self, i: usize) -> impl Iterator<Item = usize> + use<> {
        let n = self.published.len();
        (1..n).map(move |d| (i + d) % n)
    }
}

/// Marks the progress poisoned when its worker unwinds.
struct PoisonOnPanic<'a>(&'a Progress);

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.poisoned.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs `work(i, progress)` for `i` in `0..threads` at once, `i = 0` on the calling thread, and
/// returns when all have.
pub fn run(threads: usize, work: impl Fn(usize, &Progress) + Sync) {
    let progress = Progress::new(threads.max(1));
    std::thread::scope(|scope| {
        for i in 1..threads {
            let (work, progress) = (&work, &progress);
            scope.spawn(move || {
                let _poison = PoisonOnPanic(progress);
                work(i, progress);
            });
        }
        let _poison = PoisonOnPanic(&progress);
        work(0, &progress);
    });
}

/// A value shared by lockstep workers: one writes it while no other touches it, or all read it
/// while none writes — which phase is which is the caller's protocol, ordered through
/// [`Progress`].
#[derive(Debug)]
pub struct Slot<T>(UnsafeCell<T>);

// SAFETY: access follows the protocol of `get` / `get_mut`, ordered by `Progress::publish` /
// `wait_published`, whose release/acquire ordering makes each write visible to its readers.
unsafe impl<T: Send + Sync> Sync for Slot<T> {}

impl<T> Slot<T> {
    /// Wraps a value.
    pub fn new(value: T) -> Self {
        Self(UnsafeCell::new(value))
    }

    /// Reads the value.
    ///
    /// # Safety
    /// No thread writes it until this reader is done with it.
    pub unsafe fn get(&self) -> &T {
        unsafe { &*self.0.get() }
    }

    /// Writes the value.
    ///
    /// # Safety
    /// No other thread reads or writes it meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_mut(&self) -> &mut T {
        unsafe { &mut *self.0.get() }
    }

    /// The value, once the workers are done.
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three workers, each reading every worker's value of the step before and publishing its
    /// own, through double-buffered slots, for many steps (worker 0 now and then yielding its
    /// core, so the others run ahead as far as the waits let them): a value read before it was
    /// published, or overwritten while still being read, would break the running values.
    #[test]
    fn workers_see_each_others_previous_step() {
        let (n, steps) = (3usize, 2000usize);
        let next = |prev: &[u64], i: usize| prev.iter().sum::<u64>() % 1_000_003 + i as u64;
        let slots: Vec<[Slot<u64>; 2]> = (0..n).map(|i| [Slot::new(i as u64), Slot::new(0)]).collect();
        run(n, |i, progress| {
            for s in 0..steps {
                let (cur, nxt) = (s % 2, (s + 1) % 2);
                let prev: Vec<u64> = (0..n)
                    .map(|j| {
                        if j != i && s > 0 {
                            progress.wait_published(j, s - 1);
                        }
                        // SAFETY: worker `j` published `[cur]` in step `s − 1` and rewrites it
                        // in step `s + 1`, after waiting for this worker's step `s`.
                        unsafe { *slots[j][cur].get() }
                    })
                    .collect();
                if i == 0 && s % 7 == 0 {
                    std::thread::yield_now();
                }
                // SAFETY: the others read `[nxt]` in step `s − 1`, before publishing that step,
                // which this worker waited for.
                unsafe { *slots[i][nxt].get_mut() = next(&prev, i) };
                progress.publish(i, s);
            }
        });
        let mut expected: Vec<u64> = (0..n as u64).collect();
        for _ in 0..steps {
            expected = (0..n).map(|i| next(&expected, i)).collect();
        }
        let last = steps % 2;
        let got: Vec<u64> =
            slots.into_iter().map(|pair| pair.into_iter().nth(last).unwrap().into_inner()).collect();
        assert_eq!(got, expected);
    }

    /// A panicking worker does not leave the others waiting forever.
    #[test]
    fn a_panic_reaches_the_caller() {
        let result = std::panic::catch_unwind(|| {
            run(2, |i, progress| {
                if i == 1 {
                    panic!("worker 1 fails");
                }
                progress.wait_published(1, 0);
            })
        });
        assert!(result.is_err());
    }
}
