//! The supervisor's member verbs address a member however the user names it: by the name
//! reports show, by its path (any spelling), or by a fault-injection spec around it.

use raidkit_engine::assemble::assemble_paths;
use raidkit_engine::supervisor::{Supervisor, SupervisorError};
use raidkit_layout::Level;
use raidkit_testkit::tempdir::TempDir;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod cases;
use cases::{make, read_all, ro, rw, Case};

fn wrapped(p: &Path) -> PathBuf {
    PathBuf::from(format!("fault:slow=10us:{}", p.display()))
}

fn state_of(sup: &Supervisor, path: &Path) -> Vec<(String, bool)> {
    let shown = format!("{} (fault-injected)", path.display());
    sup.status()
        .members
        .into_iter()
        .filter(|m| m.device == shown || m.device == path.display().to_string())
        .map(|m| (m.state, m.write_mostly))
        .collect()
}

#[test]
fn every_verb_names_a_fault_wrapped_member_by_its_path_its_spec_or_its_display_name() {
    let dir = TempDir::new("rk-names").unwrap();
    let (ps, model) = make(&Case::v12(Level::Raid1, "default", 3, 64, 2), &dir);
    let specs: Vec<PathBuf> = ps.iter().map(|p| wrapped(p)).collect();
    let arr = Arc::new(assemble_paths(&specs, &rw()).unwrap());
    let sup = Supervisor::start("t", arr.clone());
    let m2 = ps[2].display().to_string();
    // Another spelling of the path, and a spec with other rules than the served one's.
    let m2_dotted = format!(
        "{}/./{}",
        dir.path().display(),
        ps[2].file_name().unwrap().to_str().unwrap()
    );
    let m2_spec = format!("fault:reio@9999999:{m2}");

    sup.set_write_mostly(&m2_dotted, true).unwrap();
    assert_eq!(state_of(&sup, &ps[2]), [("in_sync".to_string(), true)]);
    sup.set_write_mostly(&m2_spec, false).unwrap();
    assert_eq!(state_of(&sup, &ps[2]), [("in_sync".to_string(), false)]);
    sup.fail(&m2_spec).unwrap();
    assert_eq!(state_of(&sup, &ps[2]), [("failed".to_string(), false)]);
    sup.remove(&m2).unwrap();
    assert!(state_of(&sup, &ps[2]).is_empty());
    sup.re_add(&wrapped(&ps[2]), false).unwrap();
    sup.wait_idle();
    assert_eq!(state_of(&sup, &ps[2]), [("in_sync".to_string(), false)]);

    // A hot replace of member 1 named by its spec, onto a spare named by its path.
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    sup.add(&wrapped(&spare), false).unwrap();
    sup.replace(
        &format!("fault:eio@1:{}", ps[1].display()),
        Some(&spare),
        false,
    )
    .unwrap();
    sup.wait_idle();
    assert!(
        state_of(&sup, &ps[1]).is_empty(),
        "{:?}",
        sup.status().members
    );
    assert_eq!(state_of(&sup, &spare), [("in_sync".to_string(), false)]);

    // The display name still works, and what names no device is refused by its name.
    sup.fail(&format!("{} (fault-injected)", ps[0].display()))
        .unwrap();
    let other = dir.path().join("not-a-member.img");
    let e = sup.fail(&other.display().to_string()).unwrap_err();
    assert!(matches!(e, SupervisorError::NotAMember { .. }), "{e}");
    assert!(e.to_string().contains("not-a-member.img"), "{e}");
    sup.shutdown().unwrap();
    drop(sup);
    drop(arr);
    let now = vec![ps[2].clone(), spare.clone()];
    assert!(read_all(&now, &ro()).unwrap() == model);
}

fn open(p: &Path) -> Arc<dyn raidkit_engine::BlockDev> {
    raidkit_engine::dev::open_member(p, true).unwrap()
}

/// Adding a device the array already uses (a member, failed or not, or a spare; by any
/// path or wrapper) as a new spare is refused: it would give one file two roles.
#[test]
fn a_device_the_array_uses_is_refused_as_a_new_spare() {
    let dir = TempDir::new("rk-names").unwrap();
    let (ps, model) = make(&Case::v12(Level::Raid5, "left-symmetric", 4, 64, 2), &dir);
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let link = dir.path().join("link-to-m1");
    std::os::unix::fs::symlink(&ps[1], &link).unwrap();
    for given in [ps[1].clone(), wrapped(&ps[1]), link] {
        let e = arr.add_spare(open(&given), false).unwrap_err().to_string();
        assert!(
            e.contains("is already in this array as") && e.contains("the member of role 1"),
            "{e}"
        );
    }
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    arr.add_spare(open(&spare), false).unwrap();
    let e = arr
        .add_spare(open(&wrapped(&spare)), false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("spare.img, a spare"), "{e}");
    arr.fail_member(2, "test").unwrap();
    let e = arr.add_spare(open(&ps[2]), false).unwrap_err().to_string();
    assert!(
        e.contains("the failed member of role 2; remove it from the array first"),
        "{e}"
    );
    // Removed, it may come back as a spare.
    arr.remove_member(&ps[2].display().to_string()).unwrap();
    arr.add_spare(open(&ps[2]), true).unwrap();
    assert_eq!(arr.spare_count(), 2);
    arr.stop().unwrap();
    let survivors = vec![ps[0].clone(), ps[1].clone(), ps[3].clone()];
    assert!(read_all(&survivors, &ro()).unwrap() == model);
}

