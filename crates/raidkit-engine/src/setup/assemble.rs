//! Assembly: find the members of one array by UUID and role (never by argument order),
//! refuse anything ambiguous or stale with an explanation, and build a running [`Array`].

use crate::array::meta::Meta;
use crate::array::{Array, AssemblyNote, Member};
use crate::bitmap::RunBitmap;
use crate::dev::BlockDev;
use crate::error::{EngineError, Result};
use crate::sb::{probe, Metadata, Role, Super};
use crate::setup::agree::{data_areas_hold, features_handled, one_array, one_shape};
use crate::setup::reshaping::Reshaping;
use raidkit_format::badblocks;
use raidkit_format::v1::{feature, role as v1role};
use raidkit_format::validate::{Extent, MemberAreas};
use raidkit_format::MAX_SECTOR;
use raidkit_layout::{Geometry, Level};
use std::path::PathBuf;
use std::sync::Arc;

/// How to assemble.
#[derive(Clone, Debug, Default)]
pub struct AssembleOptions {
    /// Open members for writing (otherwise nothing is ever written).
    pub writable: bool,
    /// Start a dirty degraded array, and accept stale members when they are needed to run.
    pub force: bool,
    /// Which superblock to use when a device carries both 0.90 and 1.x.
    pub metadata: Option<Metadata>,
    /// Only report (read-only): do not refuse a dirty degraded array, nothing is read
    /// through it that matters and nothing is written.
    pub report_only: bool,
    /// mdadm's backup file of a reshape in progress that moves data in place.
    pub backup_file: Option<PathBuf>,
}

