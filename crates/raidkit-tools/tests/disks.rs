//! Failure domains on fake sysfs trees (one per case, laid out as the kernel lays them out)
//! and on real files (hard links and symlinks), plus link speeds from sysfs.

use raidkit_layout::Level;
use raidkit_tools::disks::fake::{self, pci};
use raidkit_tools::disks::link::{link_of_disk, LinkKind};
use raidkit_tools::disks::sys::{FileKind, FileStat};
use raidkit_tools::disks::{
    check_members, check_members_on, check_new_members_on, resolve, ArrayShape, DomainFinding,
    DomainKind, FakeSystem, HostSystem, MemberRef, Severity,
};

fn members(paths: &[&str]) -> Vec<MemberRef> {
    MemberRef::in_role_order(paths)
}

fn roles(f: &DomainFinding) -> Vec<Option<usize>> {
    f.members.iter().map(|m| m.role).collect()
}

fn of_kind(fs: &[DomainFinding], k: DomainKind) -> Vec<&DomainFinding> {
    fs.iter().filter(|f| f.kind == k).collect()
}

/// An AHCI controller at 0000:00:1f.2 with disks on ports 1.., and their sysfs folders.
fn ahci(f: &mut FakeSystem, disks: &[(&str, (u32, u32))]) -> Vec<String> {
    let c = pci("0000:00:1f.2");
    f.file(format!("{c}/class"), "0x010601\n")
        .link(format!("{c}/driver"), "/sys/bus/pci/drivers/ahci")
        .file("/sys/bus/pci/drivers/ahci/bind", "");
    disks
        .iter()
        .enumerate()
        .map(|(i, (name, dev))| {
            let p = format!(
                "{c}/ata{n}/host{i}/target{i}:0:0/{i}:0:0:0/block/{name}",
                n = i + 1
            );
            fake::disk(f, name, *dev, &p)
        })
        .collect()
}

/// A disk alone on its own controller (virtio), so only what a test sets up is shared.
fn lone_disk(f: &mut FakeSystem, name: &str, dev: (u32, u32), slot: u32) -> String {
    let p = format!(
        "{}/virtio{slot}/block/{name}",
        pci(&format!("0000:00:{slot:02x}.0"))
    );
    fake::disk(f, name, dev, &p)
}

#[test]
fn partitions_of_one_disk() {
    let mut f = FakeSystem::new();
    let sda = lone_disk(&mut f, "sda", (8, 0), 4);
    fake::partition(&mut f, &sda, "sda1", (8, 1), 1);
    fake::partition(&mut f, &sda, "sda3", (8, 3), 3);
    lone_disk(&mut f, "sdb", (8, 16), 5);
    let shape = ArrayShape::new(Level::Raid5, 3, None);
    let got = check_members_on(
        &f,
        &members(&["/dev/sda1", "/dev/sdb", "/dev/sda3"]),
        Some(&shape),
    );
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].kind, DomainKind::SameDisk);
    assert_eq!(got[0].severity, Severity::Warning);
    assert_eq!(roles(&got[0]), [Some(0), Some(2)]);
    assert_eq!(got[0].shared, "/dev/sda");
    assert_eq!(
        got[0].message,
        "members 0 (/dev/sda1) and 2 (/dev/sda3) are partitions of /dev/sda: one disk failure takes both; that is more than a raid5 of 3 can lose: the array's data would be lost"
    );
    // A RAID6 survives the same layout, without redundancy.
    let r6 = ArrayShape::new(Level::Raid6, 4, None);
    let got = check_members_on(
        &f,
        &members(&["/dev/sda1", "/dev/sdb", "/dev/sda3"]),
        Some(&r6),
    );
    assert!(
        got[0]
            .message
            .ends_with("; the raid6 of 4 survives it with no redundancy left"),
        "{}",
        got[0].message
    );
}

