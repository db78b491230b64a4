//! What assembly checks before it trusts the devices it was given: they belong to one
//! array, describe one shape, have data areas large enough, and use no feature raidkit
//! does not run. Each check names the odd device and says what to do.

use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::sb::Super;
use raidkit_format::v1::feature;
use raidkit_format::validate::MemberAreas;
use std::sync::Arc;

/// Every device belongs to the first one's array.
pub(super) fn one_array(devs: &[Arc<dyn BlockDev>], sbs: &[Super]) -> Result<()> {
    let uuid = sbs[0].uuid();
    match sbs.iter().position(|s| s.uuid() != uuid) {
        None => Ok(()),
        Some(i) => Err(EngineError::BadMember {
            device: devs[i].name().to_string(),
            why: format!(
                "belongs to array {} ({}), not to array {} like {}; give the members of one array only",
                crate::sb::uuid_text(sbs[i].metadata(), &sbs[i].uuid()),
                sbs[i].name(),
                crate::sb::uuid_text(sbs[0].metadata(), &uuid),
                devs[0].name()
            ),
        }),
    }
}

/// Every device describes the shape of `fresh` (device `fresh_i`'s superblock): level,
/// layout, chunk, devices.
pub(super) fn one_shape(
    devs: &[Arc<dyn BlockDev>],
    sbs: &[Super],
    fresh: &Super,
    fresh_i: usize,
) -> Result<()> {
    let differs = |s: &Super| {
        s.level() != fresh.level()
            || s.layout() != fresh.layout()
            || s.chunk_sectors() != fresh.chunk_sectors()
            || s.raid_disks() != fresh.raid_disks()
    };
    match sbs.iter().position(differs) {
        None => Ok(()),
        Some(i) => {
            let s = &sbs[i];
            Err(EngineError::BadMember {
                device: devs[i].name().to_string(),
                why: format!(
                    "its superblock describes a different shape (level {}, layout {}, chunk {}, {} devices) than {} (level {}, layout {}, chunk {}, {} devices); leave the odd one out",
                    s.level(), s.layout(), s.chunk_sectors(), s.raid_disks(), devs[fresh_i].name(),
                    fresh.level(), fresh.layout(), fresh.chunk_sectors(), fresh.raid_disks()
                ),
            })
        }
    }
}

/// Every member's data area holds the component size the array uses, `need` sectors
/// (md's rdev->sectors >= dev_sectors): reads and writes past it would land on its
/// metadata or past the device. (RAID0 and linear use each member's own size.)
pub(super) fn data_areas_hold(
    devs: &[Arc<dyn BlockDev>],
    areas: &[MemberAreas],
    fresh_i: usize,
    need: u64,
) -> Result<()> {
    match areas.iter().position(|a| a.data.len() < need) {
        None => Ok(()),
        Some(i) => Err(EngineError::BadMember {
            device: devs[i].name().to_string(),
            why: format!(
                "its data area holds {} sectors but the array's members hold {need} (size in {}'s superblock); it is not a member of this array as it is now, or its metadata is damaged; leave it out (the array runs degraded if it can) and add it back so it is rebuilt",
                areas[i].data.len(),
                devs[fresh_i].name()
            ),
        }),
    }
}

/// The array uses no feature raidkit does not run (journal, PPL, clustered).
pub(super) fn features_handled(feature_map: u32, uuid_text: &str) -> Result<()> {
    for (bit, what) in [
        (feature::JOURNAL, "a write journal (raid5-cache)"),
        (
            feature::PPL | feature::MULTIPLE_PPLS,
            "a partial parity log (PPL)",
        ),
        (feature::CLUSTERED, "clustered md"),
    ] {
        if feature_map & bit != 0 {
            return Err(EngineError::Unsupported {
                uuid: uuid_text.to_string(),
                what: format!("the array uses {what}"),
                advice: "raidkit does not handle this feature; assemble it with the kernel".into(),
            });
        }
    }
    Ok(())
}
