//! Threads that run a recurrence in lockstep.
//!
//! The LSTM layer kernel ([`crate::lstm::cpu`]) gives each thread a range of hidden units;
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
//! With one buffer the writer would wait for the slowest reader every step.
//!
//! The calling thread is worker 0; the others are OS threads of this module's own, kept
//! between calls and blocked on a channel for the next job: started as scoped threads at each
//! call, the second worker began 215–375 thousand TSC cycles after the first, and the whole
//! call waited that long (a kept helper starts 30–125 thousand after). A call made while
//! another holds the helpers (a worker's own [`run`], two threads at once) gets scoped threads
//! started for the call. OS threads, not rayon tasks, so all of them run at once whatever
//! rayon is doing (a wait among rayon tasks could wait for a task that never starts). A
//! waiting thread spins briefly, then yields its core, so an oversubscribed machine (tests
//! running side by side) still makes progress. A panic in one worker poisons the
//! [`Progress`]: the others stop waiting and panic too, and the panic reaches the caller (a
//! helper's is caught and raised again in the caller once every worker has stopped, and the
//! helper lives on).

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, TryLockError, mpsc};

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

/// Worker `i`'s `work`, poisoning `progress` if it panics (on every path that runs a worker).
fn worker(work: &(dyn Fn(usize, &Progress) + Sync), i: usize, progress: &Progress) {
    let _poison = PoisonOnPanic(progress);
    work(i, progress);
}

/// Runs `work(i, progress)` for `i` in `0..threads` at once, `i = 0` on the calling thread, and
/// returns when all have; a panic in any worker reaches the caller once all have stopped.
///
/// The other workers run on helper threads kept for the next call (see `HELPERS`); when another
/// call holds them (two threads running layers at once, or a worker calling `run`), on scoped
/// threads started for this call.
pub fn run(threads: usize, work: impl Fn(usize, &Progress) + Sync) {
    let progress = Progress::new(threads.max(1));
    if threads <= 1 {
        return work(0, &progress);
    }
    let helpers = match HELPERS.try_lock() {
        Ok(guard) => Some(guard),
        // A panic while it was held left it as it was: every job had ended.
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    };
    match helpers {
        Some(mut helpers) => helpers.run(threads, &work, &progress),
        None => std::thread::scope(|scope| {
            for i in 1..threads {
                let (work, progress) = (&work, &progress);
                scope.spawn(move || worker(work, i, progress));
            }
            worker(&work, 0, &progress);
        }),
    }
}

/// Threads that run lockstep workers `1..` and then wait, blocked, for the next call's. Starting
/// a thread a call, the second worker of an LSTM layer call began its first step 90–150 µs
/// (215–375 thousand TSC cycles) after the first, and since the workers end in step, the whole
/// call waited that long: 0.4–0.7 % of a training layer call on the lstm bench shape.
static HELPERS: Mutex<Helpers> = Mutex::new(Helpers(Vec::new()));

/// One job queue a helper thread.
struct Helpers(Vec<mpsc::Sender<Job>>);

/// Worker `i` of a call: `work` and `progress` live on the calling thread's stack, which
/// [`Helpers::run`] leaves only after every job has reported `done`.
struct Job {
    work: *const (dyn Fn(usize, &Progress) + Sync),
    progress: *const Progress,
    i: usize,
    done: mpsc::Sender<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `work` is `Sync` and `Progress` is `Sync`, so both may be used from the helper
// thread; the pointers stay valid while the job runs (see `Job`).
unsafe impl Send for Job {}

impl Helpers {
    fn run<'a>(
        &mut self,
        threads: usize,
        work: &'a (dyn Fn(usize, &Progress) + Sync + 'a),
        progress: &Progress,
    ) {
        while self.0.len() < threads - 1 {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name(format!("s2s-lockstep-{}", self.0.len() + 1))
                .spawn(move || {
                    for job in rx {
                        // SAFETY: the caller waits for `done` before leaving the frame that
                        // holds `work` and `progress`.
                        let (work, progress) = unsafe { (&*job.work, &*job.progress) };
                        let result = catch_unwind(AssertUnwindSafe(|| worker(work, job.i, progress)));
                        let _ = job.done.send(result.err());
                    }
                })
                .expect("starting a lockstep helper thread");
            self.0.push(tx);
        }
        // SAFETY (the lifetime's erasure): see `Job`; every job sent below is waited for.
        let work_ptr: *const (dyn Fn(usize, &Progress) + Sync + 'a) = work;
        let work_ptr: *const (dyn Fn(usize, &Progress) + Sync) = unsafe { std::mem::transmute(work_ptr) };
        let (done, finished) = mpsc::channel();
        let mut sent = 0;
        for (i, queue) in (1..threads).zip(&self.0) {
            let job = Job { work: work_ptr, progress, i, done: done.clone() };
            if queue.send(job).is_ok() {
                sent += 1;
            } else {
                // The helper is gone (it cannot be: each catches its worker's panics); the
                // others must not wait for this worker.
                progress.poisoned.store(true, Ordering::Relaxed);
            }
        }
        drop(done);
        let mine = catch_unwind(AssertUnwindSafe(|| worker(work, 0, progress)));
        let mut panic = mine.err();
        for _ in 0..sent {
            // (`Err` only if a helper dropped its job unreported, which it does not.)
            if let Ok(Some(p)) = finished.recv() {
                panic.get_or_insert(p);
            }
        }
        if let Some(p) = panic {
            resume_unwind(p);
        }
        assert!(sent == threads - 1, "a lockstep helper thread is gone");
    }
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

    /// A panicking worker does not leave the others waiting forever, on the kept helper
    /// threads or on scoped ones (a worker's own `run`), and the helpers still work afterwards.
    #[test]
    fn a_panic_reaches_the_caller() {
        for nested in [false, true] {
            let fail = || {
                run(2, |i, progress| {
                    if i == 1 {
                        panic!("worker 1 fails");
                    }
                    progress.wait_published(1, 0);
                })
            };
            let result = std::panic::catch_unwind(|| {
                if nested {
                    run(2, |i, _| {
                        if i == 0 {
                            fail();
                        }
                    })
                } else {
                    fail()
                }
            });
            assert!(result.is_err());
        }
        let seen = AtomicUsize::new(0);
        run(3, |i, _| {
            seen.fetch_or(1 << i, Ordering::Relaxed);
        });
        assert_eq!(seen.into_inner(), 0b111);
    }

    /// Workers `1..` run on threads kept between calls while no other call holds them; a call
    /// made meanwhile (here from a worker of another) gets threads of its own, and both finish.
    #[test]
    fn helper_threads_are_kept_and_shared_safely() {
        let worker_one = || {
            let id = Mutex::new(None);
            run(2, |i, _| {
                if i == 1 {
                    *id.lock().unwrap() = Some(std::thread::current().id());
                }
            });
            id.into_inner().unwrap().expect("worker 1 ran")
        };
        // (Other tests run `run` at the same time, so the helpers are not always free: look for
        // two calls in a row that got the same thread, for up to a minute.)
        let start = std::time::Instant::now();
        let kept = std::iter::from_fn(|| {
            (start.elapsed().as_secs() < 60).then(|| {
                std::thread::sleep(std::time::Duration::from_millis(1));
                worker_one() == worker_one()
            })
        })
        .any(|same| same);
        assert!(kept, "worker 1 never ran on the same thread twice in a row");
        let inner = AtomicUsize::new(0);
        run(2, |i, _| {
            if i == 1 {
                run(3, |_, _| {
                    inner.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(inner.into_inner(), 3);
    }
}
