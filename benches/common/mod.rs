//! What the generated benchmark inputs share.

/// A small deterministic hash (splitmix64), so that variety in generated objects does not follow
/// the index pattern.
pub fn mix(i: usize, salt: u64) -> u64 {
    let mut z = (i as u64).wrapping_add(salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
