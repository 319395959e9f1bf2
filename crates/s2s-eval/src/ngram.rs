//! Allocation-free n-gram counting shared by BLEU and chrF (crate-private).
//!
//! Tokens are interned to `u32` ids per segment (chrF uses code points directly) and the
//! n-grams of the reference(s) are stored in a trie ([`NgramTrie`]). Matching happens
//! per segment, so ids only need to be consistent within a segment.

use std::hash::Hasher;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A small, fast, non-cryptographic hasher (FxHash-style) for the token interner.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// The id [`Interner::get`] gives a token the segment's references lack. It is never a
/// real id, so n-grams containing it never match.
pub(crate) const UNKNOWN: u32 = u32::MAX;

#[derive(Clone, Copy, Default)]
struct TokSlot {
    hash: u64,
    stamp: u32,
    id: u32,
}

/// Maps the token strings of one segment to dense `u32` ids. Reset for every segment,
/// so it stays small and hot in cache; token bytes are copied into an arena.
pub(crate) struct Interner {
    arena: Vec<u8>,
    /// `(start, len)` in `arena`, per id.
    spans: Vec<(usize, usize)>,
    slots: Vec<TokSlot>,
    /// Slots in use (a power of two, at most `slots.len()`), back to the minimum at
    /// each reset so that a long segment does not slow down the short ones after it.
    cap: usize,
    shift: u32,
    epoch: u32,
}

const INTERNER_MIN_CAP: usize = 256;

impl Default for Interner {
    fn default() -> Self {
        Interner {
            arena: Vec::new(),
            spans: Vec::new(),
            slots: vec![TokSlot::default(); INTERNER_MIN_CAP],
            cap: INTERNER_MIN_CAP,
            shift: 64 - INTERNER_MIN_CAP.trailing_zeros(),
            epoch: 1,
        }
    }
}

impl Interner {
    /// Forgets all tokens (call at the start of each segment).
    pub(crate) fn reset(&mut self) {
        self.arena.clear();
        self.spans.clear();
        self.cap = INTERNER_MIN_CAP;
        self.shift = 64 - INTERNER_MIN_CAP.trailing_zeros();
        self.bump_epoch();
    }

