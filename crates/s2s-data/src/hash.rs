//! XXH64 (Collet, 2012; the xxHash specification), one-shot and streaming: the checksum of
//! prepared shards, the key of a prepared dataset and the duplicate-pair hash.
//!
//! Written out here rather than taken from a crate so that the digests stored on disk can never
//! change with a dependency upgrade; checked against the specification's reference values.

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

#[inline(always)]
fn round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1)
}

#[inline(always)]
fn merge(acc: u64, val: u64) -> u64 {
    (acc ^ round(0, val)).wrapping_mul(P1).wrapping_add(P4)
}

#[inline(always)]
fn read_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// XXH64 of `bytes` with `seed`.
pub fn xxh64(bytes: &[u8], seed: u64) -> u64 {
    let mut h = Xxh64::new(seed);
    h.update(bytes);
    h.digest()
}

/// Streaming XXH64: [`Xxh64::update`] any number of times, then [`Xxh64::digest`]; the digest
/// equals [`xxh64`] of the concatenated input however it was split.
#[derive(Debug, Clone)]
pub struct Xxh64 {
    seed: u64,
    v: [u64; 4],
    total: u64,
    buf: [u8; 32],
    buf_len: usize,
}

impl Xxh64 {
    /// A hasher with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            v: [seed.wrapping_add(P1).wrapping_add(P2), seed.wrapping_add(P2), seed, seed.wrapping_sub(P1)],
            total: 0,
            buf: [0; 32],
            buf_len: 0,
        }
    }

    #[inline(always)]
    fn stripe(v: &mut [u64; 4], s: &[u8]) {
        v[0] = round(v[0], read_u64(&s[0..]));
        v[1] = round(v[1], read_u64(&s[8..]));
        v[2] = round(v[2], read_u64(&s[16..]));
        v[3] = round(v[3], read_u64(&s[24..]));
    }

    /// Feeds `bytes`.
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.total = self.total.wrapping_add(bytes.len() as u64);
        if self.buf_len > 0 {
            let take = (32 - self.buf_len).min(bytes.len());
            self.buf[self.buf_len..self.buf_len + take].copy_from_slice(&bytes[..take]);
            self.buf_len += take;
            bytes = &bytes[take..];
            if self.buf_len < 32 {
                return;
            }
            let buf = self.buf;
            Self::stripe(&mut self.v, &buf);
            self.buf_len = 0;
        }
        let mut chunks = bytes.chunks_exact(32);
        for s in &mut chunks {
            Self::stripe(&mut self.v, s);
        }
        let rest = chunks.remainder();
        self.buf[..rest.len()].copy_from_slice(rest);
        self.buf_len = rest.len();
    }

    /// The digest of everything fed so far (the hasher can go on being fed).
    pub fn digest(&self) -> u64 {
        let v = self.v;
        let mut h = if self.total >= 32 {
            let mut h = v[0]
                .rotate_left(1)
                .wrapping_add(v[1].rotate_left(7))
                .wrapping_add(v[2].rotate_left(12))
                .wrapping_add(v[3].rotate_left(18));
            for x in v {
                h = merge(h, x);
            }
            h
        } else {
            self.seed.wrapping_add(P5)
        };
        h = h.wrapping_add(self.total);
        let mut rest = &self.buf[..self.buf_len];
        while rest.len() >= 8 {
            h ^= round(0, read_u64(rest));
            h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
            rest = &rest[8..];
        }
        if rest.len() >= 4 {
            let k = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as u64;
            h ^= k.wrapping_mul(P1);
            h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
            rest = &rest[4..];
        }
        for &b in rest {
            h ^= (b as u64).wrapping_mul(P5);
            h = h.rotate_left(11).wrapping_mul(P1);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(P2);
        h ^= h >> 29;
        h = h.wrapping_mul(P3);
        h ^ (h >> 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_values() {
        // From the xxHash reference implementation (xxhsum -H64, and its sanity-check table).
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a", 0), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc", 0), 0x44BC_2CF5_AD77_0999);
    }

    #[test]
    fn streaming_equals_one_shot_at_every_split() {
        let data: Vec<u8> = (0..200u32).map(|i| (i * 31 + 7) as u8).collect();
        for len in [0, 1, 3, 4, 7, 8, 31, 32, 33, 63, 64, 65, 200] {
            let want = xxh64(&data[..len], 42);
            for cut in 0..=len {
                let mut h = Xxh64::new(42);
                h.update(&data[..cut]);
                h.update(&data[cut..len]);
                assert_eq!(h.digest(), want, "len {len} cut {cut}");
            }
        }
    }
}
