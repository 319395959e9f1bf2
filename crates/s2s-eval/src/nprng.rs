//! numpy's random generator, bit for bit: `numpy.random.default_rng(seed)` — a `PCG64` bit
//! generator seeded through `SeedSequence` — and the `Generator` methods sacreBLEU's
//! significance tests call (`sacrebleu/significance.py`):
//!
//! - `rng.choice(n, size=(n_samples, n), replace=True)` (paired bootstrap), which is
//!   `rng.integers(0, n, size=..., dtype=np.int64)`: [`Generator::choice`];
//! - `rng.integers(2, size=(n_trials, n), dtype=bool)` (approximate randomization):
//!   [`Generator::random_bools`].
//!
//! The algorithms are numpy's (`bit_generator.pyx`, `pcg64.h`, `distributions.c`):
//! `SeedSequence` hashes the entropy into a pool of four 32-bit words and draws the
//! generator's 256-bit seed from it; `PCG64` is a 128-bit LCG with the XSL-RR output
//! function, whose 32-bit draws are the two halves of a 64-bit draw (low half first);
//! bounded integers use Lemire's multiply-and-reject method on 32-bit draws when the
//! range fits in 32 bits and on 64-bit draws otherwise; booleans take the bits of
//! 32-bit draws, lowest first. The tests compare with values printed by numpy itself.

use crate::error::EvalError;

const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;
const POOL_SIZE: usize = 4;

/// numpy's `SeedSequence` for an entropy without spawn key: the hashed entropy pool and
/// `generate_state`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedSequence {
    pool: [u32; POOL_SIZE],
}

fn hashmix(value: u32, hash_const: &mut u32) -> u32 {
    let mut v = value ^ *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    v = v.wrapping_mul(*hash_const);
    v ^ (v >> XSHIFT)
}

fn mix(x: u32, y: u32) -> u32 {
    let r = MIX_MULT_L.wrapping_mul(x).wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    r ^ (r >> XSHIFT)
}

impl SeedSequence {
    /// `SeedSequence(entropy)` for a non-negative integer: the entropy is split into
    /// 32-bit words, least significant first (0 is one word 0).
    pub fn new(entropy: u128) -> SeedSequence {
        let mut words = Vec::new();
        let mut e = entropy;
        if e == 0 {
            words.push(0);
        }
        while e > 0 {
            words.push(e as u32);
            e >>= 32;
        }
        SeedSequence::from_words(&words)
    }

    /// `SeedSequence` from its assembled entropy words (`mix_entropy`).
    pub fn from_words(entropy: &[u32]) -> SeedSequence {
        let mut hash_const = INIT_A;
        let mut pool = [0u32; POOL_SIZE];
        for (i, p) in pool.iter_mut().enumerate() {
            *p = hashmix(entropy.get(i).copied().unwrap_or(0), &mut hash_const);
        }
        for src in 0..POOL_SIZE {
            for dst in 0..POOL_SIZE {
                if src != dst {
                    let h = hashmix(pool[src], &mut hash_const);
                    pool[dst] = mix(pool[dst], h);
                }
            }
        }
        for &word in entropy.iter().skip(POOL_SIZE) {
            for p in pool.iter_mut() {
                let h = hashmix(word, &mut hash_const);
                *p = mix(*p, h);
            }
        }
        SeedSequence { pool }
    }

    /// `generate_state(n_words, np.uint32)`.
    pub fn generate_state_u32(&self, n_words: usize) -> Vec<u32> {
        let mut hash_const = INIT_B;
        (0..n_words)
            .map(|i| {
                let mut v = self.pool[i % POOL_SIZE] ^ hash_const;
                hash_const = hash_const.wrapping_mul(MULT_B);
                v = v.wrapping_mul(hash_const);
                v ^ (v >> XSHIFT)
            })
            .collect()
    }

    /// `generate_state(n_words, np.uint64)`: pairs of 32-bit words, low word first.
    pub fn generate_state_u64(&self, n_words: usize) -> Vec<u64> {
        self.generate_state_u32(2 * n_words)
            .chunks_exact(2)
            .map(|w| u64::from(w[0]) | (u64::from(w[1]) << 32))
            .collect()
    }
}

const PCG_MULT: u128 = (2_549_297_995_355_413_924u128 << 64) | 4_865_540_595_714_422_341u128;

/// numpy's `PCG64` bit generator (128-bit LCG, XSL-RR output), including its buffered
/// upper half for 32-bit draws.
#[derive(Clone, Debug)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
    has_u32: bool,
    u32_buf: u32,
}

