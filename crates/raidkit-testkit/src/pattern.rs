//! Deterministic test patterns.
//!
//! * The **mdref pattern** (`mdref-run --pattern`): byte `k` is byte `k % 8` of the
//!   little-endian splitmix64 output `k / 8` started from state `seed`.
//! * The **tagged pattern**: every 512-byte sector `s` (counted from byte 0 of the stream)
//!   holds the little-endian `u64` `s`, then the little-endian `u64` `pattern_word(seed, s)`,
//!   then 496 zero bytes. It compresses well and any misplaced sector is detected.

/// Size of the sectors the tagged pattern and the mismatch counts are based on.
pub const SECTOR: u64 = 512;

/// splitmix64 output `i` for state `seed` (the mdref pattern word).
pub fn pattern_word(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add((i.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Which of the two patterns to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The mdref splitmix64 byte stream (`mdref-run --pattern`).
    Mdref,
    /// The position-tagged, compressible pattern ([`fill_tagged`]).
    Tagged,
}

/// Fill `buf` with the pattern of `kind` and `seed` at stream byte `offset`.
pub fn fill(kind: Kind, seed: u64, offset: u64, buf: &mut [u8]) {
    match kind {
        Kind::Mdref => fill_mdref(seed, offset, buf),
        Kind::Tagged => fill_tagged(seed, offset, buf),
    }
}

/// `len` bytes of the mdref pattern of `seed` at stream byte `offset`: bytes unlike at
/// every offset, for tests that check where each byte of an array ended up.
pub fn mdref_bytes(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_mdref(seed, offset, &mut v);
    v
}

/// Fill `buf` with the mdref pattern bytes `[offset, offset+len)` of `seed`.
pub fn fill_mdref(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut pos = 0usize;
    let mut k = offset;
    // Unaligned head: bytes up to the next 8-byte word boundary.
    while pos < buf.len() && k & 7 != 0 {
        buf[pos] = pattern_word(seed, k / 8).to_le_bytes()[(k % 8) as usize];
        pos += 1;
        k += 1;
    }
    let mut i = k / 8;
    let rest = &mut buf[pos..];
    let whole = rest.len() / 8 * 8;
    let (mid, tail) = rest.split_at_mut(whole);
    for word in mid.chunks_exact_mut(8) {
        word.copy_from_slice(&pattern_word(seed, i).to_le_bytes());
        i += 1;
    }
    if !tail.is_empty() {
        let w = pattern_word(seed, i).to_le_bytes();
        tail.copy_from_slice(&w[..tail.len()]);
    }
}

/// Fill `buf` with the position-tagged pattern at byte `offset` of `seed`: every 512-byte
/// sector starts with 16 bytes (u64 sector number, u64 splitmix word of that sector
/// number) and is zero after; compresses well and detects any sector-level misplacement.
pub fn fill_tagged(seed: u64, offset: u64, buf: &mut [u8]) {
    buf.fill(0);
    if buf.is_empty() {
        return;
    }
    let end = offset + buf.len() as u64;
    for s in offset / SECTOR..=(end - 1) / SECTOR {
        let base = s * SECTOR;
        let lo = base.max(offset);
        let hi = (base + 16).min(end);
        if lo >= hi {
            continue;
        }
        let mut tag = [0u8; 16];
        tag[..8].copy_from_slice(&s.to_le_bytes());
        tag[8..].copy_from_slice(&pattern_word(seed, s).to_le_bytes());
        buf[(lo - offset) as usize..(hi - offset) as usize]
            .copy_from_slice(&tag[(lo - base) as usize..(hi - base) as usize]);
    }
}

/// The result of comparing data against a pattern: where it first differs and how many
/// 512-byte sectors (of the stream, i.e. `byte offset / 512`) contain a difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Stream offset of the first differing byte.
    pub first_offset: u64,
    /// Number of distinct stream sectors with at least one differing byte.
    pub sectors: u64,
}

/// Incremental comparison of a byte stream against a pattern.
#[derive(Debug, Clone)]
pub struct Comparer {
    kind: Kind,
    seed: u64,
    pos: u64,
    first: Option<u64>,
    sectors: u64,
    last_sector: Option<u64>,
    scratch: Vec<u8>,
}

impl Comparer {
    /// Start comparing at stream byte `offset`.
    pub fn new(kind: Kind, seed: u64, offset: u64) -> Self {
        Comparer {
            kind,
            seed,
            pos: offset,
            first: None,
            sectors: 0,
            last_sector: None,
            scratch: Vec::new(),
        }
    }

    /// Compare the next `data.len()` bytes of the stream.
    pub fn update(&mut self, data: &[u8]) {
        self.scratch.resize(data.len(), 0);
        fill(self.kind, self.seed, self.pos, &mut self.scratch);
        if self.scratch[..] != *data {
            for (j, (a, b)) in data.iter().zip(self.scratch.iter()).enumerate() {
                if a != b {
                    let at = self.pos + j as u64;
                    self.first.get_or_insert(at);
                    if self.last_sector != Some(at / SECTOR) {
                        self.sectors += 1;
                        self.last_sector = Some(at / SECTOR);
                    }
                }
            }
        }
        self.pos += data.len() as u64;
    }

    /// Stream offset of the next byte expected.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The mismatch found so far, if any.
    pub fn mismatch(&self) -> Option<Mismatch> {
        self.first.map(|first_offset| Mismatch {
            first_offset,
            sectors: self.sectors,
        })
    }
}

/// Compare `data` with the pattern bytes starting at stream byte `offset`.
pub fn compare(kind: Kind, seed: u64, offset: u64, data: &[u8]) -> Option<Mismatch> {
    let mut c = Comparer::new(kind, seed, offset);
    for chunk in data.chunks(1 << 20) {
        c.update(chunk);
    }
    c.mismatch()
}

/// Parse a size or seed as `rk-pattern`/`mdref-pattern` do: decimal or `0x` hex, with an
/// optional suffix `s` (×512), `K`, `M`, `G`, `T` (×1024ⁿ; lower case accepted too).
pub fn parse_number(text: &str) -> Result<u64, String> {
    let bad = || format!("invalid number: {text:?}");
    let (body, mult) = match text.chars().last() {
        Some('s') => (&text[..text.len() - 1], 512u64),
        Some('K' | 'k') => (&text[..text.len() - 1], 1 << 10),
        Some('M' | 'm') => (&text[..text.len() - 1], 1 << 20),
        Some('G' | 'g') => (&text[..text.len() - 1], 1 << 30),
        Some('T' | 't') => (&text[..text.len() - 1], 1 << 40),
        _ => (text, 1),
    };
    let value = if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).map_err(|_| bad())?
    } else {
        if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        body.parse::<u64>().map_err(|_| bad())?
    };
    value.checked_mul(mult).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow_mdref(seed: u64, k: u64) -> u8 {
        pattern_word(seed, k / 8).to_le_bytes()[(k % 8) as usize]
    }

    #[test]
    fn splitmix_test_vector() {
        assert_eq!(pattern_word(1234567, 0), 6457827717110365317);
        assert_eq!(pattern_word(1234567, 1), 3203168211198807973);
        assert_eq!(pattern_word(1234567, 2), 9817491932198370423);
    }

    #[test]
    fn mdref_fill_matches_bytewise_definition_at_odd_offsets() {
        for (off, len) in [
            (0u64, 0usize),
            (0, 5),
            (3, 1),
            (3, 5),
            (5, 30),
            (8, 16),
            (13, 1000),
        ] {
            let mut buf = vec![0xAA; len];
            fill_mdref(99, off, &mut buf);
            let want: Vec<u8> = (0..len as u64).map(|j| slow_mdref(99, off + j)).collect();
            assert_eq!(buf, want, "offset {off} len {len}");
        }
    }

    #[test]
    fn tagged_sector_layout() {
        let mut buf = vec![0xAA; 1024];
        fill_tagged(7, 0, &mut buf);
        assert_eq!(&buf[0..8], &0u64.to_le_bytes());
        assert_eq!(&buf[8..16], &pattern_word(7, 0).to_le_bytes());
        assert!(buf[16..512].iter().all(|&b| b == 0));
        assert_eq!(&buf[512..520], &1u64.to_le_bytes());
        assert_eq!(&buf[520..528], &pattern_word(7, 1).to_le_bytes());
        // A window starting inside a tag equals the same bytes of the full fill.
        let mut part = vec![0xAA; 600];
        fill_tagged(7, 5, &mut part);
        assert_eq!(&part[..], &buf[5..605]);
    }

    #[test]
    fn compare_counts_sectors_and_first_offset() {
        let mut buf = vec![0; 4096];
        fill_tagged(3, 1024, &mut buf);
        assert_eq!(compare(Kind::Tagged, 3, 1024, &buf), None);
        buf[10] ^= 1; // stream byte 1034, sector 2
        buf[11] ^= 1;
        buf[3000] ^= 1; // stream byte 4024, sector 7
        assert_eq!(
            compare(Kind::Tagged, 3, 1024, &buf),
            Some(Mismatch {
                first_offset: 1034,
                sectors: 2
            })
        );
        // Wrong seed differs in every sector's splitmix word.
        let mut good = vec![0; 4096];
        fill_tagged(3, 0, &mut good);
        assert_eq!(
            compare(Kind::Tagged, 4, 0, &good).map(|m| m.sectors),
            Some(8)
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_number("123"), Ok(123));
        assert_eq!(parse_number("2s"), Ok(1024));
        assert_eq!(parse_number("64K"), Ok(65536));
        assert_eq!(parse_number("3M"), Ok(3 << 20));
        assert_eq!(parse_number("1G"), Ok(1 << 30));
        assert_eq!(parse_number("0x10"), Ok(16));
        assert_eq!(parse_number("0x10K"), Ok(16384));
        assert!(parse_number("").is_err());
        assert!(parse_number("K").is_err());
        assert!(parse_number("12x").is_err());
        assert!(parse_number("-1").is_err());
        assert!(parse_number("99999999999T").is_err());
    }
}