/// A device reached under another name with no identity to compare (an NBD export under
/// a second address): it reads exactly as the member it is.
struct Alias {
    inner: Arc<dyn raidkit_engine::BlockDev>,
    name: String,
}

impl raidkit_engine::BlockDev for Alias {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn name(&self) -> &str {
        &self.name
    }
}

fn alias(p: &Path) -> Arc<dyn raidkit_engine::BlockDev> {
    Arc::new(Alias {
        inner: open(p),
        name: format!("nbd://other-address/{}", p.display()),
    })
}

/// A second name for a device the array uses, with no identity to compare, is told by the
/// superblock on it: the array's own last superblock of that place (1.x: its device UUID;
/// 0.90: its device number and event count). Added as a spare, its superblock was
/// overwritten with a spare's, and a rebuild onto it would have written one role's data
/// over another's.
#[test]
fn a_second_name_for_a_member_is_refused_by_the_superblock_it_carries() {
    for meta in ["1.2", "0.90"] {
        let dir = TempDir::new("rk-names").unwrap();
        let mut case = Case::v12(Level::Raid5, "left-symmetric", 4, 64, 2);
        case.meta = meta;
        let (ps, model) = make(&case, &dir);
        let arr = assemble_paths(&ps, &rw()).unwrap();
        arr.write(0, &model[..4096]).unwrap();
        let e = arr.add_spare(alias(&ps[1]), true).unwrap_err().to_string();
        assert!(
            e.contains("carries the superblock of") && e.contains("the member of role 1"),
            "{meta}: {e}"
        );
        arr.fail_member(2, "test").unwrap();
        let e = arr.add_spare(alias(&ps[2]), false).unwrap_err().to_string();
        assert!(
            e.contains("the failed member of role 2; remove it from the array first"),
            "{meta}: {e}"
        );
        // Removed, it has left the array: it may come back as a spare under any name.
        arr.remove_member(&ps[2].display().to_string()).unwrap();
        arr.add_spare(alias(&ps[2]), false).unwrap();
        assert_eq!(arr.spare_count(), 1, "{meta}");
        arr.stop().unwrap();
        let survivors = vec![ps[0].clone(), ps[1].clone(), ps[3].clone()];
        assert!(read_all(&survivors, &ro()).unwrap() == model, "{meta}");
    }
}

/// The duplicate check compares what the open descriptors have open, not paths: a
/// member whose file was renamed since assembly is refused under its new name, and a new
/// file put at a member's old path is another device (it is added as a spare).
#[test]
fn a_renamed_or_replaced_member_path_does_not_fool_the_duplicate_check() {
    let dir = TempDir::new("rk-names").unwrap();
    let (ps, model) = make(&Case::v12(Level::Raid5, "left-symmetric", 4, 64, 2), &dir);
    let arr = assemble_paths(&ps, &rw()).unwrap();
    let moved = dir.path().join("moved-m1");
    std::fs::rename(&ps[1], &moved).unwrap();
    let e = arr.add_spare(open(&moved), false).unwrap_err().to_string();
    assert!(
        e.contains("is already in this array as") && e.contains("the member of role 1"),
        "{e}"
    );
    let size = std::fs::metadata(&moved).unwrap().len();
    std::fs::File::create(&ps[1])
        .unwrap()
        .set_len(size)
        .unwrap();
    arr.add_spare(open(&ps[1]), false).unwrap();
    assert_eq!(arr.spare_count(), 1);
    arr.stop().unwrap();
    let now = vec![ps[0].clone(), moved, ps[2].clone(), ps[3].clone()];
    assert!(read_all(&now, &ro()).unwrap() == model);
}

/// A member that was replaced, given back with the array's members, is refused with what
/// it is (a former member the array is complete without), not as a degraded array's.
#[test]
fn a_replaced_member_given_back_is_named_a_former_member() {
    let dir = TempDir::new("rk-names").unwrap();
    let (ps, model) = make(&Case::v12(Level::Raid1, "default", 2, 64, 2), &dir);
    let arr = Arc::new(assemble_paths(&ps, &rw()).unwrap());
    let sup = Supervisor::start("t", arr.clone());
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    sup.replace(&ps[1].display().to_string(), Some(&spare), false)
        .unwrap();
    sup.wait_idle();
    sup.shutdown().unwrap();
    drop(sup);
    drop(arr);
    let all = vec![ps[0].clone(), ps[1].clone(), spare.clone()];
    let e = assemble_paths(&all, &ro())
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("m1.img (events"), "{e}");
    assert!(e.contains("it has left the array"), "{e}");
    assert!(!e.contains("degraded"), "{e}");
    assert!(read_all(&[ps[0].clone(), spare], &ro()).unwrap() == model);
}
