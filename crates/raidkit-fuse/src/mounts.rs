//! Which raidkit mount, if any, is already on a directory: read from the kernel's
//! `/proc/self/mountinfo`, so a second `mount` on the same directory is refused instead of
//! hiding the first (a stacked mount makes the first array's file unreachable while its
//! server keeps running).

use std::ffi::CStr;
use std::path::Path;

/// The file-system type raidkit's mounts carry (`fuse.` + the subtype raidkit gives).
pub(crate) const FS_TYPE: &CStr = c"fuse.raidkit";

/// The source (`raidkit:UUID`) of the topmost raidkit mount on `dir` in a mountinfo text,
/// if the topmost mount there is raidkit's. `dir` must be canonical: mountinfo lists
/// canonical paths.
pub(crate) fn raidkit_mount_on(mountinfo: &str, dir: &Path) -> Option<String> {
    let want = dir.as_os_str().as_encoded_bytes();
    // Later lines are mounted later (on top): the last mount at `dir` is the visible one.
    let top = mountinfo
        .lines()
        .rev()
        .filter_map(parse_line)
        .find(|m| m.mount_point == want)?;
    (top.fs_type.as_bytes() == FS_TYPE.to_bytes()).then_some(top.source)
}

/// What one mountinfo line says, for this question.
struct Mount {
    mount_point: Vec<u8>,
    fs_type: String,
    source: String,
}

/// `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FS_TYPE SOURCE SUPER_OPTIONS`;
/// `None` for a line not in that form.
fn parse_line(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let mount_point = unescape(before.split(' ').nth(4)?);
    let mut rest = after.split(' ');
    let fs_type = String::from_utf8_lossy(&unescape(rest.next()?)).into_owned();
    let source = String::from_utf8_lossy(&unescape(rest.next()?)).into_owned();
    Some(Mount {
        mount_point,
        fs_type,
        source,
    })
}

/// The kernel writes a space, tab, newline and backslash in a path as `\` and three octal
/// digits; anything else is as it is.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| {
            d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3' && b[i] == b'\\'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
40 22 0:40 / /mnt/a rw,nosuid,nodev shared:5 - fuse.raidkit raidkit:1111 rw,user_id=0
41 22 0:41 / /mnt/with\\040space rw - fuse.raidkit raidkit:2222 rw
42 22 0:42 / /mnt/b rw - fuse.raidkit raidkit:3333 rw
43 22 0:43 / /mnt/b rw - tmpfs tmpfs rw
44 22 0:44 / /mnt/c rw - tmpfs tmpfs rw
45 22 0:45 / /mnt/c rw - fuse.raidkit raidkit:4444 rw
";

    fn on(p: &str) -> Option<String> {
        raidkit_mount_on(INFO, Path::new(p))
    }

    #[test]
    fn finds_the_raidkit_mount_on_a_directory() {
        assert_eq!(on("/mnt/a").as_deref(), Some("raidkit:1111"));
        assert_eq!(on("/mnt/with space").as_deref(), Some("raidkit:2222"));
    }

    #[test]
    fn only_the_topmost_mount_counts() {
        // A tmpfs mounted over a raidkit mount hides it; a raidkit mount over tmpfs shows.
        assert_eq!(on("/mnt/b"), None);
        assert_eq!(on("/mnt/c").as_deref(), Some("raidkit:4444"));
    }

    #[test]
    fn other_directories_and_other_types_are_not_raidkit_mounts() {
        assert_eq!(on("/proc"), None);
        assert_eq!(on("/mnt"), None);
        assert_eq!(on("/mnt/a/raidkit"), None);
        assert_eq!(
            raidkit_mount_on("garbage line\n\n", Path::new("/mnt/a")),
            None
        );
    }

    #[test]
    fn octal_escapes_and_plain_backslashes() {
        assert_eq!(unescape("a\\040b\\011c\\012d\\134e"), b"a b\tc\nd\\e");
        assert_eq!(unescape("a\\9b\\"), b"a\\9b\\");
        assert_eq!(unescape("\\777"), b"\\777");
    }
}
