//! Layout names as mdadm spells them, both directions.

use crate::{layout_valid, LayoutError, Level};

/// RAID5 names (value, name); the first name of a value is the canonical one.
const RAID5_NAMES: &[(u32, &str)] = &[
    (0, "left-asymmetric"),
    (1, "right-asymmetric"),
    (2, "left-symmetric"),
    (3, "right-symmetric"),
    (4, "parity-first"),
    (5, "parity-last"),
    (0, "la"),
    (1, "ra"),
    (2, "ls"),
    (3, "rs"),
    (1, "ddf-zero-restart"),
    (0, "ddf-N-restart"),
    (2, "ddf-N-continue"),
];

/// RAID6 names (value, name); the first name of a value is the canonical one.
const RAID6_NAMES: &[(u32, &str)] = &[
    (0, "left-asymmetric"),
    (1, "right-asymmetric"),
    (2, "left-symmetric"),
    (3, "right-symmetric"),
    (4, "parity-first"),
    (5, "parity-last"),
    (8, "ddf-zero-restart"),
    (9, "ddf-N-restart"),
    (10, "ddf-N-continue"),
    (16, "left-asymmetric-6"),
    (17, "right-asymmetric-6"),
    (18, "left-symmetric-6"),
    (19, "right-symmetric-6"),
    (20, "parity-first-6"),
    (0, "la"),
    (1, "ra"),
    (2, "ls"),
    (3, "rs"),
    (5, "parity-last-6"),
];

/// RAID0 names (value, name); the first name of a value is the canonical one.
const RAID0_NAMES: &[(u32, &str)] = &[
    (0, "dangerous"),
    (1, "original"),
    (2, "alternate"),
    (0, "layout-unspecified"),
    (0, "unspecified"),
    (1, "layout-original"),
    (2, "layout-alternate"),
];

fn bad(level: Level, name: &str, why: &str) -> LayoutError {
    LayoutError::BadLayout {
        level,
        layout: name.to_string(),
        why: why.to_string(),
    }
}

fn lookup(table: &[(u32, &str)], name: &str) -> Option<u32> {
    table
        .iter()
        .find(|(_, n)| n.eq_ignore_ascii_case(name))
        .map(|&(v, _)| v)
}

/// Parse a RAID10 name: `nN`, `fN`, `oN` (N = 1..=255), optionally followed by `sM`
/// (far-set mode M = 1 or 2, far/offset only); also mdadm's `near=N`, `far=N`, `offset=N`.
fn parse_raid10(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    let (kind, rest) = if let Some(r) = lower.strip_prefix("near=") {
        ('n', r)
    } else if let Some(r) = lower.strip_prefix("far=") {
        ('f', r)
    } else if let Some(r) = lower.strip_prefix("offset=") {
        ('o', r)
    } else {
        let mut chars = lower.chars();
        let k = chars.next()?;
        (k, chars.as_str())
    };
    let (num, mode) = match rest.split_once('s') {
        Some((num, m)) if kind != 'n' => {
            let mode = match m {
                "1" => 1u32,
                "2" => 2u32,
                _ => return None,
            };
            (num, mode)
        }
        Some(_) => return None,
        None => (rest, 0),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) || num.len() > 3 {
        return None;
    }
    let copies: u32 = num.parse().ok()?;
    if !(1..=255).contains(&copies) {
        return None;
    }
    match kind {
        'n' => Some(0x100 + copies),
        'f' => Some((copies << 8) + 1 + (mode << 17)),
        'o' => Some(0x10000 + (copies << 8) + 1 + (mode << 17)),
        _ => None,
    }
}

