//! Layout names as mdadm spells them, both directions.

use crate::{Level, LayoutError};

/// Parse a layout name for a level into the raw MD layout value.
///
/// * RAID5: `left-asymmetric`(0) `right-asymmetric`(1) `left-symmetric`(2)
///   `right-symmetric`(3) `parity-first`(4) `parity-last`(5), abbreviations `la ra ls rs`,
///   and the DDF aliases `ddf-zero-restart`(1) `ddf-N-restart`(0) `ddf-N-continue`(2).
/// * RAID6: the RAID5 names plus `ddf-zero-restart`(8) `ddf-N-restart`(9)
///   `ddf-N-continue`(10) `left-asymmetric-6`(16) `right-asymmetric-6`(17)
///   `left-symmetric-6`(18) `right-symmetric-6`(19) `parity-first-6`(20).
/// * RAID10: `nN`, `fN`, `oN` (N = copies, 1..=255) → `0x100+N`, `(N<<8)+1`,
///   `0x10000+(N<<8)+1`.
/// * RAID0: `original`(1)/`alternate`(2)/`dangerous`(0) (also `layout-original` etc.).
/// * RAID4: `parity-last` (0). Linear/RAID1: only `default`.
/// * Any level: `default` → [`default_layout`]. A plain decimal number is accepted as the
///   raw value if valid for the level.
pub fn parse_layout(level: Level, name: &str) -> Result<u32, LayoutError> {
    todo!("{level} {name}")
}

/// The mdadm name of a layout value (`left-symmetric`, `n2`, `f2`, `o2`, `original`...).
/// RAID10 far-set layouts print as e.g. `f2s2` (far sets mode 2)... any value without a
/// name prints as `layout-0xHEX`.
pub fn layout_name(level: Level, layout: u32) -> String {
    todo!("{level} {layout}")
}

/// Default layout: RAID5/6 left-symmetric (2), RAID10 n2 (0x102), RAID0 original (1),
/// others 0.
pub fn default_layout(level: Level) -> u32 {
    todo!("{level}")
}
