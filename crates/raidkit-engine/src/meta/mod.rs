//! Metadata on the members, at run time: superblocks, the write-intent bitmap, and the
//! optional checksum sidecar beside them.

pub mod bitmap;
pub mod checksums;
pub mod sb;
