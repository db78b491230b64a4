//! Direction kernel → raidkit: every committed kernel-made fixture
//! (`tests/fixtures/kernel/*`, made by `tests/interop/make-fixtures.sh` with mdadm 4.2 on
//! Linux 6.1) must be read by `raidkit` exactly as the kernel wrote it.
//!
//! * `examine --json` agrees with the manifest (uuid, level, layout, chunk, raid_disks,
//!   roles, checksums, array size);
//! * `export` of the complete array, with members in creation and in shuffled order,
//!   is exactly the tagged pattern of the fixture's seed;
//! * `export` with members removed down to the minimum the level tolerates still gives
//!   the pattern; for linear and RAID0 it fails and names the missing role;
//! * no command ever modifies a member image.
//!
//! No VM is needed; only `xz`/`zstd` for decompression.

use raidkit_testkit::fixtures::{self, Fixture};
use raidkit_testkit::pattern::{self, Kind};
use raidkit_testkit::tempdir::TempDir;
use raidkit_testkit::{fnv1a64, hash_file};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn raidkit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_raidkit"))
}

fn all_fixtures() -> Vec<Fixture> {
    let list = fixtures::list().expect("reading tests/fixtures/kernel");
    assert!(
        list.len() >= 40,
        "expected the committed kernel fixtures, found {}",
        list.len()
    );
    list
}

/// Decompressed member images of one fixture, in manifest order, in their own temp dir.
struct Unpacked {
    dir: TempDir,
    paths: Vec<PathBuf>,
    hashes: Vec<u64>,
}

fn unpack(f: &Fixture) -> Unpacked {
    let dir = TempDir::new(&format!("rk-fixture-{}", f.name())).unwrap();
    let paths = f
        .decompress(dir.path())
        .unwrap_or_else(|e| panic!("{}: decompress: {e}", f.name()));
    let hashes = paths.iter().map(|p| hash_file(p).unwrap()).collect();
    Unpacked { dir, paths, hashes }
}

impl Unpacked {
    /// Error text if any member image changed since unpacking.
    fn changed(&self) -> Option<String> {
        let changed: Vec<String> = self
            .paths
            .iter()
            .zip(&self.hashes)
            .filter(|(p, h)| hash_file(p).unwrap() != **h)
            .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        (!changed.is_empty()).then(|| format!("member images modified: {changed:?}"))
    }
}

