//! A CPU training step cut over the cores: the batch split by sentence into `parts`, each
//! part's forward and backward computed at once on its own share of the cores, their gradients
//! summed — data parallelism inside one process, as DDP runs it across processes.
//!
//! Why: with every core on each operation, a step's small and element-wise operations, its
//! recurrences and the barriers between them leave cores idle, and on two cores our step
//! gained 1.6× from the second core where PyTorch's gained 1.8× (`scripts/threads.sh`, docs/
//! benchmarks.md). Two halves of a batch on one core each share nothing but the weights: the
//! second core gains what memory traffic leaves it.
//!
//! The step is [`crate::step::take`]'s, its batch spread as [`crate::step::Spread::Cores`]: the
//! loss of each part is its label-smoothed sum over the whole batch's token count, so the
//! summed gradient is the whole batch's, up to rounding (a weight gradient is summed in two
//! halves). Results therefore depend on `parts` (a setting, default 2 on the CPU), never on the
//! machine's core count: with fewer threads than parts the parts run one after another.
//! Each part draws its dropout masks from its own seed (`s2s_kernels::ops::reseed` in the
//! thread that computes it).
//!
//! The parts run as one [`s2s_kernels::Crew`]: a VM's vCPUs do not run at equal speed, and
//! the part that finishes first helps the other's large products instead of waiting idle.
//!
//! Decoding on the CPU cuts its batches the same way (`crate::evaluate::decode_split`): a
//! sentence's translation does not depend on its batch, so there the output is the same.
//!
//! Measured on the Zen 3 EPYC VM (2 vCPUs, AVX2; 2026-11-27, `s2s bench --device cpu
//! --core-split 1|2`, alternated): training the Transformer 1.22–1.30× and the LSTM
//! 1.05–1.14× faster cut in two. The ratios to PyTorch: docs/benchmarks.md.

use std::ops::Range;

use rayon::{ThreadPool, ThreadPoolBuilder};

/// The thread pools the parts of a step run on: one per part, each with its share of the
/// current pool's threads; none (the parts run one after another, on the current pool) when
/// there are fewer threads than parts or one part.
pub struct CoreSplit {
    parts: usize,
    pools: Vec<ThreadPool>,
}

impl CoreSplit {
    /// Steps cut into `parts` parts (at least 1), on pools made from the current rayon pool's
    /// threads.
    pub fn new(parts: usize) -> Self {
        let parts = parts.max(1);
        let threads = rayon::current_num_threads();
        let pools = if parts > 1 && threads >= parts {
            (0..parts)
                .map(|i| {
                    // The first parts take the threads that do not divide evenly.
                    let n = threads / parts + usize::from(i < threads % parts);
                    ThreadPoolBuilder::new()
                        .num_threads(n)
                        .thread_name(move |t| format!("s2s-part{i}-{t}"))
                        .build()
                        .expect("a thread pool for a part of the step")
                })
                .collect()
        } else {
            Vec::new()
        };
        Self { parts, pools }
    }

    /// How many parts a step is cut into.
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// Whether the parts run at once.
    pub fn parallel(&self) -> bool {
        !self.pools.is_empty()
    }

    /// `work(i)` for each part `i`, at once on the parts' pools, or one after another here;
    /// the results in part order.
    pub fn run<T: Send>(&self, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
        self.run_first(self.parts, work)
    }

    /// [`run`](Self::run) over the first `n` parts (`n ≤ parts`): at once only when `n` is
    /// every part (a batch of fewer sentences than parts runs its parts here).
    pub fn run_first<T: Send>(&self, n: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
        if self.pools.is_empty() || n != self.parts {
            return (0..n).map(work).collect();
        }
        // A part that finishes first helps the others' large products (`Crew`).
        let crew = &s2s_kernels::Crew::new(n);
        // The parts' threads decode with this thread's products (`with_quantize` here).
        let quantize = s2s_kernels::quantize::quantize();
        let work = &|i| s2s_kernels::quantize::with_quantize(quantize, || crew.part(|| work(i)));
        std::thread::scope(|s| {
            let others: Vec<_> = self.pools[1..]
                .iter()
                .enumerate()
                .map(|(i, pool)| s.spawn(move || pool.install(|| work(i + 1))))
                .collect();
            let first = self.pools[0].install(|| work(0));
            std::iter::once(first)
                .chain(others.into_iter().map(|h| h.join().expect("a part of the training step panicked")))
                .collect()
        })
    }
}

/// `n` rows cut into `parts` contiguous ranges whose lengths differ by at most one (empty
/// ranges when `n < parts` are left out).
pub fn row_ranges(n: usize, parts: usize) -> Vec<Range<usize>> {
    let parts = parts.max(1);
    let mut start = 0;
    (0..parts)
        .map(|i| {
            let len = n / parts + usize::from(i < n % parts);
            let r = start..start + len;
            start += len;
            r
        })
        .filter(|r| !r.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_cut_evenly_in_order_and_none_is_lost() {
        assert_eq!(row_ranges(64, 2), vec![0..32, 32..64]);
        assert_eq!(row_ranges(7, 3), vec![0..3, 3..5, 5..7]);
        assert_eq!(row_ranges(1, 2), vec![0..1]);
        assert_eq!(row_ranges(5, 1), vec![0..5]);
    }

    #[test]
    fn parts_run_on_their_own_pools_at_once_and_come_back_in_order() {
        let outer = ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        outer.install(|| {
            let split = CoreSplit::new(2);
            assert!(split.parallel());
            // Each part sees a pool of its share of the threads. Both wait for each other: this
            // only ends when they run at once.
            let barrier = std::sync::Barrier::new(2);
            let seen = split.run(|i| {
                barrier.wait();
                (i, rayon::current_num_threads())
            });
            assert_eq!(seen, vec![(0, 2), (1, 2)]);
        });
        let one = ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        one.install(|| {
            let split = CoreSplit::new(2);
            assert!(!split.parallel());
            assert_eq!(split.run(|i| i), vec![0, 1], "one after another with fewer threads than parts");
        });
    }
}
