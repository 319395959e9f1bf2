//! Threads that run a recurrence in lockstep (issue 12).
//!
//! The LSTM layer kernel ([`crate::fused_lstm`]) gives each thread a range of hidden units;
//! every time step, each thread needs every other thread's previous state. Forking the step
//! onto rayon's pool and joining it again costs 20–60 µs a step on the 2-core VM (measured:
//! two 400 µs halves took 459 µs), because the idle worker falls asleep between steps and has
//! to be woken. [`run`] instead keeps the threads for the whole layer; they meet at a
//! spinning [`Barrier`], or wait for just what they need from one another with
//! [`Barrier::wait_until`] on counters of their own (the LSTM layer does the latter: a
//! barrier per step made both threads wait for the slower one every step).
//!
//! The calling thread is worker 0; the others are scoped OS threads, so all of them run at
//! once whatever rayon is doing (a barrier among rayon tasks could wait for a task that never
//! starts). A waiting thread spins briefly, then yields its core, so an oversubscribed
//! machine (tests running side by side) still makes progress. A panic in one worker poisons
//! the barrier: the others stop waiting and panic too, and the panic reaches the caller.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A reusable barrier for a fixed number of threads that spins, then yields, while it waits.
#[derive(Debug)]
pub struct Barrier {
    threads: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    poisoned: AtomicBool,
}

impl Barrier {
    fn new(threads: usize) -> Self {
        Self {
            threads,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Returns once every thread has called `wait` as often as this one has: what any of them
    /// wrote before is then visible to all.
    ///
    /// # Panics
    /// When another worker panicked.
    pub fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        self.wait_until(|| self.generation.load(Ordering::Acquire) != generation);
    }

    /// Returns once `ready()` holds, spinning, then yielding, meanwhile: for point-to-point
    /// waits between barriers (one worker waiting for a counter that another publishes with
    /// `Release`, read here with `Acquire`).
    ///
    /// # Panics
    /// When another worker panicked.
    pub fn wait_until(&self, ready: impl Fn() -> bool) {
        let mut spins = 0u32;
        while !ready() {
            assert!(!self.poisoned.load(Ordering::Relaxed), "another lockstep worker panicked");
            if spins < 4096 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Marks the barrier poisoned when its worker unwinds.
struct PoisonOnPanic<'a>(&'a Barrier);

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.poisoned.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs `work(i, barrier)` for `i` in `0..threads` at once, `i = 0` on the calling thread, and
/// returns when all have. Every worker must call `barrier.wait()` equally often.
pub fn run(threads: usize, work: impl Fn(usize, &Barrier) + Sync) {
    let barrier = Barrier::new(threads.max(1));
    std::thread::scope(|scope| {
        for i in 1..threads {
            let (work, barrier) = (&work, &barrier);
            scope.spawn(move || {
                let _poison = PoisonOnPanic(barrier);
                work(i, barrier);
            });
        }
        let _poison = PoisonOnPanic(&barrier);
        work(0, &barrier);
    });
}

/// A value shared by lockstep workers: one writes it while no other touches it, or all read it
/// while none writes — which phase is which is the caller's protocol, between barriers.
#[derive(Debug)]
pub struct Slot<T>(UnsafeCell<T>);

// SAFETY: access follows the protocol of `get` / `get_mut`, separated by `Barrier::wait`,
// whose acquire/release ordering publishes each phase's writes to the next.
unsafe impl<T: Send + Sync> Sync for Slot<T> {}

impl<T> Slot<T> {
    /// Wraps a value.
    pub fn new(value: T) -> Self {
        Self(UnsafeCell::new(value))
    }

    /// Reads the value.
    ///
    /// # Safety
    /// No thread writes it until every reader has passed the next barrier.
    pub unsafe fn get(&self) -> &T {
        unsafe { &*self.0.get() }
    }

    /// Writes the value.
    ///
    /// # Safety
    /// No other thread reads or writes it until the next barrier.
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

    /// Three workers pass values around a ring for many steps through double-buffered slots:
    /// any step read before its writer finished (a barrier that lets a thread through early)
    /// would break the running sums.
    #[test]
    fn workers_see_each_others_previous_step() {
        let (n, steps) = (3usize, 2000usize);
        let slots: Vec<[Slot<u64>; 2]> = (0..n).map(|i| [Slot::new(i as u64), Slot::new(0)]).collect();
        run(n, |i, barrier| {
            for s in 0..steps {
                let (cur, next) = (s % 2, (s + 1) % 2);
                // SAFETY: step s reads every `cur` slot and writes only this worker's `next` one.
                let left = unsafe { *slots[(i + n - 1) % n][cur].get() };
                unsafe { *slots[i][next].get_mut() = left + 1 };
                barrier.wait();
            }
        });
        let total: u64 = slots
            .into_iter()
            .map(|[a, b]| if steps % 2 == 0 { a.into_inner() } else { b.into_inner() })
            .sum();
        // Every step moves each value one place to the right and adds 1.
        assert_eq!(total, (0..n as u64).sum::<u64>() + (n * steps) as u64);
    }

    /// A panicking worker does not leave the others waiting forever.
    #[test]
    fn a_panic_reaches_the_caller() {
        let result = std::panic::catch_unwind(|| {
            run(2, |i, barrier| {
                if i == 1 {
                    panic!("worker 1 fails");
                }
                barrier.wait();
            })
        });
        assert!(result.is_err());
    }
}