impl Pcg64 {
    /// `PCG64(seed_seq)`: four 64-bit words from `generate_state`; the first two are the
    /// initial state (high word first), the last two the stream.
    pub fn from_seed_sequence(seq: &SeedSequence) -> Pcg64 {
        let w = seq.generate_state_u64(4);
        let init_state = (u128::from(w[0]) << 64) | u128::from(w[1]);
        let init_seq = (u128::from(w[2]) << 64) | u128::from(w[3]);
        let mut g = Pcg64 { state: 0, inc: (init_seq << 1) | 1, has_u32: false, u32_buf: 0 };
        g.step();
        g.state = g.state.wrapping_add(init_state);
        g.step();
        g
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    /// The next 64-bit draw (`next_uint64`).
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let s = self.state;
        let x = ((s >> 64) as u64) ^ (s as u64);
        x.rotate_right((s >> 122) as u32)
    }

    /// The next 32-bit draw (`next_uint32`): the low half of a 64-bit draw, then its high
    /// half.
    pub fn next_u32(&mut self) -> u32 {
        if self.has_u32 {
            self.has_u32 = false;
            return self.u32_buf;
        }
        let next = self.next_u64();
        self.has_u32 = true;
        self.u32_buf = (next >> 32) as u32;
        next as u32
    }
}

/// numpy's `Generator` over [`Pcg64`], with the methods sacreBLEU uses.
#[derive(Clone, Debug)]
pub struct Generator {
    bitgen: Pcg64,
}

impl Generator {
    /// `numpy.random.default_rng(seed)` for a non-negative integer seed.
    pub fn default_rng(seed: u128) -> Generator {
        Generator { bitgen: Pcg64::from_seed_sequence(&SeedSequence::new(seed)) }
    }

    /// `numpy.random.default_rng(None)`: 128 bits of fresh entropy, as numpy draws from the
    /// operating system (here through the standard library's randomly keyed hasher and
    /// the clock), so the draws differ from run to run.
    pub fn from_entropy() -> Generator {
        use std::hash::{BuildHasher, Hasher};
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut words = [0u64; 2];
        for (i, w) in words.iter_mut().enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(nanos);
            h.write_usize(i);
            *w = h.finish();
        }
        Generator::default_rng((u128::from(words[0]) << 64) | u128::from(words[1]))
    }

    /// The underlying bit generator.
    pub fn bit_generator(&mut self) -> &mut Pcg64 {
        &mut self.bitgen
    }

    /// `rng.integers(low, high, size=count, dtype=np.int64)`: uniform integers in
    /// `[low, high)`. An empty range is an error (numpy: `high <= low`), unless no
    /// value is drawn.
    pub fn integers(&mut self, low: i64, high: i64, count: usize) -> Result<Vec<i64>, EvalError> {
        if count == 0 {
            return Ok(Vec::new());
        }
        if high <= low {
            return Err(EvalError::InvalidOption(format!("integers: high ({high}) <= low ({low})")));
        }
        let rng = (high as u64).wrapping_sub(low as u64).wrapping_sub(1);
        Ok(self.bounded_u64(rng, count).into_iter().map(|v| low.wrapping_add(v as i64)).collect())
    }

    /// `rng.choice(pop_size, size=count, replace=True)`: `count` indices in
    /// `[0, pop_size)`, drawn as [`Generator::integers`].
    pub fn choice(&mut self, pop_size: usize, count: usize) -> Result<Vec<usize>, EvalError> {
        if count > 0 && pop_size == 0 {
            return Err(EvalError::InvalidOption(
                "choice: the population must be positive unless no samples are taken".into(),
            ));
        }
        let high = i64::try_from(pop_size)
            .map_err(|_| EvalError::InvalidOption(format!("choice: population {pop_size} too large")))?;
        Ok(self.integers(0, high, count)?.into_iter().map(|v| v as usize).collect())
    }

    /// `rng.integers(2, size=count, dtype=bool)`, packed: bit `e % 32` of word `e / 32` is
    /// element `e` (each word is one 32-bit draw, lowest bit first).
    pub fn random_bools(&mut self, count: usize) -> Vec<u32> {
        (0..count.div_ceil(32)).map(|_| self.bitgen.next_u32()).collect()
    }

    /// `random_bounded_uint64_fill(off=0, rng, count, use_masked=False)`: values in
    /// `[0, rng]`.
    fn bounded_u64(&mut self, rng: u64, count: usize) -> Vec<u64> {
        let g = &mut self.bitgen;
        if rng == 0 {
            return vec![0; count];
        }
        if rng <= u64::from(u32::MAX) {
            if rng == u64::from(u32::MAX) {
                return (0..count).map(|_| u64::from(g.next_u32())).collect();
            }
            let rng = rng as u32;
            return (0..count).map(|_| u64::from(lemire_u32(g, rng))).collect();
        }
        if rng == u64::MAX {
            return (0..count).map(|_| g.next_u64()).collect();
        }
        (0..count).map(|_| lemire_u64(g, rng)).collect()
    }
}