/// Parse a raw number: decimal, or hexadecimal with `0x` / `layout-0x`.
fn parse_number(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    let hex = lower
        .strip_prefix("layout-0x")
        .or_else(|| lower.strip_prefix("0x"));
    match hex {
        Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u32::from_str_radix(h, 16).ok()
        }
        Some(_) => None,
        None if !lower.is_empty() && lower.bytes().all(|b| b.is_ascii_digit()) => {
            lower.parse().ok()
        }
        None => None,
    }
}

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
///
/// Also accepted (a superset, so that [`layout_name`] output parses back): names are
/// case-insensitive; RAID10 far-set forms `fNsM`/`oNsM` (M = 1, 2) and mdadm's
/// `near=N`/`far=N`/`offset=N`; RAID6 `parity-last-6` (5); the raw forms `0xHEX` and
/// `layout-0xHEX` when valid for the level.
pub fn parse_layout(level: Level, name: &str) -> Result<u32, LayoutError> {
    let name = name.trim();
    if name.eq_ignore_ascii_case("default") {
        return Ok(default_layout(level));
    }
    let named = match level {
        Level::Raid5 => lookup(RAID5_NAMES, name),
        Level::Raid6 => lookup(RAID6_NAMES, name),
        Level::Raid0 => lookup(RAID0_NAMES, name),
        Level::Raid4 => name.eq_ignore_ascii_case("parity-last").then_some(0),
        Level::Raid10 => parse_raid10(name),
        Level::Linear | Level::Raid1 => None,
    };
    if let Some(v) = named {
        return Ok(v);
    }
    match parse_number(name) {
        Some(v) if layout_valid(level, v) => Ok(v),
        Some(_) => Err(bad(
            level,
            name,
            "this raw value is not a layout of the level",
        )),
        None => {
            let why = match level {
                Level::Raid5 => "expected left-asymmetric, right-asymmetric, left-symmetric, right-symmetric, parity-first, parity-last (or la, ra, ls, rs, ddf-zero-restart, ddf-N-restart, ddf-N-continue)",
                Level::Raid6 => "expected a RAID5 layout name, ddf-zero-restart, ddf-N-restart, ddf-N-continue or one of the *-6 layouts",
                Level::Raid10 => "expected nN, fN or oN (N copies)",
                Level::Raid0 => "expected original, alternate or dangerous",
                Level::Raid4 => "expected parity-last",
                Level::Linear | Level::Raid1 => "this level has no layouts (only `default`)",
            };
            Err(bad(level, name, why))
        }
    }
}

/// The mdadm name of a layout value (`left-symmetric`, `n2`, `f2`, `o2`, `original`...).
/// RAID10 far-set layouts print as e.g. `f2s2` (far sets mode 2)... any value without a
/// name prints as `layout-0xHEX`.
///
/// Linear/RAID1 layout 0 prints as `default`; RAID4 layouts 0 and 5 as `parity-last`
/// (RAID4 is parity-last whatever the value). RAID10 names exist for pure near (`nN`),
/// pure far (`fN`, `fNsM`) and pure offset (`oN`, `oNsM`) layouts.
pub fn layout_name(level: Level, layout: u32) -> String {
    let canonical = |table: &[(u32, &str)]| {
        table
            .iter()
            .find(|&&(v, _)| v == layout)
            .map(|&(_, n)| n.to_string())
    };
    let name = match level {
        Level::Raid5 => canonical(RAID5_NAMES),
        Level::Raid6 => canonical(RAID6_NAMES),
        Level::Raid0 => canonical(RAID0_NAMES),
        Level::Raid4 => matches!(layout, 0 | 5).then(|| "parity-last".to_string()),
        Level::Linear | Level::Raid1 => (layout == 0).then(|| "default".to_string()),
        Level::Raid10 => raid10_name(layout),
    };
    name.unwrap_or_else(|| format!("layout-0x{layout:x}"))
}

fn raid10_name(layout: u32) -> Option<String> {
    if layout >> 19 != 0 {
        return None;
    }
    let nc = layout & 0xff;
    let fc = (layout >> 8) & 0xff;
    let offset = layout & (1 << 16) != 0;
    let mode = layout >> 17;
    if nc == 0 || fc == 0 || nc * fc < 2 || mode == 3 {
        return None;
    }
    let sets = if mode == 0 {
        String::new()
    } else {
        format!("s{mode}")
    };
    if fc == 1 && !offset && mode == 0 {
        Some(format!("n{nc}"))
    } else if nc == 1 && fc > 1 {
        Some(format!("{}{fc}{sets}", if offset { 'o' } else { 'f' }))
    } else {
        None
    }
}

/// Default layout: RAID5/6 left-symmetric (2), RAID10 n2 (0x102), RAID0 original (1),
/// others 0.
pub fn default_layout(level: Level) -> u32 {
    match level {
        Level::Raid5 | Level::Raid6 => 2,
        Level::Raid10 => 0x102,
        Level::Raid0 => 1,
        Level::Linear | Level::Raid1 | Level::Raid4 => 0,
    }
}