#[test]
fn loop_devices_over_one_file_system_and_over_a_member_file() {
    let mut f = FakeSystem::new();
    let sdb = lone_disk(&mut f, "sdb", (8, 16), 4);
    fake::partition(&mut f, &sdb, "sdb2", (8, 18), 2);
    lone_disk(&mut f, "sdc", (8, 32), 5);
    f.set_fs_type((8, 18), "ext4");
    fake::file(&mut f, "/srv/a.img", (8, 18), 12);
    fake::file(&mut f, "/srv/b.img", (8, 18), 13);
    fake::loop_dev(&mut f, "loop0", (7, 0), "/srv/a.img");
    fake::loop_dev(&mut f, "loop1", (7, 1), "/srv/b.img");
    let got = check_members_on(
        &f,
        &members(&["/dev/loop0", "/dev/loop1", "/dev/sdc"]),
        None,
    );
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].kind, DomainKind::SameDisk);
    assert_eq!(roles(&got[0]), [Some(0), Some(1)]);
    assert_eq!(
        got[0].message,
        "members 0 (/dev/loop0) and 1 (/dev/loop1) are files on one ext4 file system on /dev/sdb: one disk failure takes both"
    );
    // A loop device over a file that is itself a member: the same data twice.
    let got = check_members_on(
        &f,
        &members(&["/srv/a.img", "/dev/sdc", "/dev/loop0"]),
        None,
    );
    let same = of_kind(&got, DomainKind::SameFile);
    assert_eq!(same.len(), 1, "{got:#?}");
    assert_eq!(same[0].severity, Severity::Critical);
    assert_eq!(roles(same[0]), [Some(0), Some(2)]);
    assert_eq!(got[0].kind, DomainKind::SameFile, "most severe first");
    // Reported once: not also as "one disk".
    assert!(of_kind(&got, DomainKind::SameDisk).is_empty(), "{got:#?}");
}

#[test]
fn device_mapper_volumes_on_one_disk() {
    let mut f = FakeSystem::new();
    let sdb = lone_disk(&mut f, "sdb", (8, 16), 4);
    fake::partition(&mut f, &sdb, "sdb1", (8, 17), 1);
    lone_disk(&mut f, "sdc", (8, 32), 5);
    let d0 = fake::stacked(&mut f, "dm-0", (253, 0), &["sdb1"]);
    let d1 = fake::stacked(&mut f, "dm-1", (253, 1), &["sdb1"]);
    f.file(format!("{d0}/dm/name"), "vg0-r0\n")
        .file(format!("{d1}/dm/name"), "vg0-r1\n");
    let shape = ArrayShape::new(Level::Raid1, 3, None);
    let got = check_members_on(
        &f,
        &members(&["/dev/dm-0", "/dev/dm-1", "/dev/sdc"]),
        Some(&shape),
    );
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(
        got[0].message,
        "members 0 (/dev/dm-0) and 1 (/dev/dm-1) are device-mapper volumes on /dev/sdb: one disk failure takes both; the raid1 of 3 survives it with no redundancy left"
    );
    let id = resolve(&f, &members(&["/dev/dm-0"])[0]);
    assert_eq!(id.disks.len(), 1);
    assert_eq!(id.disks[0].name, "sdb");
}

#[test]
fn nvme_namespaces_are_one_drive() {
    let mut f = FakeSystem::new();
    let ctrl = format!("{}/0000:3d:00.0/nvme/nvme0", pci("0000:00:1d.0"));
    fake::disk(&mut f, "nvme0n1", (259, 0), &format!("{ctrl}/nvme0n1"));
    fake::disk(&mut f, "nvme0n2", (259, 1), &format!("{ctrl}/nvme0n2"));
    let got = check_members_on(&f, &members(&["/dev/nvme0n1", "/dev/nvme0n2"]), None);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].kind, DomainKind::SameDisk);
    assert_eq!(
        got[0].message,
        "members 0 (/dev/nvme0n1) and 1 (/dev/nvme0n2) sit on one disk, /dev/nvme0n1: one disk failure takes both"
    );
}

