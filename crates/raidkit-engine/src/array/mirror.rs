//! RAID1/10 reads: which copy serves each piece (read balancing), spreading large reads
//! over the members, falling back to other copies; walking a member's mirrored runs.

use crate::array::balance;
use crate::array::balance::Candidate;
use crate::array::member_io::MemberOp;
use crate::array::write_buf::WriteData;
use crate::array::Array;
use crate::error::EngineError;
use crate::error::Result;
use raidkit_layout::SECTOR;
use smallvec::SmallVec;

impl Array {
    /// Read a piece of one mapping run at array sector `sector` (linear, RAID0, and
    /// small RAID1/10 reads): from the cheapest copy that serves it.
    pub(crate) fn read_mapped_piece(&self, sector: u64, buf: &mut [u8]) -> Result<()> {
        let sectors = buf.len() as u64 / SECTOR;
        let p = self.locate(sector)?;
        let cands = self.candidates(&p.copies, sectors);
        let order = self.try_order(&p.copies, &cands, None, 0);
        self.read_copies(sector, buf, &order)
    }

    /// Write whole sectors at array sector `start` of a level without parity onto every
    /// copy of every run, all at once (the bitmap bits of mirrored runs set first). A run
    /// no copy of which could be written fails the write.
    pub(crate) fn write_mapped(&self, start: u64, buf: WriteData<'_>) -> Result<()> {
        let total = buf.bytes().len() as u64 / SECTOR;
        // Ordered against a mirrored rebuild's or sync's regions in flight (range_gate).
        let _in_flight = self.enter_write_range(start, total);
        let mut runs: SmallVec<[_; 2]> = SmallVec::new();
        let mut done = 0;
        while done < total {
            let at = start + done;
            let p = self.locate(at)?;
            let n = p.run.min(total - done);
            runs.push((at, n, p.copies));
            done += n;
        }
        if self.geo.level.mirrors() {
            for &(at, n, _) in &runs {
                self.bitmap_mark(at, n)?;
            }
        }
        self.settle_write_behind();
        // Without write-behind every copy is written now: no member is looked at here.
        let may_queue_behind = self.wb.limit() > 0;
        let mut ops: SmallVec<[MemberOp<'_>; 4]> =
            SmallVec::with_capacity(runs.iter().map(|r| r.2.len()).sum());
        // Per run: the copies written now, and those queued behind (write-mostly members).
        let mut counts: SmallVec<[(usize, usize); 2]> = SmallVec::with_capacity(runs.len());
        for &(at, n, ref copies) in &runs {
            let from = ((at - start) * SECTOR) as usize;
            let data = buf.range(from, from + (n * SECTOR) as usize);
            // Copies that take the write now and already hold the rest of the range (in
            // sync there, not failed, no bad block): a spare still being rebuilt below
            // this range does not count, or a crash would leave the write only on it and
            // in the lost queue, and the rebuild could copy the stale write-mostly copy
            // over it.
            let others = if may_queue_behind {
                copies
                    .iter()
                    .filter(|c| {
                        self.member(c.0)
                            .is_some_and(|m| !m.is_write_mostly() && m.readable(c.1, n))
                    })
                    .count()
            } else {
                0
            };
            let mut now = 0;
            let mut behind = 0;
            for &(role, data_sector) in copies {
                // Behind only while another copy takes the write now.
                if others > 0 && self.write_behind(role, data_sector, data) {
                    behind += 1;
                } else {
                    ops.push(MemberOp::write(role, data_sector, data.bytes()));
                    now += 1;
                }
            }
            counts.push((now, behind));
        }
        self.member_io(&mut ops);
        let mut ops = ops.into_iter();
        let mut first_err = None;
        let mut unwritten = Vec::new();
        for ((at, n, _), (now, behind)) in runs.into_iter().zip(counts) {
            let mut written = behind;
            let mut failed = 0;
            // Copies kept though gone (see `failing`): nothing of theirs is marked lost.
            let mut kept = Vec::new();
            for op in ops.by_ref().take(now) {
                let (role, dsec) = (op.role, op.dsec);
                match op.write_result() {
                    Ok(true) => written += 1,
                    // Kept though its write failed: it may hold anything there now.
                    // (Missing and failed members are not written: they hold nothing.)
                    Ok(false) if self.member(role).is_some() => failed += 1,
                    Ok(false) => {}
                    Err(e) if e.is_member_gone() => kept.push((role, dsec, e)),
                    Err(e) => {
                        failed += 1;
                        first_err.get_or_insert(e);
                    }
                }
            }
            if written > 0 {
                // Another copy holds the write: the kept ones are distrusted there.
                for (role, dsec, _) in kept {
                    self.distrust_kept(role, dsec, n);
                }
            } else if failed > 0 || kept.is_empty() {
                unwritten.push((at * SECTOR, n * SECTOR));
            } else if let Some((_, _, e)) = kept.into_iter().next() {
                // Only kept copies, none written: the write fails, their data stays.
                first_err.get_or_insert(e);
            }
        }
        // No copy took these runs: the member kept (the last copy, see `failing`) may
        // hold anything there now, so the range reads as lost until written again.
        self.add_lost(&unwritten);
        if let Some(e) = first_err {
            return Err(e);
        }
        match unwritten.first() {
            None => Ok(()),
            Some(&(offset, len)) => Err(EngineError::WriteFailed {
                offset,
                end: offset + len,
                why: "no member holding this range could be written (the last copy is kept; these bytes read as an error until they are written again)".into(),
            }),
        }
    }

    /// Members holding readable copies of `n` sectors at `copies`, with their load.
    /// Write-mostly members are left out while another copy is readable (md's rule: they
    /// serve reads only when nothing else can).
    pub(crate) fn candidates(&self, copies: &[(usize, u64)], n: u64) -> Vec<Candidate> {
        let now = balance::now_ns();
        let mut write_mostly = Vec::new();
        let mut cands: Vec<Candidate> = copies
            .iter()
            .filter_map(|&(role, dsec)| {
                let m = self.member(role)?;
                let c = m.readable(dsec, n).then(|| Candidate {
                    role,
                    cost: m.load.cost_at(now),
                    idle: m.load.idle(),
                })?;
                if m.is_write_mostly() {
                    write_mostly.push(c);
                    return None;
                }
                Some(c)
            })
            .collect();
        if cands.is_empty() {
            // Only write-mostly copies (their reads wait for the writes queued behind:
            // `member_io`).
            cands = write_mostly;
        }
        cands
    }

    /// The copies of a mirrored run in the order to try them, `off` sectors into the run:
    /// `first` (if given), then the readable ones cheapest first, then the rest (which
    /// only report why they could not serve).
    pub(crate) fn try_order(
        &self,
        copies: &[(usize, u64)],
        cands: &[Candidate],
        first: Option<usize>,
        off: u64,
    ) -> Vec<(usize, u64)> {
        let mut roles: Vec<usize> = first.into_iter().collect();
        for r in balance::order(cands)
            .into_iter()
            .chain(copies.iter().map(|c| c.0))
        {
            if !roles.contains(&r) {
                roles.push(r);
            }
        }
        roles
            .into_iter()
            .filter_map(|r| copies.iter().find(|c| c.0 == r).map(|&(r, d)| (r, d + off)))
            .collect()
    }

    /// Read mirrored data from the first copy in `order` that serves it; copies that
    /// failed with an IO error are rewritten with the good data (md's read-error repair).
    pub(crate) fn read_copies(&self, s: u64, buf: &mut [u8], order: &[(usize, u64)]) -> Result<()> {
        let n = buf.len() as u64 / SECTOR;
        let mut errs = Vec::new();
        let mut failed_copies = Vec::new();
        for &(role, dsec) in order {
            if !self.can_read(role, dsec, n) {
                errs.push(format!("role {role} unavailable"));
                continue;
            }
            match self.member_read(role, dsec, buf) {
                Ok(()) => {
                    for (r, d) in failed_copies {
                        self.repair_read_error(r, d, buf);
                    }
                    return Ok(());
                }
                Err(e) => {
                    // A bad sector is rewritten; a member that is gone is not.
                    if matches!(e, EngineError::Io { .. }) && !e.is_member_gone() {
                        failed_copies.push((role, dsec));
                    }
                    errs.push(e.to_string())
                }
            }
        }
        Err(EngineError::Unreadable {
            offset: s * SECTOR,
            end: (s + n) * SECTOR,
            why: errs.join("; "),
        })
    }

    /// Read whole sectors of a RAID1/RAID10 array. A large read is spread over the idle
    /// members holding copies, in proportion to their speed (`balance::split`), and every
    /// member's pieces are read at once (one batch of member IOs). When every part of the read has its
    /// copies on the same members (RAID1, two-member RAID10) the read is cut into one
    /// contiguous segment per member; otherwise each mapping run is shared separately.
    pub(crate) fn read_mirrored(&self, start: u64, buf: &mut [u8]) -> Result<()> {
        let total = buf.len() as u64 / SECTOR;
        if total < balance::SPLIT_MIN_SECTORS {
            return self.read_serial(start, buf);
        }
        let runs = self.mapping_runs(start, total)?;
        let roles_of = |c: &[Candidate]| {
            let mut v: Vec<usize> = c.iter().map(|c| c.role).collect();
            v.sort_unstable();
            v
        };
        let same_members = runs
            .windows(2)
            .all(|w| roles_of(&w[0].cands) == roles_of(&w[1].cands));
        let mut plan = ReadPlan::default();
        if same_members {
            self.plan_segments(start, total, &runs, &mut plan);
        } else {
            self.plan_per_run(&runs, &mut plan);
        }
        self.read_extents(buf, plan.extents)
    }

    /// The mapping runs of array sectors `[start, start + total)`, with their readable
    /// copies.
    fn mapping_runs(&self, start: u64, total: u64) -> Result<Vec<MappingRun>> {
        let mut runs = Vec::new();
        let mut done = 0;
        while done < total {
            let at = start + done;
            let p = self.locate(at)?;
            let sectors = p.run.min(total - done);
            let cands = self.candidates(&p.copies, sectors);
            runs.push(MappingRun {
                at,
                sectors,
                copies: p.copies,
                cands,
            });
            done += sectors;
        }
        Ok(runs)
    }

    /// Every run on the same members: one contiguous segment per member, each over as many
    /// runs as it covers. A cut near a run boundary moves onto it: a member then reads
    /// whole runs, not an extra short piece (each member IO costs a device latency).
    fn plan_segments(&self, start: u64, total: u64, runs: &[MappingRun], plan: &mut ReadPlan) {
        let mut segments = balance::split(start, total, &runs[0].cands);
        if segments.is_empty() {
            segments.push((usize::MAX, total));
        }
        let mut cuts: Vec<u64> = segments
            .iter()
            .scan(start, |at, &(_, len)| {
                *at += len;
                Some(*at)
            })
            .collect();
        let slack = total / 8;
        let last = cuts.len() - 1;
        for c in &mut cuts[..last] {
            if let Some(b) = runs[1..]
                .iter()
                .map(|r| r.at)
                .min_by_key(|b| b.abs_diff(*c))
                .filter(|b| b.abs_diff(*c) <= slack)
            {
                *c = b;
            }
        }
        let mut ri = 0;
        let mut at = start;
        for (&(role, _), &end) in segments.iter().zip(&cuts) {
            while at < end {
                let run = &runs[ri];
                let run_end = run.at + run.sectors;
                let piece = run_end.min(end) - at;
                plan.push(self, run, at, piece, (role != usize::MAX).then_some(role));
                at += piece;
                if at == run_end {
                    ri += 1;
                }
            }
        }
    }

    /// Runs on different members: a large run is shared by its idle copies, a small one
    /// goes whole to the copy with the least work planned so far.
    fn plan_per_run(&self, runs: &[MappingRun], plan: &mut ReadPlan) {
        let mut planned = vec![0u64; self.geo.raid_disks];
        for run in runs {
            let pieces = if run.sectors >= balance::SPLIT_MIN_SECTORS {
                balance::split(run.at, run.sectors, &run.cands)
            } else {
                run.cands
                    .iter()
                    .min_by_key(|c| {
                        let done = planned.get(c.role).copied().unwrap_or(0);
                        c.cost.saturating_mul(done + run.sectors)
                    })
                    .map(|c| vec![(c.role, run.sectors)])
                    .unwrap_or_default()
            };
            let mut at = run.at;
            for (role, len) in pieces {
                plan.push(self, run, at, len, Some(role));
                if let Some(p) = planned.get_mut(role) {
                    *p += len;
                }
                at += len;
            }
            if at == run.at {
                plan.push(self, run, at, run.sectors, None);
            }
        }
    }

    /// Read the planned extents: each from its first copy, all at once (one member IO
    /// per extent); an extent whose read failed is read again piece by piece, each piece
    /// with its own fallback copies (and read-error repair).
    fn read_extents(&self, buf: &mut [u8], plan: Vec<Extent>) -> Result<()> {
        let mut pieces: Vec<&mut [u8]> = Vec::with_capacity(plan.len());
        let mut rest = buf;
        for ext in &plan {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut((ext.len * SECTOR) as usize);
            pieces.push(piece);
            rest = tail;
        }
        let mut ok = vec![false; plan.len()];
        {
            let mut ops = Vec::with_capacity(plan.len());
            let mut which = Vec::with_capacity(plan.len());
            for (k, (piece, ext)) in pieces.iter_mut().zip(&plan).enumerate() {
                if let Some(&(role, dsec)) = ext.pieces.first().and_then(|p| p.2.first()) {
                    if self.can_read(role, dsec, ext.len) {
                        ops.push(MemberOp::read(role, dsec, piece));
                        which.push(k);
                    }
                }
            }
            self.member_io(&mut ops);
            for (op, k) in ops.iter().zip(which) {
                ok[k] = op.ok();
            }
        }
        for ((piece, ext), done) in pieces.into_iter().zip(&plan).zip(ok) {
            if !done {
                self.read_extent_again(piece, ext)?;
            }
        }
        Ok(())
    }

    /// Read an extent whose first read failed (or could not be made): piece by piece,
    /// each from the copies in its order (read-error repair included).
    fn read_extent_again(&self, buf: &mut [u8], ext: &Extent) -> Result<()> {
        let mut rest = buf;
        for (at, len, order) in &ext.pieces {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut((len * SECTOR) as usize);
            rest = tail;
            self.read_copies(*at, piece, order)?;
        }
        Ok(())
    }

    /// Walk a mirrored (RAID1/10) member's data sectors `[d, d + n)` in runs that map
    /// contiguously to array sectors: `f(data_sector, array_sector, placement, run)`.
    /// Sectors that hold no array data are skipped. Stops early (Ok(false)) when `f` does.
    pub(crate) fn mirror_runs(
        &self,
        role: usize,
        d: u64,
        n: u64,
        mut f: impl FnMut(u64, u64, &raidkit_layout::Placement, u64) -> Result<bool>,
    ) -> Result<bool> {
        let mut done = 0;
        while done < n {
            let dsec = d + done;
            let Some(s) = self.geo.reverse(role, dsec) else {
                done += 1;
                continue;
            };
            let Some(p) = self.geo.locate(s) else {
                done += 1;
                continue;
            };
            let run = p.run.min(n - done);
            if !f(dsec, s, &p, run)? {
                return Ok(false);
            }
            done += run;
        }
        Ok(true)
    }

    /// Fill `buf` (`run` sectors of placement `p`) from a copy other than `role`'s. Copies
    /// that were readable in principle but failed are pushed to `failed`. False if no
    /// other copy could supply it.
    pub(crate) fn read_other_copy(
        &self,
        role: usize,
        p: &raidkit_layout::Placement,
        run: u64,
        buf: &mut [u8],
        failed: &mut Vec<(usize, u64)>,
    ) -> bool {
        p.copies.iter().any(|&(r, d)| {
            if r == role || !self.readable(r, d, run) {
                return false;
            }
            let ok = self.read_block(r, d, buf).is_ok();
            if !ok {
                failed.push((r, d));
            }
            ok
        })
    }
}

/// A run of array sectors that maps contiguously onto the same copies.
struct MappingRun {
    /// First array sector.
    at: u64,
    sectors: u64,
    /// `(role, data sector)` of every copy of the first sector.
    copies: Vec<(usize, u64)>,
    /// The copies that can be read, with their load.
    cands: Vec<Candidate>,
}

/// The extents of a mirrored read, in array order.
#[derive(Default)]
struct ReadPlan {
    extents: Vec<Extent>,
}

impl ReadPlan {
    /// Plan `len` sectors of `run` from array sector `from`, on `first` if given (then the
    /// other copies cheapest first). Pieces that follow each other both in the array and
    /// on their first copy's member are merged into one extent, read with one member IO.
    fn push(&mut self, arr: &Array, run: &MappingRun, from: u64, len: u64, first: Option<usize>) {
        let order = arr.try_order(&run.copies, &run.cands, first, from - run.at);
        if let Some(last) = self.extents.last_mut() {
            let follows = last.pieces.last().is_some_and(|(pat, plen, porder)| {
                pat + plen == from
                    && matches!((porder.first(), order.first()),
                        (Some(&(r0, d0)), Some(&(r1, d1))) if r0 == r1 && d0 + plen == d1)
            });
            if follows {
                last.len += len;
                last.pieces.push((from, len, order));
                return;
            }
        }
        self.extents.push(Extent {
            len,
            pieces: vec![(from, len, order)],
        });
    }
}

/// One piece of a mirrored read: array sector, sectors, `(role, data sector)` copies in
/// the order to try them.
pub(crate) type MirrorPiece = (u64, u64, Vec<(usize, u64)>);

/// Consecutive pieces of a mirrored read that one member IO can serve (their first copies
/// are adjacent on one member).
pub(crate) struct Extent {
    len: u64,
    pieces: Vec<MirrorPiece>,
}

#[cfg(test)]
mod mirror_tests {
    use crate::create::{create, CreateOptions, MemberSpec};
    use raidkit_layout::{names, Level};
    use raidkit_testkit::tempdir::TempDir;

