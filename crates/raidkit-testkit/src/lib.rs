//! Test support for raidkit.
//!
//! * [`pattern`]: the mdref splitmix64 pattern (byte k = byte k%8 of word k/8) and the
//!   compressible position-tagged pattern used for committed kernel fixtures.

pub mod pattern;