#[test]
fn one_batch_by_model_firmware_and_adjacent_serials() {
    let mut f = FakeSystem::new();
    let a = lone_disk(&mut f, "sda", (8, 0), 4);
    let b = lone_disk(&mut f, "sdb", (8, 16), 5);
    let c = lone_disk(&mut f, "sdc", (8, 32), 6);
    let d = lone_disk(&mut f, "sdd", (8, 48), 7);
    // sda from udev's database, the others from the SCSI serial page.
    fake::udev(
        &mut f,
        (8, 0),
        &[
            ("ID_MODEL", "WDC_WD140EDFZ-11A0VA0"),
            ("ID_REVISION", "81.00A81"),
            ("ID_SERIAL_SHORT", "9RK1A0123456"),
        ],
    );
    fake::scsi_identity(
        &mut f,
        &b,
        "WDC WD140EDFZ-11A0VA0",
        "81.00A81",
        "9RK1A0123459",
    );
    // Same model, another batch; same batch serial but other firmware.
    fake::scsi_identity(
        &mut f,
        &c,
        "WDC WD140EDFZ-11A0VA0",
        "81.00A81",
        "7XH2B9876543",
    );
    fake::scsi_identity(
        &mut f,
        &d,
        "WDC WD140EDFZ-11A0VA0",
        "83.00A83",
        "9RK1A0123460",
    );
    let _ = a;
    let paths = ["/dev/sda", "/dev/sdb", "/dev/sdc", "/dev/sdd"];
    let r5 = ArrayShape::new(Level::Raid5, 4, None);
    let got = check_members_on(&f, &members(&paths), Some(&r5));
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].kind, DomainKind::SameBatch);
    assert_eq!(got[0].severity, Severity::Warning);
    assert_eq!(roles(&got[0]), [Some(0), Some(1)]);
    assert_eq!(
        got[0].message,
        "members 0 (/dev/sda) and 1 (/dev/sdb) are WDC WD140EDFZ-11A0VA0 firmware 81.00A81 with adjacent serial numbers (/dev/sda 9RK1A0123456, /dev/sdb 9RK1A0123459): drives of one batch tend to fail close together, and a rebuild stresses the survivors; that is more than a raid5 of 4 can lose: the array's data would be lost"
    );
    // A RAID6 survives two: a notice.
    let r6 = ArrayShape::new(Level::Raid6, 4, None);
    let got = check_members_on(&f, &members(&paths), Some(&r6));
    assert_eq!(got[0].severity, Severity::Notice);
}

#[test]
fn one_controller() {
    let mut f = FakeSystem::new();
    ahci(&mut f, &[("sda", (8, 0)), ("sdb", (8, 16))]);
    lone_disk(&mut f, "sdc", (8, 32), 5);
    lone_disk(&mut f, "sdd", (8, 48), 6);
    let r6 = ArrayShape::new(Level::Raid6, 4, None);
    let got = check_members_on(
        &f,
        &members(&["/dev/sda", "/dev/sdc", "/dev/sdb", "/dev/sdd"]),
        Some(&r6),
    );
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].kind, DomainKind::SameController);
    assert_eq!(got[0].severity, Severity::Notice);
    assert_eq!(roles(&got[0]), [Some(0), Some(2)]);
    assert_eq!(
        got[0].message,
        "members 0 (/dev/sda) and 2 (/dev/sdb) hang off one SATA controller 0000:00:1f.2 (ahci): if it fails it takes both offline; the raid6 of 4 survives it with no redundancy left"
    );
    // RAID10 n2: 0 and 1 are a mirror pair; losing their controller stops the array.
    let n2 = ArrayShape::new(Level::Raid10, 4, None);
    let got = check_members_on(
        &f,
        &members(&["/dev/sda", "/dev/sdb", "/dev/sdc", "/dev/sdd"]),
        Some(&n2),
    );
    assert!(
        got[0].message.ends_with(
            "; that is more than a raid10 of 4 can lose: the array stops until it is back"
        ),
        "{}",
        got[0].message
    );
}

#[test]
fn files_on_tmpfs_and_exports_of_one_server() {
    let mut f = FakeSystem::new();
    f.set_fs_type((0, 45), "tmpfs");
    fake::file(&mut f, "/dev/shm/a", (0, 45), 2);
    fake::file(&mut f, "/dev/shm/b", (0, 45), 3);
    let got = check_members_on(&f, &members(&["/dev/shm/a", "/dev/shm/b"]), None);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].kind, DomainKind::SameFilesystem);
    assert_eq!(
        got[0].message,
        "members 0 (/dev/shm/a) and 1 (/dev/shm/b) are files on one tmpfs file system (device 0:45) (in memory: a reboot loses them all): whatever fails under it takes both"
    );
    let got = check_members_on(
        &f,
        &members(&[
            "nbd://10.0.0.5:10809/a",
            "nbd://10.0.0.6/a",
            "nbd://10.0.0.5:10809/b",
        ]),
        None,
    );
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].kind, DomainKind::SameHost);
    assert_eq!(roles(&got[0]), [Some(0), Some(2)]);
}

#[test]
fn nothing_shared_nothing_reported() {
    let mut f = FakeSystem::new();
    lone_disk(&mut f, "sda", (8, 0), 4);
    lone_disk(&mut f, "sdb", (8, 16), 5);
    let got = check_members_on(&f, &members(&["/dev/sda", "/dev/sdb", "missing"]), None);
    assert!(got.is_empty(), "{got:#?}");
}

