//! The threads of a step cut into parts (`s2s_train::core_split`): a part's thread that has
//! finished helps the parts still running with their large products.
//!
//! A training step cut in two runs each half on one core, and the halves take equal work. But
//! a shared VM's two vCPUs do not run at equal speed: one is often a fifth slower than the
//! other for a while, and the first half to finish waited for the other with its core idle —
//! 10–195 ms of a 700–1,300 ms step on the Zen 3 EPYC VM (2026-11-28), ~12 % of the step for
//! the Transformer and Luong. About four fifths of that tail is large products (the weight
//! gradients and `∂x` of the first layers, whose backward comes last).
//!
//! [`Crew::part`] runs one part's work with the crew known to its thread; once the work
//! returns, the thread waits for pieces to help with until every part has finished. A large
//! product started while a member waits idle ([`idle`]) cuts itself into pieces and
//! [`offer`]s all but the first: it computes the first itself, takes back every piece nobody
//! has claimed, and waits for the ones a helper claimed. A piece is a product of its own over
//! some rows or columns of the output (a packed product's column ranges, each step of an LSTM
//! layer's recurrence included: a part runs its layers on its own thread), with every output
//! element summed in the same order as in the whole product, so the result has the same bits
//! whoever computes it and however it is cut (`gemm::flex`'s and `gemm::packed`'s tests hold
//! them equal): a step's result never depends on which vCPU ran late. Training gained 1.03×
//! for the Transformer, Luong and the LSTM in paired runs (`docs/benchmarks.md`); decoding's
//! halves (`evaluate::decode_split`) run as a crew too, where the bench's halves end together
//! and nothing changed.
//!
//! The waiting helper sleeps on a condition variable between pieces (a 1 ms timeout bounds a
//! missed wake-up), so a crew costs nothing while every part is busy.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The parts of one step, run at once, each on its own thread ([`Crew::part`]).
pub struct Crew {
    /// Parts whose own work has not returned yet.
    running: AtomicUsize,
    /// Members waiting for a piece to help with.
    idle: AtomicUsize,
    /// Pieces offered and not yet taken from here (some may have been taken back by their
    /// owner meanwhile: a helper skips those).
    offered: Mutex<Vec<Arc<Piece>>>,
    wake: Condvar,
}

thread_local! {
    /// The crew whose part this thread is running, while it runs it.
    static CURRENT: Cell<*const Crew> = const { Cell::new(std::ptr::null()) };
}

impl Crew {
    /// A crew of `parts` parts.
    pub fn new(parts: usize) -> Self {
        Self {
            running: AtomicUsize::new(parts),
            idle: AtomicUsize::new(0),
            offered: Mutex::new(Vec::new()),
            wake: Condvar::new(),
        }
    }