    /// Every copy `Geometry::locate` gives, of every mirrored layout, serves reads when
    /// it is the cheapest: with the members of all other copies loaded, a 4 KiB read goes
    /// to exactly that copy and returns the written data.
    #[test]
    fn every_copy_of_every_layout_is_chosen_when_cheapest() {
        for (level, layout, n) in [
            (Level::Raid1, "default", 3usize),
            (Level::Raid10, "n2", 2),
            (Level::Raid10, "n2", 3),
            (Level::Raid10, "f2", 2),
            (Level::Raid10, "f2", 4),
            (Level::Raid10, "o2", 2),
            (Level::Raid10, "o2", 3),
            (Level::Raid10, "n3", 4),
            (Level::Raid10, "f3", 5),
            (Level::Raid10, "o3", 4),
        ] {
            let dir = TempDir::new("rk-balance").unwrap();
            let ps: Vec<_> = (0..n)
                .map(|i| MemberSpec::Path(dir.path().join(format!("m{i}"))))
                .collect();
            let mut o = CreateOptions::new(level, ps);
            o.layout = Some(names::parse_layout(level, layout).unwrap());
            if level == Level::Raid10 {
                o.chunk_bytes = Some(16 << 10);
            }
            o.create_size = Some(2 << 20);
            let arr = create(&o, &mut |_, _| {}).unwrap();
            let size = arr.size_bytes();
            let data: Vec<u8> = (0..size).map(|i| (i * 131 / 512 % 251) as u8).collect();
            arr.write(0, &data).unwrap();
            // Sectors in several chunks, rows and (far/offset) zones.
            // (None crosses a 16 KiB chunk: one run, one set of copies.)
            for s in [0u64, 40, 77, 200, size / 512 / 64 * 32 + 9, size / 512 - 8] {
                let p = arr.geo.locate(s).unwrap();
                assert_eq!(
                    p.copies.len(),
                    if level == Level::Raid1 {
                        n
                    } else {
                        layout[1..].parse().unwrap()
                    }
                );
                for &(role, _) in &p.copies {
                    // The copy on `role` is idle, every other copy's member has 5 reads
                    // queued; all measured equally fast.
                    for &(r, _) in &p.copies {
                        let q = if r == role { 0 } else { 5 };
                        arr.member(r).unwrap().load.set(q, 1000);
                    }
                    let before = arr.member_stats()[role].reads;
                    let mut b = vec![0u8; 4096];
                    arr.read(s * 512, &mut b).unwrap();
                    assert!(
                        b == data[(s * 512) as usize..(s * 512) as usize + 4096],
                        "{level:?} {layout} ×{n} sector {s}: data"
                    );
                    assert_eq!(
                        arr.member_stats()[role].reads,
                        before + 1,
                        "{level:?} {layout} ×{n} sector {s}: copy on role {role} not read"
                    );
                    for &(r, _) in &p.copies {
                        arr.member(r).unwrap().load.set(0, 0);
                    }
                }
            }
        }
    }
}