/// `buffered_bounded_lemire_uint32`: a value in `[0, rng]`, `rng < u32::MAX`.
fn lemire_u32(g: &mut Pcg64, rng: u32) -> u32 {
    let rng_excl = rng + 1;
    let mut m = u64::from(g.next_u32()) * u64::from(rng_excl);
    let mut leftover = m as u32;
    if leftover < rng_excl {
        let threshold = (u32::MAX - rng) % rng_excl;
        while leftover < threshold {
            m = u64::from(g.next_u32()) * u64::from(rng_excl);
            leftover = m as u32;
        }
    }
    (m >> 32) as u32
}

/// `bounded_lemire_uint64`: a value in `[0, rng]`, `u32::MAX < rng < u64::MAX`.
fn lemire_u64(g: &mut Pcg64, rng: u64) -> u64 {
    let rng_excl = rng + 1;
    let mut m = u128::from(g.next_u64()) * u128::from(rng_excl);
    let mut leftover = m as u64;
    if leftover < rng_excl {
        let threshold = (u64::MAX - rng) % rng_excl;
        while leftover < threshold {
            m = u128::from(g.next_u64()) * u128::from(rng_excl);
            leftover = m as u64;
        }
    }
    (m >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bools(words: &[u32], count: usize) -> Vec<u8> {
        (0..count).map(|e| ((words[e / 32] >> (e % 32)) & 1) as u8).collect()
    }

    // Golden values printed by numpy 2.4.6, with
    // import numpy as np; from numpy.random import SeedSequence as S; g = np.random.default_rng

    #[test]
    fn seed_sequence_matches_numpy() {
        // S(12345).generate_state(4).tolist(), S(12345).generate_state(2, np.uint64).tolist()
        let s = SeedSequence::new(12345);
        assert_eq!(s.generate_state_u32(4), [2688385916, 3048105090, 4196366895, 3152189807]);
        assert_eq!(s.generate_state_u64(2), [13091511679009522556, 13538552136045918767]);
        // S(0).generate_state(4).tolist(); S(2**40+3).generate_state(4).tolist()
        // S(2**100+7).generate_state(3).tolist(); S([1,2,3,4,5]).generate_state(4).tolist()
        assert_eq!(
            SeedSequence::new(0).generate_state_u32(4),
            [2968811710, 3677149159, 745650761, 2884920346]
        );
        assert_eq!(
            SeedSequence::new((1 << 40) + 3).generate_state_u32(4),
            [2789635316, 1410910647, 811316306, 1804054328]
        );
        assert_eq!(
            SeedSequence::new((1 << 100) + 7).generate_state_u32(3),
            [1523537530, 7724331, 1975607920]
        );
        assert_eq!(
            SeedSequence::from_words(&[1, 2, 3, 4, 5]).generate_state_u32(4),
            [2130651902, 4158861383, 1678071113, 4149942755]
        );
    }

    #[test]
    fn pcg64_raw_and_32_bit_draws_match_numpy() {
        // for s in [12345, 0, 7]: print(g(s).bit_generator.random_raw(3).tolist())
        let cases: [(u128, [u64; 3]); 3] = [
            (12345, [4193609425186963869, 5843160025838961886, 14708796524633321433]),
            (0, [11749869230777074271, 4976686463289251617, 755828109848996024]),
            (7, [11530976094092348043, 16550673365885938325, 14308875409591826786]),
        ];
        for (seed, want) in cases {
            let mut g = Generator::default_rng(seed);
            let got: Vec<u64> = (0..3).map(|_| g.bit_generator().next_u64()).collect();
            assert_eq!(got, want, "seed {seed}");
        }
        // g(12345).integers(0, 2**32, size=5, dtype=np.uint32).tolist(): low half, then high half
        let mut g = Generator::default_rng(12345);
        let got: Vec<u32> = (0..5).map(|_| g.bit_generator().next_u32()).collect();
        assert_eq!(got, [3003105693, 976400781, 3387213022, 1360466709, 876933081]);
        assert_eq!(Generator::default_rng(12345).integers(0, 1 << 32, 2).unwrap(), [3003105693, 976400781]);
    }

    #[test]
    fn bounded_integers_match_numpy() {
        // for s, n in [...]: print(g(s).integers(0, n, size=6).tolist())
        let cases: [(u128, i64, [i64; 6]); 9] = [
            (12345, 2037, [1424, 463, 1606, 645, 415, 1624]),
            (12345, 100, [69, 22, 78, 31, 20, 79]),
            (7, 10000, [9449, 6250, 6841, 8972, 5782, 7756]),
            (0, 7, [5, 4, 3, 1, 2, 0]),
            (12345, 1, [0, 0, 0, 0, 0, 0]),
            (3, 1 << 32, [3485385464, 367860371, 770692085, 1017093381, 778955830, 3441447623]),
            (3, (1 << 32) + 1, [367860371, 1017093381, 3441447623, 2500366906, 404279440, 1860266043]),
            (5, 1 << 40, [885110075051, 888340292869, 566606446456, 314241940641, 59297434362, 421518542151]),
            (
                5,
                i64::MAX,
                [
                    7424841456459477715,
                    7451938487489940729,
                    4753039369592592095,
                    2636052457199469114,
                    497422932274907254,
                    3535953814837461319,
                ],
            ),
        ];
        for (seed, n, want) in cases {
            assert_eq!(Generator::default_rng(seed).integers(0, n, 6).unwrap(), want, "seed {seed}, n {n}");
        }
        // Ranges where Lemire's method often rejects a draw (32-bit and 64-bit):
        // g(12345).integers(0, 3*2**30, size=8).tolist(); g(12345).integers(0, 3*2**61, size=8).tolist()
        assert_eq!(
            Generator::default_rng(12345).integers(0, 3 << 30, 8).unwrap(),
            [2252329269, 732300585, 2540409766, 1020350031, 657699810, 2568493921, 2178368770, 3184041033]
        );
        assert_eq!(
            Generator::default_rng(12345).integers(0, 3 << 61, 8).unwrap(),
            [
                1572603534445111450,
                2191185009689610707,
                5515798696737495537,
                2705511669276364324,
                4138818170431141402,
                1291739149366604771,
                4653809462992124752,
                6514948658820333695
            ]
        );
        // g(9).integers(-5, 5, size=8).tolist()
        assert_eq!(Generator::default_rng(9).integers(-5, 5, 8).unwrap(), [-1, 3, 4, -3, -4, 1, 1, 2]);
        // g(12345).choice(2037, size=(2, 4), replace=True).tolist()
        assert_eq!(
            Generator::default_rng(12345).choice(2037, 8).unwrap(),
            [1424, 463, 1606, 645, 415, 1624, 1309, 1377]
        );
    }

    #[test]
    fn booleans_match_numpy_and_share_the_32_bit_buffer() {
        // g(12345).integers(2, size=70, dtype=bool).astype(int).tolist()
        let want = [
            1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1,
            1, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0,
            0, 1, 1, 1, 1, 0,
        ];
        let words = Generator::default_rng(12345).random_bools(70);
        assert_eq!(words.len(), 3);
        assert_eq!(bools(&words, 70), want);
        // r = g(12345); r.integers(2, size=(3, 11), dtype=bool); r.choice(2037, size=5).tolist()
        let mut r = Generator::default_rng(12345);
        r.random_bools(33);
        assert_eq!(r.choice(2037, 5).unwrap(), [1606, 645, 415, 1624, 1309]);
        // r = g(42); r.integers(2, size=40, dtype=bool) ...; r.integers(0, 100, size=3).tolist()
        let mut r = Generator::default_rng(42);
        let want = [
            0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 0, 0, 0,
            1, 0, 1, 1, 0, 0, 1, 1,
        ];
        assert_eq!(bools(&r.random_bools(40), 40), want);
        assert_eq!(r.integers(0, 100, 3).unwrap(), [65, 43, 43]);
    }

    #[test]
    fn empty_ranges_are_errors_not_panics() {
        let mut g = Generator::default_rng(1);
        assert!(g.integers(5, 5, 1).is_err());
        assert!(g.choice(0, 3).is_err());
        assert_eq!(g.choice(0, 0).unwrap(), Vec::<usize>::new());
        assert!(Generator::from_entropy().choice(10, 100).unwrap().iter().all(|&i| i < 10));
    }
}