/// Deterministic Fisher–Yates shuffle driven by splitmix64 of `seed`.
fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
    let mut v = items.to_vec();
    for i in (1..v.len()).rev() {
        let j = (pattern::pattern_word(seed, i as u64) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// Rotate by one if the shuffle happened to keep the original order.
fn shuffled_paths(paths: &[PathBuf], seed: u64) -> Vec<PathBuf> {
    let mut v = shuffled(paths, seed);
    if v.len() > 1 && v == paths {
        v.rotate_left(1);
    }
    v
}

fn run_export(members: &[PathBuf]) -> Output {
    raidkit()
        .arg("export")
        .arg("--output")
        .arg("-")
        .args(members)
        .output()
        .expect("running raidkit export")
}

fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

/// `Ok(())` if `raidkit export` of `members` (to stdout) equals the fixture's pattern.
fn check_export(f: &Fixture, members: &[PathBuf]) -> Result<(), String> {
    let out = run_export(members);
    if !out.status.success() {
        return Err(format!(
            "export failed ({}): {}",
            out.status,
            stderr_of(&out)
        ));
    }
    check_data(f, &out.stdout)
}

/// `Ok(())` if `raidkit export --output FILE` of `members` writes the fixture's pattern.
fn check_export_to_file(f: &Fixture, members: &[PathBuf], file: &Path) -> Result<(), String> {
    let out = raidkit()
        .arg("export")
        .arg("--output")
        .arg(file)
        .args(members)
        .output()
        .expect("running raidkit export");
    if !out.status.success() {
        return Err(format!(
            "export --output FILE failed ({}): {}",
            out.status,
            stderr_of(&out)
        ));
    }
    let data = std::fs::read(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    std::fs::remove_file(file).map_err(|e| e.to_string())?;
    check_data(f, &data)
}

fn check_data(f: &Fixture, data: &[u8]) -> Result<(), String> {
    let m = &f.manifest;
    if data.len() as u64 != m.array_bytes {
        return Err(format!(
            "export gave {} bytes, array has {}",
            data.len(),
            m.array_bytes
        ));
    }
    match pattern::compare(Kind::Tagged, m.seed, 0, data) {
        None => Ok(()),
        Some(mm) => Err(format!(
            "export differs from the pattern: first at byte {}, {} sectors",
            mm.first_offset, mm.sectors
        )),
    }
}

/// `Ok(())` if `raidkit detail --json` of `members` reports the fixture's array with
/// exactly the roles `missing` absent (state "clean" when none is missing, else
/// "degraded" or mdadm's "clean, degraded").
fn check_detail(
    f: &Fixture,
    all: &[PathBuf],
    members: &[PathBuf],
    missing: &[u32],
) -> Result<(), String> {
    let m = &f.manifest;
    let out = raidkit()
        .args(["detail", "--json"])
        .args(members)
        .output()
        .expect("running raidkit detail");
    if !out.status.success() {
        return Err(format!(
            "detail failed ({}): {}",
            out.status,
            stderr_of(&out)
        ));
    }
    let d: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("detail --json: {e}"))?;
    let mut errs = Vec::new();
    let state = d["state"].as_str().unwrap_or("");
    let state_ok = if missing.is_empty() {
        state == "clean"
    } else {
        state == "degraded" || state == "clean, degraded"
    };
    if !state_ok {
        errs.push(format!("state {:?}", d["state"]));
    }
    for (key, want) in [
        ("array_bytes", Value::from(m.array_bytes)),
        ("level", Value::from(m.level.clone())),
        ("uuid", Value::from(m.uuid.clone())),
        ("missing_roles", Value::from(missing.to_vec())),
    ] {
        if d[key] != want {
            errs.push(format!("{key} = {}, expected {want}", d[key]));
        }
    }
    let listed = d["members"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if listed.len() != members.len() {
        errs.push(format!(
            "{} members listed, {} given",
            listed.len(),
            members.len()
        ));
    }
    for item in listed {
        let dev = item["device"].as_str().unwrap_or("");
        match all.iter().position(|p| Path::new(dev) == p) {
            Some(i) if item["role"] == m.members[i].role => {}
            Some(i) => errs.push(format!(
                "member {i}: role {}, expected {}",
                item["role"], m.members[i].role
            )),
            None => errs.push(format!("unknown device {dev:?} in members")),
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!("detail --json: {}", errs.join("; ")))
    }
}

/// Does `text` name `role` after the word "role" (e.g. "role 2", "role: 2", "roles [1, 2]")?
fn names_role(text: &str, role: u32) -> bool {
    let lower = text.to_lowercase();
    lower.match_indices("role").any(|(i, _)| {
        let tail: String = lower[i + 4..].chars().take(24).collect();
        tail.split(|c: char| !c.is_ascii_digit())
            .any(|tok| tok == role.to_string())
    })
}

fn level_of(f: &Fixture) -> &str {
    &f.manifest.level
}

/// Member indices (manifest order) ordered by role.
fn by_role(f: &Fixture) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..f.manifest.members.len()).collect();
    idx.sort_by_key(|&i| f.manifest.members[i].role);
    idx
}

/// RAID10 copies per chunk from the mdadm layout name (`n2`, `f3`, `o2`, ...).
fn raid10_copies(f: &Fixture) -> usize {
    let layout = f
        .manifest
        .layout
        .as_deref()
        .expect("raid10 fixture has a layout");
    layout[1..].parse().expect("raid10 layout like n2")
}

/// Sets of roles that may be missing while a degraded export must still succeed.
fn tolerable_removals(f: &Fixture) -> Vec<Vec<u32>> {
    let n = f.manifest.raid_disks;
    match level_of(f) {
        // Every survivor on its own.
        "raid1" => (0..n)
            .map(|keep| (0..n).filter(|&r| r != keep).collect())
            .collect(),
        "raid4" | "raid5" => (0..n).map(|r| vec![r]).collect(),
        "raid6" => {
            let mut pairs = Vec::new();
            for a in 0..n {
                for b in a + 1..n {
                    pairs.push(vec![a, b]);
                }
            }
            if n <= 5 {
                pairs
            } else {
                // A sample: both parity-heavy ends, neighbours, far apart, a spread.
                let mut s = vec![
                    vec![0, 1],
                    vec![n - 2, n - 1],
                    vec![0, n - 1],
                    vec![1, n / 2],
                    vec![2, n - 3],
                ];
                s.dedup();
                s
            }
        }
        "raid10" => {
            // Copies of a chunk lie on `c` cyclically consecutive roles (near, far and
            // offset layouts alike). A removal set is safe if every window of `c`
            // consecutive roles keeps a survivor; take the largest such sets.
            let c = raid10_copies(f) as u32;
            let mut best: Vec<Vec<u32>> = Vec::new();
            for mask in 1u32..(1 << n) {
                let ok = (0..n).all(|start| (0..c).any(|k| mask & (1 << ((start + k) % n)) == 0));
                if !ok {
                    continue;
                }
                let set: Vec<u32> = (0..n).filter(|r| mask & (1 << r) != 0).collect();
                match best.first().map(|b| b.len()) {
                    Some(len) if set.len() < len => {}
                    Some(len) if set.len() == len => best.push(set),
                    _ => best = vec![set],
                }
            }
            best.truncate(6);
            best
        }
        _ => Vec::new(),
    }
}

#[test]
fn fixtures_are_self_consistent() {
    // Independent of raidkit: the committed fixtures are what the manifests say.
    for f in all_fixtures() {
        let m = &f.manifest;
        let u = unpack(&f);
        assert_eq!(m.members.len() as u32, m.raid_disks, "{}", f.name());
        let mut roles: Vec<u32> = m.members.iter().map(|x| x.role).collect();
        roles.sort_unstable();
        assert_eq!(roles, (0..m.raid_disks).collect::<Vec<_>>(), "{}", f.name());
        assert_eq!(m.pattern, "tagged");
        for (i, mem) in m.members.iter().enumerate() {
            let ex = f.read_text(&mem.examine).unwrap();
            assert!(
                ex.lines().any(|l| l.trim_start().starts_with("Checksum : ") && l.ends_with(" - correct")),
                "{} member {i}: examine shows no correct checksum",
                f.name()
            );
            assert!(ex.contains(&m.uuid), "{} member {i}: uuid", f.name());
        }
        if m.level == "raid1" {
            // Every mirror holds the whole array at its data offset.
            for (i, p) in u.paths.iter().enumerate() {
                let ex = f.read_text(&m.members[i].examine).unwrap();
                let off = ex
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("Data Offset : "))
                    .map(|s| s.split_whitespace().next().unwrap().parse::<u64>().unwrap() * 512)
                    .unwrap_or(0);
                let data = std::fs::read(p).unwrap();
                let region = &data[off as usize..(off + m.array_bytes) as usize];
                assert_eq!(
                    pattern::compare(Kind::Tagged, m.seed, 0, region),
                    None,
                    "{} member {i}",
                    f.name()
                );
            }
        }
    }
}

