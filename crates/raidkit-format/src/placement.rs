//! How mdadm places the data area, bitmap and bad-block log (§1.9, §3.1, §3.6).
//! All values in sectors.

/// Space reserved for a future bitmap on a device of `dev_sectors` (§1.9
/// `choose_bm_space`).
pub fn choose_bm_space(dev_sectors: u64) -> u64 {
    todo!("{dev_sectors}")
}

/// mdadm's default data offset for 1.1/1.2 on a device of `dev_sectors`, with
/// `chunk_kib` (0 for RAID1/linear) and `bmspace` reserved for a bitmap (§1.9).
pub fn v1_data_offset(dev_sectors: u64, chunk_kib: u64, bmspace: u64) -> u64 {
    todo!("{dev_sectors} {chunk_kib} {bmspace}")
}