#[test]
fn the_same_real_file_twice_through_a_hard_link_and_a_symlink() {
    let d = raidkit_testkit::tempdir::TempDir::new("rk-disks").unwrap();
    let a = d.path().join("a.img");
    let b = d.path().join("b.img");
    std::fs::write(&a, b"x").unwrap();
    std::fs::write(&b, b"y").unwrap();
    let hard = d.path().join("hard.img");
    std::fs::hard_link(&a, &hard).unwrap();
    let sym = d.path().join("sym.img");
    std::os::unix::fs::symlink(&a, &sym).unwrap();
    let s = |p: &std::path::Path| p.display().to_string();
    for twin in [&hard, &sym] {
        let got = check_members(&members(&[&s(&a), &s(&b), &s(twin)]), None);
        let same = of_kind(&got, DomainKind::SameFile);
        assert_eq!(same.len(), 1, "{got:#?}");
        assert_eq!(roles(same[0]), [Some(0), Some(2)]);
        assert!(
            same[0].message.contains("are the same data"),
            "{}",
            same[0].message
        );
        // Two different files in one folder share its file system (whatever it is here).
        assert!(
            got.iter().any(
                |g| matches!(g.kind, DomainKind::SameDisk | DomainKind::SameFilesystem)
                    && g.members.iter().any(|m| m.role == Some(1))
            ),
            "{got:#?}"
        );
    }
    let got = check_members(&members(&[&s(&a), &s(&b)]), None);
    assert!(of_kind(&got, DomainKind::SameFile).is_empty(), "{got:#?}");
    // Before `create --size` makes them, new files count where they will be.
    let new = s(&d.path().join("new.img"));
    let got = check_members(&members(&[&s(&a), &new]), None);
    assert!(got.is_empty(), "{got:#?}");
    let got = check_new_members_on(&HostSystem, &members(&[&s(&a), &new]), None);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(matches!(
        got[0].kind,
        DomainKind::SameDisk | DomainKind::SameFilesystem
    ));
}

#[test]
fn sata_and_pcie_links_from_sysfs() {
    let mut f = FakeSystem::new();
    let paths = ahci(&mut f, &[("sda", (8, 0)), ("sdb", (8, 16))]);
    for (i, spd) in ["6.0 Gb/s", "1.5 Gb/s"].iter().enumerate() {
        let n = i + 1;
        let dir = format!("{}/ata{n}/link{n}/ata_link/link{n}", pci("0000:00:1f.2"));
        f.file(format!("{dir}/sata_spd"), format!("{spd}\n"))
            .file(format!("{dir}/hw_sata_spd_limit"), "6.0 Gb/s\n")
            .link(format!("/sys/class/ata_link/link{n}"), dir.clone());
    }
    let _ = paths;
    fn disk(f: &FakeSystem, name: &str) -> raidkit_tools::disks::Disk {
        resolve(f, &members(&[name])[0]).disks[0].clone()
    }
    let fast = link_of_disk(&f, &disk(&f, "/dev/sda")).unwrap();
    assert_eq!(
        (fast.kind, fast.current_bytes_per_sec),
        (LinkKind::Sata, 600e6)
    );
    assert!(!fast.degraded());
    let slow = link_of_disk(&f, &disk(&f, "/dev/sdb")).unwrap();
    assert!(slow.degraded());
    assert_eq!(
        slow.describe(),
        "SATA link at 1.5 Gb/s (150 MB/s; it can do 6.0 Gb/s)"
    );
    // An NVMe drive in an x1 slot.
    let fn_dir = format!("{}/0000:3d:00.0", pci("0000:00:1d.0"));
    fake::disk(
        &mut f,
        "nvme0n1",
        (259, 0),
        &format!("{fn_dir}/nvme/nvme0/nvme0n1"),
    );
    f.file(format!("{fn_dir}/current_link_speed"), "8.0 GT/s PCIe\n")
        .file(format!("{fn_dir}/current_link_width"), "1\n")
        .file(format!("{fn_dir}/max_link_speed"), "8.0 GT/s PCIe\n")
        .file(format!("{fn_dir}/max_link_width"), "4\n");
    let l = link_of_disk(&f, &disk(&f, "/dev/nvme0n1")).unwrap();
    assert_eq!(l.kind, LinkKind::Pcie);
    assert!(l.degraded());
    assert_eq!(
        l.describe(),
        "PCIe link at 8.0 GT/s x1 (985 MB/s; it can do 8.0 GT/s x4)"
    );
    // No stat for a member that is not there: nothing resolved, nothing shared.
    f.set_stat(
        "/dev/odd",
        FileStat {
            kind: FileKind::Other,
            dev: (0, 5),
            ino: 1,
            rdev: (0, 0),
        },
    );
    assert!(resolve(&f, &members(&["/dev/odd"])[0]).disks.is_empty());
}
