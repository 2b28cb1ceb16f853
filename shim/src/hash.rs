//! A fast hasher for this library's own keys (code-object addresses, stacks).

use std::hash::{BuildHasherDefault, Hasher};

/// A fast hasher for this library's own keys (addresses, stacks): word-at-a-time multiply and
/// rotate. Not collision-resistant, which keys chosen by our own code do not need.
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

/// [`WordHasher`] as a `BuildHasher`.
pub type FastHash = BuildHasherDefault<WordHasher>;

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl WordHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for WordHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // Fold the high bits down: HashMap uses the low bits for buckets and the top 7 as tags.
        self.0 ^ (self.0 >> 29)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ (rest.len() as u64) << 59);
        }
    }
    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushim_wire::PyFrame;

    #[test]
    fn word_hasher_spreads_aligned_addresses_and_frames() {
        use std::hash::{BuildHasher, Hash};
        let h = |v: &dyn Fn(&mut WordHasher)| {
            let mut s = FastHash::default().build_hasher();
            v(&mut s);
            s.finish()
        };
        assert_ne!(h(&|s| 0x1000usize.hash(s)) & 0xff, h(&|s| 0x1008usize.hash(s)) & 0xff);
        let a = [PyFrame { code: 1, offset: 2, entry: false }];
        let b = [PyFrame { code: 1, offset: 2, entry: true }];
        assert_ne!(h(&|s| a.hash(s)), h(&|s| b.hash(s)));
        assert_ne!(h(&|s| [1u64, 2].hash(s)), h(&|s| [2u64, 1].hash(s)));
        assert_ne!(h(&|s| s.write(&[1, 2, 3])), h(&|s| s.write(&[1, 2, 3, 0])));
    }
}
