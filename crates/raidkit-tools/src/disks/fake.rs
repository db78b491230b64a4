//! Builders of fake sysfs trees for tests: disks, partitions, device-mapper volumes, loop
//! devices and files, laid out as the kernel lays them out (`/sys/dev/block/MAJ:MIN` and
//! `/sys/class/block/NAME` are symlinks into `/sys/devices/...`; a partition is a folder of
//! its disk with a `partition` file; a dm or md device lists its `slaves`; a loop device has
//! `loop/backing_file`), plus udev database entries (`/run/udev/data/bMAJ:MIN`).

use super::sys::{FakeSystem, FileKind, FileStat};

/// Where a fake PCI function's folder is: `/sys/devices/pci0000:00/<addr>`.
pub fn pci(addr: &str) -> String {
    format!("/sys/devices/pci0000:00/{addr}")
}

fn node(f: &mut FakeSystem, name: &str, devpath: &str, dev: (u32, u32)) {
    let rel = devpath.trim_start_matches("/sys/");
    f.file(format!("{devpath}/dev"), format!("{}:{}\n", dev.0, dev.1))
        .link(
            format!("/sys/dev/block/{}:{}", dev.0, dev.1),
            format!("../../{rel}"),
        )
        .link(format!("/sys/class/block/{name}"), format!("../../{rel}"))
        .file(format!("/dev/{name}"), "")
        .set_stat(
            format!("/dev/{name}"),
            FileStat {
                kind: FileKind::Block,
                dev: (0, 6),
                ino: 1000 + u64::from(dev.0) * 256 + u64::from(dev.1),
                rdev: dev,
            },
        );
}

/// A whole disk `name` at sysfs folder `devpath` (its `block/NAME` folder); returns
/// `devpath`.
pub fn disk(f: &mut FakeSystem, name: &str, dev: (u32, u32), devpath: &str) -> String {
    node(f, name, devpath, dev);
    let rel = devpath.trim_start_matches("/sys/");
    f.link(format!("/sys/block/{name}"), format!("../{rel}"));
    devpath.to_string()
}

/// Partition `n` of the disk at `disk_devpath`.
pub fn partition(f: &mut FakeSystem, disk_devpath: &str, name: &str, dev: (u32, u32), n: u32) {
    let p = format!("{disk_devpath}/{name}");
    node(f, name, &p, dev);
    f.file(format!("{p}/partition"), format!("{n}\n"));
}

/// Model, firmware revision and serial as SCSI/ATA disks show them (`device/model`,
/// `device/rev`, `device/vpd_pg80`: the unit serial number page, 4 header bytes then ASCII).
pub fn scsi_identity(f: &mut FakeSystem, devpath: &str, model: &str, rev: &str, serial: &str) {
    let mut pg80 = vec![0u8, 0x80, 0, serial.len() as u8];
    pg80.extend_from_slice(serial.as_bytes());
    f.file(format!("{devpath}/device/model"), format!("{model:<16}\n"))
        .file(format!("{devpath}/device/rev"), format!("{rev}\n"))
        .file(format!("{devpath}/device/vpd_pg80"), pg80);
}

/// A udev database entry for block device `dev` with these `E:` properties.
pub fn udev(f: &mut FakeSystem, dev: (u32, u32), props: &[(&str, &str)]) {
    let mut s = String::from("S:disk/by-id/fake\nI:123\n");
    for (k, v) in props {
        s += &format!("E:{k}={v}\n");
    }
    f.file(format!("/run/udev/data/b{}:{}", dev.0, dev.1), s);
}

/// A virtual block device with `slaves` (device-mapper `dm-N` or md `mdN`).
pub fn stacked(f: &mut FakeSystem, name: &str, dev: (u32, u32), slaves: &[&str]) -> String {
    let devpath = format!("/sys/devices/virtual/block/{name}");
    disk(f, name, dev, &devpath);
    for s in slaves {
        f.link(
            format!("{devpath}/slaves/{s}"),
            format!("/sys/class/block/{s}"),
        );
    }
    devpath
}

/// A loop device over `backing` (a file [`file`] made).
pub fn loop_dev(f: &mut FakeSystem, name: &str, dev: (u32, u32), backing: &str) -> String {
    let devpath = format!("/sys/devices/virtual/block/{name}");
    disk(f, name, dev, &devpath);
    f.file(
        format!("{devpath}/loop/backing_file"),
        format!("{backing}\n"),
    );
    devpath
}

/// A regular file on the file system of device `fs_dev`.
pub fn file(f: &mut FakeSystem, path: &str, fs_dev: (u32, u32), ino: u64) {
    f.file(path, "").set_stat(
        path,
        FileStat {
            kind: FileKind::Regular,
            dev: fs_dev,
            ino,
            rdev: (0, 0),
        },
    );
}