    /// `work` as one of the crew's parts (each of its `parts` threads calls this once): its
    /// large products may be helped by idle members; once it returns (or panics), this thread
    /// helps the others until every part's work has returned.
    pub fn part<T>(&self, work: impl FnOnce() -> T) -> T {
        /// Marks the part finished however `work` ends, so no member waits for it forever.
        struct Finished<'a>(&'a Crew);
        impl Drop for Finished<'_> {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(std::ptr::null()));
                self.0.running.fetch_sub(1, Ordering::AcqRel);
                // Taking the lock orders this against a helper between its check of `running`
                // and its wait.
                drop(self.0.offered.lock().unwrap_or_else(|e| e.into_inner()));
                self.0.wake.notify_all();
            }
        }
        let out = {
            let _finished = Finished(self);
            CURRENT.with(|c| c.set(self));
            work()
        };
        self.help();
        out
    }

    /// Runs offered pieces until every part's work has returned.
    fn help(&self) {
        self.idle.fetch_add(1, Ordering::AcqRel);
        loop {
            let piece = {
                let mut offered = self.offered.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if let Some(p) = offered.pop() {
                        break Some(p);
                    }
                    if self.running.load(Ordering::Acquire) == 0 {
                        break None;
                    }
                    offered = self
                        .wake
                        .wait_timeout(offered, Duration::from_millis(1))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            };
            let Some(piece) = piece else { break };
            if piece.claim() {
                self.idle.fetch_sub(1, Ordering::AcqRel);
                #[cfg(test)]
                HELPED.with(|n| n.set(n.get() + 1));
                piece.run();
                self.idle.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.idle.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
thread_local! {
    /// Pieces this thread ran as a helper (a test checks that help happened; per thread, so
    /// that tests running at once do not count each other's).
    pub(crate) static HELPED: Cell<usize> = const { Cell::new(0) };
}

/// How many members of this thread's crew wait idle for pieces (0 outside a crew's part).
pub(crate) fn idle() -> usize {
    CURRENT.with(|c| {
        let crew = c.get();
        // SAFETY: `CURRENT` points at the crew only while `Crew::part` runs this thread's
        // work, which borrows the crew for that long.
        if crew.is_null() { 0 } else { unsafe { &*crew }.idle.load(Ordering::Acquire) }
    })
}

/// `work(i)` for every `i < pieces`: piece 0 here, the others offered to this thread's crew
/// (each runs exactly once, here or on a helper); returns when all have run. Outside a crew's
/// part, all run here in order.
pub(crate) fn offer(pieces: usize, work: &(dyn Fn(usize) + Sync)) {
    let crew = CURRENT.with(|c| c.get());
    if crew.is_null() || pieces < 2 {
        (0..pieces).for_each(work);
        return;
    }
    // SAFETY: as in `idle`.
    let crew = unsafe { &*crew };
    // SAFETY: the pieces hold `work` only until they are done: this function does not return
    // (nor unwind: a panic in a piece here is held until every offered piece is done) before
    // each offered piece is done or was taken back, and a helper that pops a piece taken back
    // never calls it.
    let job: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(work) };
    let pieces: Vec<Arc<Piece>> =
        (1..pieces).map(|i| Arc::new(Piece { job, index: i, state: AtomicU8::new(QUEUED) })).collect();
    {
        let mut offered = crew.offered.lock().unwrap_or_else(|e| e.into_inner());
        // Helpers pop from the end: the last pieces first, while this thread works from the start.
        offered.extend(pieces.iter().cloned());
    }
    crew.wake.notify_all();
    let mine = catch_unwind(AssertUnwindSafe(|| work(0)));
    for p in &pieces {
        if p.claim() {
            if mine.is_ok() {
                p.run();
            } else {
                // This call panics below anyway: the piece is dropped, not run.
                p.state.store(DONE, Ordering::Release);
            }
        }
    }
    for p in &pieces {
        loop {
            match p.state.load(Ordering::Acquire) {
                DONE => break,
                FAILED => panic!("a product's piece panicked on a helper thread"),
                _ => std::thread::yield_now(),
            }
        }
    }
    if let Err(e) = mine {
        resume_unwind(e);
    }
}

const QUEUED: u8 = 0;
const CLAIMED: u8 = 1;
const DONE: u8 = 2;
const FAILED: u8 = 3;

/// One offered piece of a job: `job(index)`, run by whoever claims it first.
struct Piece {
    job: &'static (dyn Fn(usize) + Sync),
    index: usize,
    state: AtomicU8,
}

impl Piece {
    /// Whether this caller is the one to run the piece.
    fn claim(&self) -> bool {
        self.state.compare_exchange(QUEUED, CLAIMED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Runs a claimed piece; its writes are visible to whoever sees it done.
    fn run(&self) {
        let ok = catch_unwind(AssertUnwindSafe(|| (self.job)(self.index))).is_ok();
        self.state.store(if ok { DONE } else { FAILED }, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    /// Each piece runs exactly once, and a part that has finished runs some of another's.
    #[test]
    fn a_finished_part_helps_the_other_and_every_piece_runs_once() {
        let crew = Crew::new(2);
        let runs: Vec<AtomicUsize> = (0..8).map(|_| AtomicUsize::new(0)).collect();
        let helped = AtomicBool::new(false);
        let owner = std::thread::current().id();
        std::thread::scope(|s| {
            s.spawn(|| crew.part(|| ()));
            crew.part(|| {
                // Offer once the other part waits idle; the first piece waits (bounded) until a
                // helper has run one, so the test fails if nobody helps.
                let start = Instant::now();
                while idle() == 0 {
                    assert!(start.elapsed() < Duration::from_secs(10), "the finished part never waited idle");
                    std::thread::yield_now();
                }
                offer(8, &|i| {
                    if i == 0 {
                        while !helped.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(10) {
                            std::thread::yield_now();
                        }
                    } else if std::thread::current().id() != owner {
                        helped.store(true, Ordering::Release);
                    }
                    runs[i].fetch_add(1, Ordering::AcqRel);
                });
            });
        });
        assert!(helped.load(Ordering::Acquire), "no piece ran on the finished part's thread");
        assert!(runs.iter().all(|r| r.load(Ordering::Acquire) == 1), "a piece ran other than once");
    }

    /// Outside a crew, and with one piece, everything runs here in order.
    #[test]
    fn outside_a_crew_the_pieces_run_here_in_order() {
        let order = Mutex::new(Vec::new());
        offer(3, &|i| order.lock().unwrap().push(i));
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(idle(), 0);
    }

    /// A panicking part still ends the crew: the other part's helping stops, and the panic
    /// reaches the part's caller.
    #[test]
    fn a_part_that_panics_does_not_leave_the_others_waiting() {
        let crew = Crew::new(2);
        std::thread::scope(|s| {
            let other = s.spawn(|| crew.part(|| 7));
            let mine = catch_unwind(AssertUnwindSafe(|| crew.part(|| panic!("boom"))));
            assert!(mine.is_err());
            assert_eq!(other.join().unwrap(), 7);
        });
    }
}