/// Open the given members (paths, NBD URIs, fault specs: see
/// [`crate::dev::open_member`]) and assemble them.
pub fn assemble_paths(paths: &[PathBuf], opts: &AssembleOptions) -> Result<Array> {
    // Every member a device of its own, refused before anything is opened (see
    // `setup::identity`: a FIFO would hang the open); NBD URIs are told apart by their text.
    let ids = paths
        .iter()
        .map(|p| {
            Ok((
                p.as_path(),
                crate::setup::identity::member_identity(p, true)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    crate::setup::identity::check_distinct(&ids)?;
    let mut devs: Vec<Arc<dyn BlockDev>> = Vec::new();
    let mut unreached: Vec<Arc<crate::dev::nbd::NbdDev>> = Vec::new();
    for p in paths {
        let name = p.display().to_string();
        match crate::dev::open_member(p, opts.writable) {
            Ok(d) => devs.push(d),
            // A network member that does not answer: the array runs without it if it can
            // (the same rule as any missing member), and it is brought back when it does.
            Err(e) if crate::dev::nbd::is_nbd_uri(&name) && crate::dev::io::is_gone(&e) => {
                let dev = crate::dev::nbd::NbdDev::unreached(&name, opts.writable, &e)
                    .map_err(|e| EngineError::io(&name, "opening the member", e))?;
                unreached.push(Arc::new(dev));
            }
            Err(e) => {
                return Err(EngineError::io(
                    &name,
                    if opts.writable {
                        "opening the member for writing"
                    } else {
                        "opening the member"
                    },
                    e,
                ))
            }
        }
    }
    if unreached.is_empty() {
        return assemble(devs, opts);
    }
    let list = unreached_list(&unreached);
    if devs.is_empty() {
        return Err(EngineError::Unreachable {
            unreached: list,
            why: "no member of the array could be reached, so nothing says what it is; start the servers (or fix the network or the addresses) and assemble again".into(),
        });
    }
    match assemble(devs, opts) {
        Ok(mut arr) => {
            for d in &unreached {
                arr.notes.push(AssemblyNote::MemberUnreachable {
                    device: d.name().to_string(),
                    why: d.link_status().error.unwrap_or_default(),
                });
            }
            arr.set_away(unreached.into_iter().map(|d| d as Arc<dyn BlockDev>).collect());
            Ok(arr)
        }
        // Refused for what is missing: the unreachable members are what is missing.
        Err(
            e @ (EngineError::NotEnoughMembers { .. }
            | EngineError::DirtyDegraded { .. }
            | EngineError::BadMember { .. }
            | EngineError::Unsupported { .. }),
        ) => Err(EngineError::Unreachable {
            unreached: list,
            why: format!(
                "the array cannot start without {}: {e}. Start the server(s) (or fix the network or the address) and assemble again",
                if unreached.len() == 1 { "it" } else { "them" }
            ),
        }),
        Err(e) => Err(e),
    }
}

/// "URI (its connection error)", for each member not reached.
fn unreached_list(unreached: &[Arc<crate::dev::nbd::NbdDev>]) -> String {
    unreached
        .iter()
        .map(|d| {
            let why = d.link_status().error.unwrap_or_default();
            format!("{} ({why})", d.name())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The superblock this device is a member by, and where its metadata and data lie.
fn pick_super(dev: &dyn BlockDev, opts: &AssembleOptions) -> Result<(Super, MemberAreas)> {
    let p = probe(dev)?;
    let mut found = p.found;
    if let Some(m) = opts.metadata {
        found.retain(|(s, _)| match (m, s) {
            (Metadata::V090, Super::V090(_)) => true,
            (Metadata::V1(_), Super::V1(_)) => s.metadata() == m,
            _ => false,
        });
    }
    if found.is_empty() {
        let detail = if let Some((what, e)) = p.broken.first() {
            format!("the {what} is damaged ({e}); if this device is a member, leave it out, start the array degraded and re-add it")
        } else {
            "no MD superblock found (looked for 1.2 at sector 8, 1.1 at sector 0, 1.0 and 0.90 at the end); check the device name".to_string()
        };
        return Err(EngineError::NoSuperblock {
            device: dev.name().to_string(),
            detail,
        });
    }
    let has090 = found.iter().any(|(s, _)| matches!(s, Super::V090(_)));
    let has1 = found.iter().any(|(s, _)| matches!(s, Super::V1(_)));
    if has090 && has1 {
        return Err(EngineError::BadMember {
            device: dev.name().to_string(),
            why: "carries both a 0.90 and a 1.x superblock; raidkit will not guess which one is current: choose the metadata version to use (0.90 or 1.x)".into(),
        });
    }
    // Several 1.x variants: the one with the largest ctime (mdadm's rule).
    found.sort_by_key(|(s, _)| std::cmp::Reverse(s.ctime()));
    let (sb, ok) = found.swap_remove(0);
    if !ok {
        return Err(EngineError::NoSuperblock {
            device: dev.name().to_string(),
            detail: format!(
                "the {} superblock has a bad checksum; if this device is a member, leave it out, start the array degraded and re-add it",
                sb.metadata()
            ),
        });
    }
    let areas = checked_areas(dev, &sb)?;
    Ok((sb, areas))
}

/// Check a member's superblock before anything is sized, read or written from it: its
/// fields against each other and md's limits, then every area it places (superblock,
/// data, bitmap, bad-block log) inside the device and clear of the others. The error
/// names the field (client writes must never land on metadata).
pub(crate) fn checked_areas(dev: &dyn BlockDev, sb: &Super) -> Result<MemberAreas> {
    let dev_sectors = dev.size_bytes() / 512;
    sb.validate()
        .and_then(|()| sb.areas(dev_sectors))
        .map_err(|e| EngineError::BadMember {
            device: dev.name().to_string(),
            why: e.to_string(),
        })
}

/// Assemble the array formed by `devs`.
pub fn assemble(devs: Vec<Arc<dyn BlockDev>>, opts: &AssembleOptions) -> Result<Array> {
    assemble_with(devs, opts, Position::FromMembers)
}

/// How far a reshape found on the members really got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Position {
    /// As md may have left it: the data may be moved past the recorded position, which
    /// is looked for in the data.
    FromMembers,
    /// Exactly the recorded one: raidkit flushed, recorded it and switched geometry
    /// itself, so nothing past it is moved (old and new copies that happen to agree
    /// there are not a move).
    Recorded,
}

/// [`assemble`], saying how far a reshape on the members got.
pub(crate) fn assemble_with(
    devs: Vec<Arc<dyn BlockDev>>,
    opts: &AssembleOptions,
    position: Position,
) -> Result<Array> {
    if devs.is_empty() {
        return Err(EngineError::Invalid("no members given".into()));
    }
    let mut sbs = Vec::with_capacity(devs.len());
    let mut areas = Vec::with_capacity(devs.len());
    for d in &devs {
        let (sb, a) = pick_super(d.as_ref(), opts)?;
        sbs.push(sb);
        areas.push(a);
    }
    let mut census = Census::of(devs, sbs, areas)?;
    let mut roles = census.sort_roles()?;
    census.take_stale(&mut roles, opts)?;
    let reshaping = Reshaping::of(&census.fresh, &census.sbs, &roles.slots, &census.uuid_text)?;
    let missing: Vec<usize> = (0..roles.slots.len())
        .filter(|&r| roles.slots[r].is_none())
        .collect();
    census.can_run(reshaping.as_ref(), &missing)?;
    let geo = match &reshaping {
        Some(r) => r.plan.new_geometry().clone(),
        None => census.geometry(&roles.slots)?,
    };
    let (resync, forced_clean) =
        census.resync_state(&roles.slots, &missing, &geo, reshaping.as_ref(), opts)?;
    let mut members = census.members(&roles.slots)?;
    if let Some(r) = &reshaping {
        members = r.new_members(members);
    }
    let role_table = census.role_table(&roles);
    let (bitmap, note) = census.bitmap(&roles.slots, resync != MAX_SECTOR);
    let Census {
        devs,
        sbs,
        uuid,
        max_events,
        fresh,
        ..
    } = census;
    let replacements = replacement_members(&roles.replacing, &devs, &sbs);
    let meta = Meta {
        sbs,
        events: max_events,
        dirty: false,
        resync_from: resync,
        disk_active: fresh.resync_offset() != MAX_SECTOR,
        roles: role_table,
        behind: Default::default(),
    };
    let arr = Array::from_parts(
        geo,
        uuid,
        fresh.name(),
        fresh.metadata(),
        devs,
        members,
        roles.spares,
        opts.writable,
        meta,
        bitmap,
        forced_clean,
    );
    let mut arr = arr;
    arr.notes.extend(note);
    for (r, m) in replacements {
        arr.set_replacement(r, Some(Arc::new(m)));
    }
    if let Some(r) = reshaping {
        r.install(&arr, opts.backup_file.clone(), opts.force, position)?;
    } else {
        // Where bad blocks exceed the redundancy the data is gone: reads there fail.
        let lost = arr.derive_lost();
        arr.add_lost(&lost);
    }
    Ok(arr)
}

/// The replacements being built, `(role, member)`, from `(device index, role)` pairs; each
/// rebuilt up to its recovery offset.
fn replacement_members(
    replacing: &[(usize, usize)],
    devs: &[Arc<dyn BlockDev>],
    sbs: &[Super],
) -> Vec<(usize, Member)> {
    replacing
        .iter()
        .map(|&(i, r)| {
            let sb = &sbs[i];
            let recovery = Some(sb.recovery_offset().unwrap_or(0));
            (
                r,
                Member::new(devs[i].clone(), i, sb.data_offset(), recovery, Vec::new()),
            )
        })
        .collect()
}

/// What the given devices say about the array they form: one array, its freshest member
/// and shape, checked.
struct Census {
    devs: Vec<Arc<dyn BlockDev>>,
    sbs: Vec<Super>,
    /// Where each device's metadata and data lie (checked against the device).
    areas: Vec<MemberAreas>,
    uuid: [u8; 16],
    /// The UUID in mdadm's text form.
    uuid_text: String,
    /// The highest event count of a member that is not a spare.
    max_events: u64,
    /// Index of the freshest member, and its superblock.
    fresh_i: usize,
    fresh: Super,
    level: Level,
}

/// Which device is in which role.
struct Roles {
    /// Role slot → device index.
    slots: Vec<Option<usize>>,
    /// Device indices of spares.
    spares: Vec<usize>,
    /// Devices that believe they are active members but missed updates.
    stale: Vec<usize>,
    /// `(device index, role)` of replacements being built next to their member.
    replacing: Vec<(usize, usize)>,
}

impl Census {
    /// Check that the devices form one array of one shape, with features raidkit runs.
    fn of(
        devs: Vec<Arc<dyn BlockDev>>,
        sbs: Vec<Super>,
        areas: Vec<MemberAreas>,
    ) -> Result<Census> {
        let uuid = sbs[0].uuid();
        one_array(&devs, &sbs)?;
        let uuid_s = crate::sb::uuid_text(sbs[0].metadata(), &uuid);
        // Freshest non-spare member.
        let max_events = sbs
            .iter()
            .filter(|s| !matches!(s.own_role(), Role::Spare))
            .map(|s| s.events())
            .max()
            .ok_or_else(|| EngineError::NotEnoughMembers {
                level: Level::md_name(sbs[0].level()),
                uuid: uuid_s.clone(),
                why: "every device given is a spare; give the active members".into(),
            })?;
        let fresh_i = sbs
            .iter()
            .position(|s| s.events() == max_events && !matches!(s.own_role(), Role::Spare))
            .unwrap_or(0);
        let fresh = sbs[fresh_i].clone();
        // A member one update behind across a reshape's start or end, or a takeover,
        // holds the same data: bring its superblock up to date.
        let mut sbs = sbs;
        crate::setup::reshaping::reconcile(&fresh, &mut sbs);
        one_shape(&devs, &sbs, &fresh, fresh_i)?;
        let level = Level::from_md(fresh.level()).ok_or_else(|| EngineError::Unsupported {
            uuid: uuid_s.clone(),
            what: format!("level {}", fresh.level()),
            advice: "raidkit handles linear, raid0, raid1, raid4, raid5, raid6 and raid10; multipath and faulty are legacy kernel personalities".into(),
        })?;
        if !matches!(level, Level::Linear | Level::Raid0) {
            data_areas_hold(&devs, &areas, fresh_i, fresh.size_sectors())?;
        }
        features_handled(fresh.feature_map(), &uuid_s)?;
        Ok(Census {
            devs,
            sbs,
            areas,
            uuid,
            uuid_text: uuid_s,
            max_events,
            fresh_i,
            fresh,
            level,
        })
    }

    /// Can the array run with these roles `missing` (in its reshape's terms while one is
    /// under way)? If not, why, as an error naming the array.
    fn can_run(&self, reshaping: Option<&Reshaping>, missing: &[usize]) -> Result<()> {
        let raid_disks = self.fresh.raid_disks();
        match reshaping {
            Some(r) => r.can_run(missing),
            None => can_run(self.level, raid_disks, missing, &self.fresh),
        }
        .map_err(|why| EngineError::NotEnoughMembers {
            level: self.level.to_string(),
            uuid: self.uuid_text.clone(),
            why,
        })
    }

    /// The array's geometry from the freshest superblock and the members in `slots`.
    fn geometry(&self, slots: &[Option<usize>]) -> Result<Geometry> {
        let fresh = &self.fresh;
        Ok(Geometry::new(
            self.level,
            fresh.layout(),
            fresh.chunk_sectors(),
            fresh.raid_disks(),
            fresh.size_sectors(),
            self.member_sectors(slots),
        )?)
    }

    /// Put every device in its role, among the spares, the stale or the replacements.
    fn sort_roles(&mut self) -> Result<Roles> {
        let (devs, sbs, fresh) = (&self.devs, &mut self.sbs, &self.fresh);
        let max_events = self.max_events;
        let raid_disks = fresh.role_slots();
        let mut slots: Vec<Option<usize>> = vec![None; raid_disks];
        let mut spares = Vec::new();
        let mut stale = Vec::new();
        let mut repl: Vec<(usize, usize)> = Vec::new();
        for (i, s) in sbs.iter().enumerate() {
            let ev = s.events();
            let role = fresh.role_of(s.dev_number());
            let own_spare = matches!(s.own_role(), Role::Spare);
            if ev.saturating_add(1) < max_events && !own_spare {
                // It believes it is an active member, but it missed updates.
                stale.push(i);
                continue;
            }
            if ev > max_events || own_spare || matches!(role, Role::Spare) {
                spares.push(i);
                continue;
            }
            if s.feature_map() & feature::REPLACEMENT != 0 {
                // A half-built replacement: not a data source; it keeps being built next to
                // the member it replaces (or takes the role over if that one is gone).
                match role {
                    Role::Active(r) if r < raid_disks => repl.push((i, r)),
                    _ => spares.push(i),
                }
                continue;
            }
            match role {
                Role::Active(r) if r < raid_disks => {
                    if let Some(j) = slots[r] {
                        return Err(EngineError::BadMember {
                            device: devs[i].name().to_string(),
                            why: format!(
                                "claims role {r}, which {} also claims (events {} and {}); remove the one that does not belong",
                                devs[j].name(),
                                ev,
                                sbs[j].events()
                            ),
                        });
                    }
                    slots[r] = Some(i);
                }
                Role::Active(r) => {
                    return Err(EngineError::BadMember {
                        device: devs[i].name().to_string(),
                        why: format!("claims role {r} but the array has only {raid_disks} devices"),
                    })
                }
                Role::Faulty => {
                    return Err(EngineError::BadMember {
                        device: devs[i].name().to_string(),
                        why: "the array recorded this member as faulty; leave it out (its data is out of date) and add it back as a new member".into(),
                    })
                }
                Role::Journal => {
                    return Err(EngineError::Unsupported {
                        uuid: self.uuid_text.clone(),
                        what: "a journal device".into(),
                        advice: "assemble it with the kernel".into(),
                    })
                }
                Role::Spare => spares.push(i),
            }
        }
        // Replacements: next to their original, or in its place if it is gone (md then
        // treats the replacement as an ordinary recovering member).
        let mut replacing: Vec<(usize, usize)> = Vec::new();
        for (i, r) in repl {
            if slots[r].is_none() {
                if let Super::V1(s) = &mut sbs[i] {
                    s.feature_map &= !feature::REPLACEMENT;
                }
                slots[r] = Some(i);
            } else if replacing.iter().any(|&(_, rr)| rr == r) {
                spares.push(i);
            } else {
                replacing.push((i, r));
            }
        }
        Ok(Roles {
            slots,
            spares,
            stale,
            replacing,
        })
    }

    /// Members that missed updates: refused unless forced; when the array cannot run
    /// without them, forced ones go back into their roles, newest first.
    fn take_stale(&self, roles: &mut Roles, opts: &AssembleOptions) -> Result<()> {
        if roles.stale.is_empty() {
            return Ok(());
        }
        let (devs, sbs) = (&self.devs, &self.sbs);
        let raid_disks = self.fresh.role_slots();
        let missing: Vec<usize> = (0..raid_disks)
            .filter(|&r| roles.slots[r].is_none())
            .collect();
        let names: Vec<String> = roles
            .stale
            .iter()
            .map(|&i| format!("{} (events {})", devs[i].name(), sbs[i].events()))
            .collect();
        let ok_without = can_run(self.level, raid_disks, &missing, &self.fresh).is_ok();
        if !opts.force {
            return Err(EngineError::BadMember {
                device: names.join(", "),
                why: format!(
                    "out of date: the newest member has events {}, so this member missed writes and its data is stale. {}",
                    self.max_events,
                    if ok_without && missing.is_empty() {
                        "Every role has a newer member, so it has left the array (replaced, or failed and then removed): leave it out, or add it back as a spare."
                    } else if ok_without {
                        "Leave it out to use the array degraded, then re-add it so it is rebuilt."
                    } else {
                        "Without it the array cannot run; forcing the assembly would use its old data anyway (possible corruption in recently written areas)."
                    }
                ),
            });
        }
        if !ok_without {
            let mut stale = roles.stale.clone();
            stale.sort_by_key(|&i| std::cmp::Reverse(sbs[i].events()));
            for i in stale {
                if let Role::Active(r) = sbs[i].own_role() {
                    if r < raid_disks && roles.slots[r].is_none() {
                        roles.slots[r] = Some(i);
                    }
                }
            }
        }
        Ok(())
    }

    /// Data sectors of each role's member (linear and RAID0, whose members may differ);
    /// empty for other levels.
    fn member_sectors(&self, slots: &[Option<usize>]) -> Vec<u64> {
        if !matches!(self.level, Level::Linear | Level::Raid0) {
            return Vec::new();
        }
        slots
            .iter()
            .map(|s| {
                s.map(|i| self.sbs[i].data_size(self.areas[i].dev_sectors))
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Where resync starts, and whether a dirty degraded array is started by force (then
    /// marked clean on the first write, as md does). Only data that must be reconstructed
    /// is at risk in a dirty array (md's `only_parity`): a member the reshape builds
    /// ([`Reshaping::builds`]) lacks only the old geometry's blocks (where the reshape has
    /// passed it is complete), so it does not make the array unsafe if its role holds
    /// only parity there (the Q of a RAID5→6 conversion, the parity of a RAID0→5 or RAID0
    /// grow); another member part-way rebuilt, or a missing one, does not if its role
    /// holds only parity in both geometries. `geo`: the array's geometry (the new one of
    /// a reshape).
    fn resync_state(
        &self,
        slots: &[Option<usize>],
        missing: &[usize],
        geo: &Geometry,
        reshaping: Option<&Reshaping>,
        opts: &AssembleOptions,
    ) -> Result<(u64, bool)> {
        let (old, new) = reshaping.map_or((geo, geo), |r| (r.plan.old(), r.plan.new_geometry()));
        let resync = if self.level.has_redundancy() {
            self.fresh.resync_offset()
        } else {
            MAX_SECTOR
        };
        // Parity only (or nothing) in geometry `g`.
        let no_data = |g: &Geometry, r: usize| r >= g.raid_disks || g.holds_only_parity(r);
        let lacks_data = |r: usize| !(no_data(old, r) && no_data(new, r));
        let recovering = slots.iter().enumerate().any(|(role, s)| {
            s.is_some_and(|i| {
                let built = reshaping.is_some_and(|x| x.builds(role));
                self.sbs[i].recovery_offset().is_some()
                    && if built {
                        !no_data(old, role)
                    } else {
                        lacks_data(role)
                    }
            })
        });
        let lacking = missing.iter().any(|&r| lacks_data(r));
        let degraded = lacking || recovering;
        if self.level.has_parity() && degraded && resync != MAX_SECTOR {
            let report_only = opts.report_only && !opts.writable;
            if !opts.force && !report_only {
                return Err(EngineError::DirtyDegraded {
                    uuid: self.uuid_text.clone(),
                    resync,
                });
            }
            return Ok((MAX_SECTOR, true));
        }
        Ok((resync, false))
    }

    /// The members in their roles, with their bad-block logs.
    fn members(&self, slots: &[Option<usize>]) -> Result<Vec<Option<Member>>> {
        slots
            .iter()
            .map(|s| {
                let Some(i) = *s else {
                    return Ok(None);
                };
                let sb = &self.sbs[i];
                let bad = load_bbl(self.devs[i].as_ref(), sb, self.areas[i].bblog)?;
                Ok(Some(Member::new(
                    self.devs[i].clone(),
                    i,
                    sb.data_offset(),
                    sb.recovery_offset(),
                    bad,
                )))
            })
            .collect()
    }

    /// The role table for later superblock writes: absent devices lose their role.
    fn role_table(&self, roles: &Roles) -> Vec<u16> {
        let sbs = &self.sbs;
        let mut table: Vec<u16> = match &self.fresh {
            Super::V1(s) => s.dev_roles.clone(),
            Super::V090(_) => Vec::new(),
        };
        let present: Vec<usize> = roles
            .slots
            .iter()
            .flatten()
            .chain(roles.replacing.iter().map(|(i, _)| i))
            .map(|&i| sbs[i].dev_number())
            .collect();
        for (j, r) in table.iter_mut().enumerate() {
            if *r < 0xff00 && !present.contains(&j) {
                *r = v1role::SPARE;
            }
        }
        for &i in &roles.spares {
            if let Some(r) = table.get_mut(sbs[i].dev_number()) {
                *r = v1role::SPARE;
            }
        }
        table
    }

    /// The write-intent bitmap, read from an in-sync member (dirty bits on a clean array
    /// are harmless leftovers, cleared on the next clean mark). A bitmap that cannot be
    /// used (unreadable, another array's, damaged: it must cover the array and fit in its
    /// room on the device before anything is allocated from it) is never fatal: the
    /// array runs without it and the note says why.
    fn bitmap(
        &self,
        slots: &[Option<usize>],
        dirty: bool,
    ) -> (Option<RunBitmap>, Option<AssemblyNote>) {
        if self.areas[self.fresh_i].bitmap_start.is_none() {
            return (None, None);
        }
        let locs: Vec<Option<u64>> = self.areas.iter().map(|a| a.bitmap_start).collect();
        let src = slots
            .iter()
            .flatten()
            .copied()
            .find(|&i| self.sbs[i].recovery_offset().is_none() && locs[i].is_some())
            .unwrap_or(self.fresh_i);
        let need = self.fresh.bitmap_sync_size();
        let dev = self.devs[src].as_ref();
        match RunBitmap::load_checked(
            dev,
            &self.areas[src],
            self.uuid,
            need,
            self.max_events,
            locs,
        ) {
            Ok(b) => (Some(b), None),
            Err(why) => (
                None,
                Some(AssemblyNote::BitmapIgnored {
                    device: self.devs[src].name().to_string(),
                    why,
                    full_resync: dirty,
                }),
            ),
        }
    }
}

/// A member's bad ranges from its on-disk bad-block log at `bblog` (from the member's
/// checked areas; empty without one).
pub(crate) fn load_bbl(
    dev: &dyn BlockDev,
    sb: &Super,
    bblog: Option<Extent>,
) -> Result<Vec<badblocks::BadRange>> {
    let (Some(log), Some((_, _, shift))) = (bblog, sb.bblog()) else {
        return Ok(Vec::new());
    };
    if sb.feature_map() & feature::BAD_BLOCKS == 0 || log.is_empty() {
        return Ok(Vec::new());
    }
    // The checked log is at most 8 sectors (validate) and inside the device (areas).
    let mut buf = vec![0u8; (log.len() * 512) as usize];
    dev.read_at(&mut buf, log.start * 512)
        .map_err(|e| EngineError::io(dev.name(), "reading the bad-block log", e))?;
    badblocks::parse(&buf, shift).map_err(|e| EngineError::NoSuperblock {
        device: dev.name().to_string(),
        detail: format!(
            "the bad-block log is corrupt ({e}); assemble without this member and re-add it"
        ),
    })
}

/// Can the array run with these roles missing? Err explains which roles are needed.
fn can_run(
    level: Level,
    n: usize,
    missing: &[usize],
    fresh: &Super,
) -> std::result::Result<(), String> {
    let list = |m: &[usize]| {
        m.iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match level {
        Level::Linear | Level::Raid0 if !missing.is_empty() => Err(format!(
            "role(s) {} missing and {level} has no redundancy: every member is needed; give the device(s) that held role(s) {}",
            list(missing),
            list(missing)
        )),
        Level::Linear | Level::Raid0 => Ok(()),
        Level::Raid1 if missing.len() >= n => {
            Err("no member with data is present; give at least one mirror".into())
        }
        Level::Raid1 => Ok(()),
        Level::Raid4 | Level::Raid5 | Level::Raid6 => {
            let tolerated = level.parity_blocks();
            if missing.len() <= tolerated {
                Ok(())
            } else {
                Err(format!(
                    "{} of {n} members missing (roles {}), {level} survives at most {tolerated}; give more of the members",
                    missing.len(),
                    list(missing)
                ))
            }
        }
        Level::Raid10 => {
            let geo = Geometry::new(
                level,
                fresh.layout(),
                fresh.chunk_sectors(),
                n,
                fresh.size_sectors(),
                Vec::new(),
            )
            .map_err(|e| e.to_string())?;
            match geo.raid10_lost_copies(missing) {
                Some(roles) => Err(format!(
                    "every copy of some data is missing (roles {} all absent); give at least one of them",
                    list(&roles)
                )),
                None => Ok(()),
            }
        }
    }
}
