//! Bounds-checked little-endian accessors used by the parsers and encoders.

use crate::{FormatError, Result};

/// `need` bytes must be present.
pub(crate) fn need(buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(FormatError::TooShort {
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// `N` bytes at `off`.
pub(crate) fn arr<const N: usize>(buf: &[u8], off: usize) -> Result<[u8; N]> {
    let end = off.checked_add(N).ok_or(FormatError::TooShort {
        need: usize::MAX,
        have: buf.len(),
    })?;
    buf.get(off..end)
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .ok_or(FormatError::TooShort {
            need: end,
            have: buf.len(),
        })
}

pub(crate) fn u16_at(buf: &[u8], off: usize) -> Result<u16> {
    arr::<2>(buf, off).map(u16::from_le_bytes)
}

pub(crate) fn u32_at(buf: &[u8], off: usize) -> Result<u32> {
    arr::<4>(buf, off).map(u32::from_le_bytes)
}

pub(crate) fn i32_at(buf: &[u8], off: usize) -> Result<i32> {
    arr::<4>(buf, off).map(i32::from_le_bytes)
}

pub(crate) fn u64_at(buf: &[u8], off: usize) -> Result<u64> {
    arr::<8>(buf, off).map(u64::from_le_bytes)
}

/// Copy `bytes` to `off`; silently ignores writes past the end (encoders size their own
/// buffers, so this never happens in practice, but it must not panic).
pub(crate) fn put(buf: &mut [u8], off: usize, bytes: &[u8]) {
    if let Some(dst) = off
        .checked_add(bytes.len())
        .and_then(|end| buf.get_mut(off..end))
    {
        dst.copy_from_slice(bytes);
    }
}