#[test]
fn examine_matches_manifest_and_full_export_is_the_pattern() {
    let mut failures = Vec::new();
    for f in all_fixtures() {
        let m = &f.manifest;
        let u = unpack(&f);
        let mut fail = |what: String| failures.push(format!("{}: {what}", f.name()));

        // examine --json
        let out = raidkit()
            .args(["examine", "--json"])
            .args(&u.paths)
            .output()
            .expect("running raidkit examine");
        if !out.status.success() {
            fail(format!(
                "examine failed ({}): {}",
                out.status,
                stderr_of(&out)
            ));
        } else {
            match serde_json::from_slice::<Value>(&out.stdout) {
                Err(e) => fail(format!("examine --json is not JSON: {e}")),
                Ok(Value::Array(items)) => {
                    if items.len() != u.paths.len() {
                        fail(format!(
                            "examine --json: {} objects for {} members",
                            items.len(),
                            u.paths.len()
                        ));
                    }
                    for (i, item) in items.iter().enumerate() {
                        for e in examine_mismatches(&f, &u.paths, i, item) {
                            fail(e);
                        }
                    }
                }
                Ok(other) => fail(format!("examine --json: not an array: {other}")),
            }
        }

        if let Err(e) = check_detail(&f, &u.paths, &u.paths, &[]) {
            fail(e);
        }

        // export, creation order and shuffled order
        if let Err(e) = check_export(&f, &u.paths) {
            fail(format!("complete, creation order: {e}"));
        }
        let sh = shuffled_paths(&u.paths, m.seed);
        let file = u.dir.path().join("export.out");
        if let Err(e) = check_export_to_file(&f, &sh, &file) {
            fail(format!("complete, shuffled order: {e}"));
        }
        if let Some(e) = u.changed() {
            fail(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Differences between one `examine --json` object and the manifest.
fn examine_mismatches(f: &Fixture, paths: &[PathBuf], i: usize, item: &Value) -> Vec<String> {
    let m = &f.manifest;
    let mut errs = Vec::new();
    let dev = item["device"].as_str().unwrap_or("");
    let Some(idx) = paths.iter().position(|p| Path::new(dev) == p) else {
        return vec![format!(
            "examine object {i}: device {dev:?} is not one of the members"
        )];
    };
    let who = format!("member {idx}");
    let mut eq = |key: &str, want: Value| {
        if item[key] != want {
            errs.push(format!("{who}: {key} = {}, expected {want}", item[key]));
        }
    };
    eq("metadata", Value::from(m.metadata.clone()));
    eq("uuid", Value::from(m.uuid.clone()));
    eq("level", Value::from(m.level.clone()));
    eq("raid_disks", Value::from(m.raid_disks));
    eq("role", Value::from(m.members[idx].role));
    eq("checksum_ok", Value::from(true));
    eq("array_bytes", Value::from(m.array_bytes));
    if let Some(c) = m.chunk_kib {
        eq("chunk_bytes", Value::from(c * 1024));
    }
    if m.metadata != "0.90" {
        if let Some(name) = &m.name {
            eq("name", Value::from(name.clone()));
        }
    }
    // Layout: mdadm's name as given to --create or as mdadm prints it ("n2"/"near=2").
    if m.layout.is_some() || m.layout_display.is_some() {
        let got = item["layout"].as_str();
        let ok =
            got.is_some() && (got == m.layout.as_deref() || got == m.layout_display.as_deref());
        if !ok {
            errs.push(format!(
                "{who}: layout = {}, expected {:?} or {:?}",
                item["layout"], m.layout, m.layout_display
            ));
        }
    }
    for key in ["events", "data_offset", "data_size", "super_offset"] {
        if !item[key].is_u64() {
            errs.push(format!(
                "{who}: {key} missing or not an integer: {}",
                item[key]
            ));
        }
    }
    // Cross-check offsets with mdadm --examine where it prints them.
    let ex = f.read_text(&m.members[idx].examine).unwrap_or_default();
    for (label, key) in [
        ("Data Offset", "data_offset"),
        ("Super Offset", "super_offset"),
    ] {
        if let Some(v) = ex
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{label} : ")))
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        {
            if item[key] != v {
                errs.push(format!("{who}: {key} = {}, mdadm says {v}", item[key]));
            }
        }
    }
    errs
}

#[test]
fn degraded_exports_are_the_pattern_or_name_the_missing_role() {
    let mut failures = Vec::new();
    let mut runs = 0;
    for f in all_fixtures() {
        let m = &f.manifest;
        let u = unpack(&f);
        let order = by_role(&f);
        let mut fail = |what: String| failures.push(format!("{}: {what}", f.name()));
        match m.level.as_str() {
            "linear" | "raid0" => {
                for missing in 0..m.raid_disks {
                    let keep: Vec<PathBuf> = (0..m.raid_disks)
                        .filter(|&r| r != missing)
                        .map(|r| u.paths[order[r as usize]].clone())
                        .collect();
                    let keep = shuffled_paths(&keep, m.seed ^ u64::from(missing));
                    let out = run_export(&keep);
                    runs += 1;
                    let err = stderr_of(&out);
                    if out.status.success() {
                        fail(format!("export without role {missing} succeeded"));
                    } else if !names_role(&err, missing) {
                        fail(format!("export without role {missing}: message does not name the role: {err:?}"));
                    }
                }
            }
            _ => {
                let sets = tolerable_removals(&f);
                if sets.is_empty() {
                    fail("no removal sets computed".into());
                }
                for set in sets {
                    let keep: Vec<PathBuf> = (0..m.raid_disks)
                        .filter(|r| !set.contains(r))
                        .map(|r| u.paths[order[r as usize]].clone())
                        .collect();
                    let seed = m.seed ^ fnv1a64(format!("{set:?}").as_bytes());
                    let keep = shuffled_paths(&keep, seed);
                    runs += 1;
                    if let Err(e) = check_export(&f, &keep) {
                        fail(format!("without roles {set:?}: {e}"));
                    }
                    if let Err(e) = check_detail(&f, &u.paths, &keep, &set) {
                        fail(format!("without roles {set:?}: {e}"));
                    }
                }
            }
        }
        if let Some(e) = u.changed() {
            fail(e);
        }
    }
    println!("{runs} degraded exports");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn fake_fixture(level: &str, layout: Option<&str>, n: u32) -> Fixture {
    let members: Vec<Value> = (0..n)
        .map(|r| serde_json::json!({"file": "x", "image_bytes": 0, "role": r, "examine": "x"}))
        .collect();
    let j = serde_json::json!({
        "fixture": "fake", "level": level, "layout": layout, "layout_display": null,
        "chunk_kib": 64, "metadata": "1.2", "raid_disks": n, "bitmap": "none",
        "uuid": "0:0:0:0", "name": null, "seed": 1, "pattern": "tagged", "array_bytes": 0,
        "members": members, "detail": "x"
    });
    Fixture {
        dir: PathBuf::new(),
        manifest: serde_json::from_value(j).unwrap(),
    }
}

#[test]
fn removal_sets() {
    let sets = |l, lay, n| tolerable_removals(&fake_fixture(l, lay, n));
    assert_eq!(sets("raid10", Some("n2"), 4), vec![vec![0, 2], vec![1, 3]]);
    assert_eq!(
        sets("raid10", Some("n2"), 3),
        vec![vec![0], vec![1], vec![2]]
    );
    assert_eq!(
        sets("raid10", Some("o2"), 5).iter().map(Vec::len).max(),
        Some(2)
    );
    assert!(!sets("raid10", Some("o2"), 5).contains(&vec![0, 1]));
    assert_eq!(sets("raid10", Some("f3"), 4).len(), 6);
    assert_eq!(
        sets("raid10", Some("n3"), 3),
        vec![vec![0, 1], vec![0, 2], vec![1, 2]]
    );
    assert_eq!(
        sets("raid1", None, 3),
        vec![vec![1, 2], vec![0, 2], vec![0, 1]]
    );
    assert_eq!(
        sets("raid5", Some("left-symmetric"), 3),
        vec![vec![0], vec![1], vec![2]]
    );
    assert_eq!(sets("raid6", Some("left-symmetric"), 4).len(), 6);
    assert_eq!(sets("raid6", Some("left-symmetric"), 8).len(), 5);
    assert!(sets("raid0", None, 3).is_empty());
}

#[test]
fn helpers_behave() {
    // The test's own helpers must be able to fail.
    assert!(names_role("error: member for role 2 is missing", 2));
    assert!(names_role("missing roles: [1, 3]", 3));
    assert!(!names_role("missing roles: [1, 3]", 2));
    assert!(!names_role("array has 2 missing members", 2));
    let p: Vec<PathBuf> = (0..4).map(|i| PathBuf::from(format!("{i}"))).collect();
    let s = shuffled_paths(&p, 1);
    assert_ne!(s, p);
    let mut sorted = s.clone();
    sorted.sort();
    assert_eq!(sorted, p);
}