    /// Starts a new epoch, so that every slot reads as empty.
    fn bump_epoch(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.slots.fill(TokSlot::default());
            self.epoch = 1;
        }
    }

    #[inline]
    fn hash(tok: &[u8]) -> u64 {
        let mut h = FxHasher::default();
        h.write(tok);
        h.finish() ^ (tok.len() as u64)
    }

    /// Slot of `tok` (true) or the empty slot where it would go (false).
    #[inline]
    fn find(&self, tok: &[u8], hash: u64) -> (usize, bool) {
        let mask = self.cap - 1;
        let mut i = (hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize;
        loop {
            let s = &self.slots[i];
            if s.stamp != self.epoch {
                return (i, false);
            }
            if s.hash == hash {
                let (start, len) = self.spans[s.id as usize];
                if self.arena.get(start..start + len) == Some(tok) {
                    return (i, true);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// The id of `tok`, adding it if new.
    #[inline]
    pub(crate) fn id(&mut self, tok: &[u8]) -> u32 {
        let hash = Self::hash(tok);
        let (i, found) = self.find(tok, hash);
        if found {
            return self.slots[i].id;
        }
        if (self.spans.len() + 1) * 2 > self.cap {
            self.grow();
            return self.id(tok);
        }
        // A segment has far fewer than u32::MAX tokens.
        let id = self.spans.len() as u32;
        self.spans.push((self.arena.len(), tok.len()));
        self.arena.extend_from_slice(tok);
        self.slots[i] = TokSlot { hash, stamp: self.epoch, id };
        id
    }

    /// The id of `tok` if it was added since the last reset, else [`UNKNOWN`].
    #[inline]
    pub(crate) fn get(&self, tok: &[u8]) -> u32 {
        match self.find(tok, Self::hash(tok)) {
            (i, true) => self.slots[i].id,
            _ => UNKNOWN,
        }
    }

    /// Doubles the slots in use; ids do not change.
    fn grow(&mut self) {
        let old: Vec<TokSlot> =
            self.slots[..self.cap].iter().copied().filter(|s| s.stamp == self.epoch).collect();
        self.cap *= 2;
        self.shift = 64 - self.cap.trailing_zeros();
        if self.cap > self.slots.len() {
            self.slots.resize(self.cap, TokSlot::default());
        }
        self.bump_epoch();
        let mask = self.cap - 1;
        for s in old {
            let mut i = (s.hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize;
            while self.slots[i].stamp == self.epoch {
                i = (i + 1) & mask;
            }
            self.slots[i] = TokSlot { stamp: self.epoch, ..s };
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Slot {
    /// `parent << 32 | unit`.
    key: u64,
    /// Epoch in which this slot was filled; a slot is empty unless `stamp == epoch`.
    stamp: u32,
    /// The (maximum) reference count of the n-gram, decremented by [`NgramTrie::take`].
    count: u32,
}

/// The n-grams of the reference(s) of one segment, as a trie: the child of node `p` by
/// unit `u` (a token id or a code point) is the n-gram `p` extended by `u`, and
/// [`ROOT`] is the empty n-gram. A node *is* its slot in one open-addressing hash table
/// keyed by `(parent, unit)`; the table is sized once per segment so that it never
/// rehashes, and is cleared in O(1) by bumping an epoch. Only the first `cap` slots of
/// the allocation are used, `cap` fitted to the segment, so that one long segment does
/// not spread every later (short) segment over a large, cache-unfriendly table.
///
/// Walking the hypothesis from each position stops at the first n-gram the reference
/// lacks, since no longer n-gram from there can be in the reference either.
pub(crate) struct NgramTrie {
    slots: Vec<Slot>,
    /// Slots in use: a power of two, at most `slots.len()`.
    cap: usize,
    shift: u32,
    epoch: u32,
    /// Nodes created since the last reset.
    len: usize,
    /// Per slot, for [`NgramTrie::add_max`]: the reference `cur` counts for.
    owner: Vec<u32>,
    /// Per slot, for [`NgramTrie::add_max`]: occurrences in reference `owner`.
    cur: Vec<u32>,
}

impl Default for NgramTrie {
    fn default() -> Self {
        NgramTrie {
            slots: vec![Slot::default(); 64],
            cap: 64,
            shift: 64 - 6,
            epoch: 1,
            len: 0,
            owner: vec![],
            cur: vec![],
        }
    }
}

/// The root node: the empty n-gram.
pub(crate) const ROOT: u32 = u32::MAX;

impl NgramTrie {
    /// Empties the trie and makes room for at most `max_nodes` nodes (callers pass
    /// the number of n-gram occurrences they will insert, an upper bound).
    pub(crate) fn reset(&mut self, max_nodes: usize) {
        // A sparse table (load factor at most 1/8) measured clearly faster than a denser
        // one for sentence-sized segments; very long segments get load factor 1/2.
        let factor = if max_nodes <= 1 << 14 { 8 } else { 2 };
        let want = max_nodes.saturating_mul(factor).next_power_of_two().max(64);
        if want > self.slots.len() {
            self.slots = vec![Slot::default(); want];
            self.epoch = 1;
        } else {
            self.epoch = self.epoch.wrapping_add(1);
            if self.epoch == 0 {
                self.slots.fill(Slot::default());
                self.epoch = 1;
            }
        }
        self.cap = want;
        self.shift = 64 - want.trailing_zeros();
        self.len = 0;
    }

    #[inline]
    fn key(parent: u32, unit: u32) -> u64 {
        (u64::from(parent) << 32) | u64::from(unit)
    }

    /// Finds the slot of `key`, or the empty slot where it would go. The table always
    /// has an empty slot (see `child_or_insert`), so this terminates.
    #[inline]
    fn find(&self, key: u64) -> (usize, bool) {
        let mask = self.cap - 1;
        let mut i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize;
        loop {
            let s = &self.slots[i];
            if s.stamp != self.epoch {
                return (i, false);
            }
            if s.key == key {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    /// The child of `parent` by `unit`, if the reference has that n-gram.
    #[inline]
    pub(crate) fn child(&self, parent: u32, unit: u32) -> Option<u32> {
        match self.find(Self::key(parent, unit)) {
            (i, true) => Some(i as u32),
            _ => None,
        }
    }

    /// The child of `parent` by `unit`, created (with count 0) if new; `None` only if
    /// the trie is full, which `reset`'s bound rules out.
    #[inline]
    pub(crate) fn child_or_insert(&mut self, parent: u32, unit: u32) -> Option<u32> {
        let key = Self::key(parent, unit);
        let (i, found) = self.find(key);
        if !found {
            if self.len + 1 >= self.cap {
                return None;
            }
            self.len += 1;
            self.slots[i] = Slot { key, stamp: self.epoch, count: 0 };
            if !self.owner.is_empty() {
                self.owner[i] = u32::MAX;
            }
        }
        Some(i as u32)
    }

    /// Counts one more occurrence of `node`.
    #[inline]
    pub(crate) fn add(&mut self, node: u32) {
        self.slots[node as usize].count += 1;
    }

    /// Counts one occurrence of `node` in reference `owner`; the node's count is the
    /// maximum over references of the per-reference counts (references must be added
    /// one after the other).
    #[inline]
    pub(crate) fn add_max(&mut self, node: u32, owner: u32) {
        let n = node as usize;
        if self.owner[n] != owner {
            self.owner[n] = owner;
            self.cur[n] = 0;
        }
        self.cur[n] += 1;
        let c = &mut self.slots[n].count;
        *c = (*c).max(self.cur[n]);
    }

    /// Consumes one occurrence of `node`; true if there was one left. Consuming every
    /// hypothesis n-gram counts `sum(min(hyp_count, ref_count))`.
    #[inline]
    pub(crate) fn take(&mut self, node: u32) -> bool {
        let c = &mut self.slots[node as usize].count;
        if *c > 0 {
            *c -= 1;
            true
        } else {
            false
        }
    }

    /// Inserts the n-grams of orders 1..=`max_order` of `units`, adding each occurrence
    /// to its node's count.
    pub(crate) fn insert_all(&mut self, units: &[u32], max_order: usize) {
        self.insert_with(units, max_order, |t, node| t.add(node));
    }

    /// Inserts the n-grams of orders 1..=`max_order` of reference number `owner`, so that
    /// each node counts the maximum over references (see [`NgramTrie::add_max`]).
    pub(crate) fn insert_all_max(&mut self, units: &[u32], max_order: usize, owner: u32) {
        if self.owner.len() != self.slots.len() {
            self.owner = vec![u32::MAX; self.slots.len()];
            self.cur = vec![0; self.slots.len()];
        }
        self.insert_with(units, max_order, |t, node| t.add_max(node, owner));
    }

    #[inline]
    fn insert_with(&mut self, units: &[u32], max_order: usize, count: impl FnMut(&mut Self, u32)) {
        // A constant order lets the compiler unroll the walk, so each order gets its
        // own (better predicted) branches.
        match max_order {
            4 => self.insert_fixed::<4>(units, count),
            6 => self.insert_fixed::<6>(units, count),
            _ => self.insert_dyn(units, max_order, count),
        }
    }

    #[inline]
    fn insert_fixed<const N: usize>(&mut self, units: &[u32], mut count: impl FnMut(&mut Self, u32)) {
        let full = units.len().saturating_sub(N - 1);
        for i in 0..full {
            let mut node = ROOT;
            for n in 0..N {
                match self.child_or_insert(node, units[i + n]) {
                    Some(c) => node = c,
                    None => return,
                }
                count(self, node);
            }
        }
        // The last positions, whose longest n-grams run past the end.
        self.insert_dyn(&units[full..], N, count);
    }

    fn insert_dyn(&mut self, units: &[u32], max_order: usize, mut count: impl FnMut(&mut Self, u32)) {
        for i in 0..units.len() {
            let mut node = ROOT;
            for &u in &units[i..units.len().min(i + max_order)] {
                match self.child_or_insert(node, u) {
                    Some(c) => node = c,
                    None => return,
                }
                count(self, node);
            }
        }
    }

    /// Consumes the n-grams of orders 1..=`max_order` of `units`, calling `on_match(n)`
    /// for each match of order `n + 1`. Which occurrence of an n-gram consumes a count
    /// does not matter: the number of matches is `sum(min(hyp_count, ref_count))`.
    #[inline]
    pub(crate) fn match_all(&mut self, units: &[u32], max_order: usize, on_match: impl FnMut(usize)) {
        match max_order {
            4 => self.match_fixed::<4>(units, on_match),
            6 => self.match_fixed::<6>(units, on_match),
            _ => self.match_dyn(units, max_order, on_match),
        }
    }

    #[inline]
    fn match_fixed<const N: usize>(&mut self, units: &[u32], mut on_match: impl FnMut(usize)) {
        let full = units.len().saturating_sub(N - 1);
        for i in 0..full {
            let mut node = ROOT;
            for n in 0..N {
                match self.child(node, units[i + n]) {
                    Some(c) => {
                        node = c;
                        if self.take(c) {
                            on_match(n);
                        }
                    }
                    None => break,
                }
            }
        }
        self.match_dyn(&units[full..], N, on_match);
    }

    fn match_dyn(&mut self, units: &[u32], max_order: usize, mut on_match: impl FnMut(usize)) {
        for i in 0..units.len() {
            let mut node = ROOT;
            for (n, &u) in units[i..units.len().min(i + max_order)].iter().enumerate() {
                match self.child(node, u) {
                    Some(c) => {
                        node = c;
                        if self.take(c) {
                            on_match(n);
                        }
                    }
                    None => break,
                }
            }
        }
    }
}

/// Below this many segments, scoring runs on the calling thread.
const PARALLEL_MIN_SEGMENTS: usize = 4096;
/// Segments per work item handed to a thread.
const CHUNK: usize = 1024;

/// Computes `f` over `0..n` split in contiguous chunks, on up to
/// `available_parallelism()` threads that take chunks as they become free, and
/// concatenates the per-chunk outputs in order. Results are deterministic: each
/// segment's output does not depend on the chunking or the thread.
pub(crate) fn par_chunks<T: Send>(n: usize, f: impl Fn(Range<usize>) -> Vec<T> + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    if threads < 2 || n < PARALLEL_MIN_SEGMENTS {
        return f(0..n);
    }
    let chunks = n.div_ceil(CHUNK);
    let next = AtomicUsize::new(0);
    let (f, next) = (&f, &next);
    let mut parts: Vec<(usize, Vec<T>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.min(chunks))
            .map(|_| {
                scope.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let c = next.fetch_add(1, Ordering::Relaxed);
                        if c >= chunks {
                            return done;
                        }
                        done.push((c, f(c * CHUNK..((c + 1) * CHUNK).min(n))));
                    }
                })
            })
            .collect();
        let mut parts = Vec::with_capacity(chunks);
        for h in handles {
            match h.join() {
                Ok(done) => parts.extend(done),
                // A panic inside `f` is a bug of this crate; re-raise it unchanged.
                Err(e) => std::panic::resume_unwind(e),
            }
        }
        parts
    });
    parts.sort_unstable_by_key(|(c, _)| *c);
    let mut out = Vec::with_capacity(n);
    for (_, part) in parts {
        out.extend(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(trie: &mut NgramTrie, hyp: &[u32], order: usize) -> Vec<u64> {
        let mut m = vec![0; order];
        trie.match_all(hyp, order, |n| m[n] += 1);
        m
    }

    #[test]
    fn trie_counts_clipped_matches() {
        let mut t = NgramTrie::default();
        for round in 0..3 {
            t.reset(10 + round * 100);
            t.insert_all(&[1, 2, 2, 3, 1 << 20], 2);
            // unigrams: 2 x3 (2 in ref), 4 (0), 1<<20 x2 (1) -> 3; bigrams: (2,2) x2 (1) -> 1
            assert_eq!(matches(&mut t, &[2, 2, 2, 4, 1 << 20, 1 << 20], 2), [3, 1]);
        }
    }

    #[test]
    fn trie_shrinks_back_after_a_long_segment() {
        let mut t = NgramTrie::default();
        let long: Vec<u32> = (0..5000).collect();
        t.reset(long.len() * 2);
        t.insert_all(&long, 2);
        assert_eq!(matches(&mut t, &[10, 11, 12], 2), [3, 2]);
        t.reset(10);
        assert_eq!(t.cap, 128);
        t.insert_all(&[1, 2, 3], 2);
        assert_eq!(matches(&mut t, &[10, 11, 12], 2), [0, 0]);
        assert_eq!(matches(&mut t, &[1, 2, 3, 1, 2], 2), [3, 2]);
    }

    #[test]
    fn trie_max_over_references() {
        let mut t = NgramTrie::default();
        t.reset(10);
        t.insert_all_max(&[7, 7, 8], 1, 0);
        t.insert_all_max(&[7, 8, 8, 8], 1, 1);
        assert_eq!(matches(&mut t, &[7; 5], 1), [2]);
        assert_eq!(matches(&mut t, &[8; 5], 1), [3]);
    }

    #[test]
    fn interner_ids_are_stable_across_growth() {
        let mut it = Interner::default();
        for round in 0..2 {
            it.reset();
            let words: Vec<String> = (0..500).map(|i| format!("w{i}")).collect();
            let ids: Vec<u32> = words.iter().map(|w| it.id(w.as_bytes())).collect();
            assert_eq!(ids, (0..500).collect::<Vec<u32>>(), "round {round}");
            assert_eq!(it.id(b"w7"), 7);
            assert_eq!(it.get(b"w499"), 499);
            assert_eq!(it.get(b"nope"), UNKNOWN);
        }
        it.reset();
        assert_eq!(it.get(b"w1"), UNKNOWN);
    }

    #[test]
    fn par_chunks_keeps_order() {
        let v = par_chunks(10_000, |r| r.collect::<Vec<_>>());
        assert_eq!(v, (0..10_000).collect::<Vec<_>>());
        assert!(par_chunks(0, |r| r.collect::<Vec<_>>()).is_empty());
    }
}
