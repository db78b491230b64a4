//! Direction raidkit → kernel: arrays created and filled by `raidkit` must be assembled
//! by the real Linux md driver (mdadm 4.2, Linux 6.1, run by mdref in a qemu VM), hold
//! exactly the data raidkit wrote, and be consistent (`check` → `mismatch_cnt=0`).
//!
//! For every configuration: `raidkit create` over sparse files in a temp dir,
//! `raidkit import` of the tagged pattern over the whole array, then one batched VM
//! (`--snapshot`, `rk-pattern` copied in) per ≤ 24 disks: for each array
//! `mdadm --examine` must report a correct checksum on every member and a clean state,
//! `mdadm --assemble --run` must start it without a resync, `rk-pattern -c --tagged`
//! must match the whole array and a `check` scrub must find no mismatch. The guest prints
//! one `RESULT` line per array; the test asserts each line exactly.
//!
//! Default: a broad sample (2–3 VM boots). `RAIDKIT_INTEROP=full`: the same breadth as
//! the kernel fixtures (every configuration of `tests/fixtures/kernel`).
//! Without mdref the test prints `skip: mdref not available (reason)` and passes.

use raidkit_testkit::fixtures;
use raidkit_testkit::mdref::{self, Mdref, Run};
use raidkit_testkit::pattern::fill_tagged;
use raidkit_testkit::tempdir::TempDir;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const MAX_DISKS: usize = 24;

fn raidkit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_raidkit"))
}

/// One array to create with raidkit and judge with the kernel.
#[derive(Debug, Clone)]
struct Config {
    name: String,
    /// Level as given to `raidkit create --level` (mdadm style: 0, 1, 4, 5, 6, 10, linear).
    level: String,
    layout: Option<String>,
    chunk_kib: Option<u64>,
    metadata: String,
    bitmap: &'static str,
    /// Member file sizes in MiB, one per slot.
    sizes_mib: Vec<u64>,
    /// Slot given as `missing` (degraded creation).
    missing: Option<usize>,
    /// Negative control: flip one byte of member 1's first data chunk after the import;
    /// the kernel must then read wrong data and count mismatches.
    corrupt: bool,
    /// Slot created `--write-mostly` (the kernel must list it write_mostly).
    write_mostly: Option<usize>,
    /// `--write-behind` (the kernel's bitmap must allow it).
    write_behind: u32,
}

impl Config {
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &str,
        level: &str,
        layout: Option<&str>,
        chunk_kib: Option<u64>,
        metadata: &str,
        bitmap: &'static str,
        sizes_mib: &[u64],
    ) -> Config {
        Config {
            name: name.to_string(),
            level: level.to_string(),
            layout: layout.map(str::to_string),
            chunk_kib,
            metadata: metadata.to_string(),
            bitmap,
            sizes_mib: sizes_mib.to_vec(),
            missing: None,
            corrupt: false,
            write_mostly: None,
            write_behind: 0,
        }
    }

    fn n(&self) -> usize {
        self.sizes_mib.len()
    }

    /// Level as the kernel reports it in sysfs `md/level`.
    fn kernel_level(&self) -> String {
        match self.level.as_str() {
            "linear" => "linear".into(),
            l => format!("raid{l}"),
        }
    }

    fn redundant(&self) -> bool {
        !matches!(self.level.as_str(), "0" | "linear")
    }

    fn seed(&self) -> u64 {
        raidkit_testkit::fnv1a64(self.name.as_bytes()) & 0xffff_ffff
    }

    fn uuid(&self) -> String {
        let h = raidkit_testkit::fnv1a64(self.name.as_bytes());
        format!(
            "1bad5eed:{:08x}:{:08x}:{:08x}",
            h >> 32,
            h & 0xffff_ffff,
            self.n()
        )
    }
}

fn uniform(n: usize, mib: u64) -> Vec<u64> {
    vec![mib; n]
}

/// The default CI sample.
fn sample_configs() -> Vec<Config> {
    let c = Config::new;
    let mut v = vec![
        // The README's newcomer path: RAID6 on four files, every default.
        c(
            "r6-newcomer",
            "6",
            None,
            None,
            "1.2",
            "none",
            &uniform(4, 16),
        ),
        c(
            "r5-ls-4d",
            "5",
            Some("left-symmetric"),
            Some(64),
            "1.2",
            "none",
            &uniform(4, 3),
        ),
        c(
            "r5-ra-3d",
            "5",
            Some("right-asymmetric"),
            Some(16),
            "1.2",
            "none",
            &uniform(3, 3),
        ),
        c(
            "r6-la-5d",
            "6",
            Some("left-asymmetric"),
            Some(64),
            "1.2",
            "none",
            &uniform(5, 3),
        ),
        c(
            "r6-ls6-5d",
            "6",
            Some("left-symmetric-6"),
            Some(32),
            "1.2",
            "none",
            &uniform(5, 3),
        ),
        c(
            "r6-ddfnc-4d",
            "6",
            Some("ddf-N-continue"),
            Some(8),
            "1.2",
            "none",
            &uniform(4, 3),
        ),
        c(
            "r10-n2-4d",
            "10",
            Some("n2"),
            Some(64),
            "1.2",
            "none",
            &uniform(4, 3),
        ),
        c(
            "r10-f2-3d",
            "10",
            Some("f2"),
            Some(16),
            "1.2",
            "none",
            &uniform(3, 3),
        ),
        c(
            "r10-o2-5d",
            "10",
            Some("o2"),
            Some(64),
            "1.2",
            "none",
            &uniform(5, 3),
        ),
        c(
            "r10-n3-3d",
            "10",
            Some("n3"),
            Some(128),
            "1.2",
            "none",
            &uniform(3, 3),
        ),
        Config {
            write_mostly: Some(2),
            write_behind: 64,
            ..c(
                "r1-3d-bitmap",
                "1",
                None,
                None,
                "1.2",
                "internal",
                &uniform(3, 3),
            )
        },
        c(
            "r0-zones",
            "0",
            Some("original"),
            Some(16),
            "1.2",
            "none",
            &[3, 4, 5, 5],
        ),
        c("linear-3d", "linear", None, None, "1.2", "none", &[3, 4, 5]),
        c(
            "r5-m090",
            "5",
            Some("left-symmetric"),
            Some(64),
            "0.90",
            "none",
            &uniform(3, 3),
        ),
        Config {
            write_mostly: Some(1),
            ..c("r1-m10", "1", None, None, "1.0", "none", &uniform(2, 3))
        },
        c(
            "r5-m11",
            "5",
            Some("left-symmetric"),
            Some(64),
            "1.1",
            "none",
            &uniform(3, 3),
        ),
    ];
    v.push(Config {
        missing: Some(2),
        ..c(
            "r5-degraded",
            "5",
            Some("left-symmetric"),
            Some(64),
            "1.2",
            "none",
            &uniform(4, 3),
        )
    });
    v.push(Config {
        corrupt: true,
        ..c(
            "r5-corrupt-control",
            "5",
            Some("left-symmetric"),
            Some(64),
            "1.2",
            "none",
            &uniform(4, 3),
        )
    });
    v
}

/// `RAIDKIT_INTEROP=full`: every fixture configuration, plus the sample.
fn full_configs() -> Vec<Config> {
    let mut v = sample_configs();
    for f in fixtures::list().expect("reading the fixture manifests") {
        let m = f.manifest;
        let level = match m.level.as_str() {
            "linear" => "linear".to_string(),
            l => l.trim_start_matches("raid").to_string(),
        };
        let sizes = m
            .members
            .iter()
            .map(|mem| mem.image_bytes.div_ceil(1 << 20))
            .collect::<Vec<_>>();
        let bitmap = if m.bitmap == "internal" {
            "internal"
        } else {
            "none"
        };
        v.push(Config::new(
            &format!("fx-{}", m.fixture),
            &level,
            m.layout.as_deref(),
            m.chunk_kib
                .filter(|_| !matches!(level.as_str(), "1" | "linear")),
            &m.metadata,
            bitmap,
            &sizes,
        ));
    }
    v
}

/// Member paths of a config (None = the `missing` slot).
fn member_paths(dir: &Path, cfg: &Config) -> Vec<Option<PathBuf>> {
    (0..cfg.n())
        .map(|i| (cfg.missing != Some(i)).then(|| dir.join(format!("{}-{i}.img", cfg.name))))
        .collect()
}

fn run_ok(cmd: &mut Command, what: &str) -> Result<Vec<u8>, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

/// Create and fill one array with raidkit; returns its size in bytes.
fn prepare(dir: &Path, cfg: &Config) -> Result<u64, String> {
    let members = member_paths(dir, cfg);
    let uniform_size = cfg.sizes_mib.iter().all(|&s| s == cfg.sizes_mib[0]);
    if !uniform_size {
        for (p, &mib) in members.iter().zip(&cfg.sizes_mib) {
            if let Some(p) = p {
                let f = std::fs::File::create(p).map_err(|e| e.to_string())?;
                f.set_len(mib << 20).map_err(|e| e.to_string())?;
            }
        }
    }
    let mut create = raidkit();
    create
        .arg("create")
        .args(["--level", &cfg.level])
        .args(["--raid-devices", &cfg.n().to_string()])
        .args(["--metadata", &cfg.metadata])
        .args(["--uuid", &cfg.uuid()]);
    if cfg.metadata.starts_with('1') {
        create.args(["--name", &cfg.name]);
    }
    if let Some(c) = cfg.chunk_kib {
        create.args(["--chunk", &format!("{c}K")]);
    }
    if let Some(l) = &cfg.layout {
        create.args(["--layout", l]);
    }
    if cfg.redundant() {
        create.args(["--bitmap", cfg.bitmap]);
    }
    if uniform_size {
        create.args(["--size", &format!("{}M", cfg.sizes_mib[0])]);
    }
    if let Some(Some(p)) = cfg.write_mostly.map(|s| &members[s]) {
        create.arg("--write-mostly").arg(p);
    }
    if cfg.write_behind > 0 {
        create.args(["--write-behind", &cfg.write_behind.to_string()]);
    }
    for m in &members {
        match m {
            Some(p) => create.arg(p),
            None => create.arg("missing"),
        };
    }
    run_ok(&mut create, "raidkit create")?;

    let present: Vec<&PathBuf> = members.iter().flatten().collect();
    let detail = run_ok(
        raidkit().args(["detail", "--json"]).args(&present),
        "raidkit detail",
    )?;
    let detail: Value =
        serde_json::from_slice(&detail).map_err(|e| format!("detail --json: {e}"))?;
    let bytes = detail["array_bytes"]
        .as_u64()
        .ok_or_else(|| format!("detail --json has no array_bytes: {detail}"))?;

    let input = dir.join(format!("{}.pattern", cfg.name));
    let mut data = vec![0u8; bytes as usize];
    fill_tagged(cfg.seed(), 0, &mut data);
    std::fs::write(&input, &data).map_err(|e| e.to_string())?;
    drop(data);
    run_ok(
        raidkit()
            .arg("import")
            .arg("--input")
            .arg(&input)
            .args(&present),
        "raidkit import",
    )?;
    std::fs::remove_file(&input).map_err(|e| e.to_string())?;
    if cfg.corrupt {
        corrupt_member_1(present[1])?;
    }

    let detail = run_ok(
        raidkit().args(["detail", "--json"]).args(&present),
        "raidkit detail",
    )?;
    let detail: Value =
        serde_json::from_slice(&detail).map_err(|e| format!("detail --json: {e}"))?;
    // mdadm style: "clean", or "clean, degraded" ("degraded" alone accepted too).
    let state = detail["state"].as_str().unwrap_or("");
    let ok = match cfg.missing {
        None => state == "clean",
        Some(_) => state == "degraded" || state == "clean, degraded",
    };
    if !ok {
        return Err(format!("after import: detail state {:?}", detail["state"]));
    }
    Ok(bytes)
}

/// Flip byte 1000 (in the zero part of a tagged sector) of the first data chunk of
/// `member`, located through `raidkit examine --json` (data_offset in sectors).
fn corrupt_member_1(member: &Path) -> Result<(), String> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let ex = run_ok(
        raidkit().args(["examine", "--json"]).arg(member),
        "raidkit examine",
    )?;
    let ex: Value = serde_json::from_slice(&ex).map_err(|e| format!("examine --json: {e}"))?;
    let off = ex[0]["data_offset"]
        .as_u64()
        .ok_or("examine --json: no data_offset")?
        * 512
        + 1000;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(member)
        .map_err(|e| e.to_string())?;
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(off)).map_err(|e| e.to_string())?;
    f.read_exact(&mut b).map_err(|e| e.to_string())?;
    b[0] ^= 0x5a;
    f.seek(SeekFrom::Start(off)).map_err(|e| e.to_string())?;
    f.write_all(&b).map_err(|e| e.to_string())
}

/// Guest helper: judge one array. Prints exactly one RESULT line.
const GUEST_FUNC: &str = r#"
judge() { # judge MD NAME SEED "DISKS"
	md=$1 name=$2 seed=$3 disks=$4
	ck=ok
	st=
	for d in $disks; do
		mdadm --examine "$d" >/tmp/ex 2>&1 || ck=BAD
		grep -Eq '^ *Checksum : [0-9a-f]+ - correct$' /tmp/ex || ck=BAD
		s=$(sed -n 's/^ *State : *//p' /tmp/ex | head -n1 | tr -d ' ')
		[ -z "$st" ] && st=$s
		[ "$s" = "$st" ] || st=mixed
	done
	if ! mdadm --assemble --run "/dev/$md" $disks >/tmp/as 2>&1; then
		echo "RESULT $name assemble=FAIL checksums=$ck state=$st"
		sed "s/^/  $name: /" /tmp/as
		return
	fi
	act=$(cat "/sys/block/$md/md/sync_action" 2>/dev/null || echo n/a)
	mdref-wait "$md"
	size=$(blockdev --getsize64 "/dev/$md")
	level=$(cat "/sys/block/$md/md/level")
	deg=$(cat "/sys/block/$md/md/degraded" 2>/dev/null || echo 0)
	echo 3 >/proc/sys/vm/drop_caches
	if ./rk-pattern -c --tagged "$seed" "$size" <"/dev/$md" >/tmp/pc 2>&1; then pat=ok; else pat=BAD; sed "s/^/  $name: /" /tmp/pc; fi
	mm=n/a
	if [ -e "/sys/block/$md/md/sync_action" ] && [ "$deg" = 0 ]; then
		echo check >"/sys/block/$md/md/sync_action"
		mdref-wait "$md"
		mm=$(cat "/sys/block/$md/md/mismatch_cnt")
	fi
	wm=$(for s in /sys/block/$md/md/dev-*; do grep -q write_mostly "$s/state" && cat "$s/slot"; done | sort -n | tr '\n' ',')
	wm=${wm%,}
	wb=$(mdadm -X ${disks%% *} 2>/dev/null | sed -n 's/.*Allow write behind, max \([0-9]*\).*/\1/p')
	echo "RESULT $name assemble=ok checksums=$ck state=$st initial_action=$act size=$size level=$level degraded=$deg pattern=$pat mismatch_cnt=$mm write_mostly=${wm:-none} write_behind=${wb:-0}"
	mdadm --stop "/dev/$md" >/dev/null 2>&1
}
"#;

/// The RESULT line the guest must print for a good array.
fn expected_line(cfg: &Config, bytes: u64) -> String {
    let degraded = u32::from(cfg.missing.is_some());
    if cfg.corrupt {
        // One flipped byte in one 4 KiB stripe page: wrong data, 8 sectors inconsistent.
        return format!(
            "RESULT {} assemble=ok checksums=ok state=clean initial_action=idle size={bytes} level={} degraded=0 pattern=BAD mismatch_cnt=8 write_mostly=none write_behind=0",
            cfg.name,
            cfg.kernel_level()
        );
    }
    let (action, mm) = if !cfg.redundant() {
        ("n/a", "n/a".to_string())
    } else if degraded > 0 {
        ("idle", "n/a".to_string())
    } else {
        ("idle", "0".to_string())
    };
    let wm = cfg
        .write_mostly
        .map_or_else(|| "none".to_string(), |s| s.to_string());
    format!(
        "RESULT {} assemble=ok checksums=ok state=clean initial_action={action} size={bytes} level={} degraded={degraded} pattern=ok mismatch_cnt={mm} write_mostly={wm} write_behind={}",
        cfg.name,
        cfg.kernel_level(),
        cfg.write_behind
    )
}

/// Path to a built `rk-pattern` (copied into the guest): `$RK_PATTERN`, next to this
/// test's target dir, or built now into a separate target dir.
fn rk_pattern() -> Result<PathBuf, String> {
    if let Some(p) = mdref::find_rk_pattern() {
        return Ok(p);
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let target = exe
        .ancestors()
        .nth(3)
        .ok_or("cannot locate the target directory")?
        .join("rk-pattern-build");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "raidkit-testkit",
            "--bin",
            "rk-pattern",
        ])
        .arg("--target-dir")
        .arg(&target)
        .current_dir(raidkit_testkit::repo_root())
        .status()
        .map_err(|e| format!("building rk-pattern: {e}"))?;
    if !status.success() {
        return Err(format!("building rk-pattern failed: {status}"));
    }
    Ok(target.join("release").join("rk-pattern"))
}

#[test]
fn kernel_assembles_and_verifies_raidkit_arrays() {
    let Some(md) = mdref::locate_or_skip() else {
        return;
    };
    let full = std::env::var("RAIDKIT_INTEROP").is_ok_and(|v| v == "full");
    let configs = if full {
        full_configs()
    } else {
        sample_configs()
    };
    let rkp = rk_pattern().expect("rk-pattern for the guest");
    let dir = TempDir::new("rk-interop-live").unwrap();

    // Host side: create and fill every array.
    let mut failures = Vec::new();
    let mut ready: Vec<(Config, u64)> = Vec::new();
    for cfg in configs {
        match prepare(dir.path(), &cfg) {
            Ok(bytes) => ready.push((cfg, bytes)),
            Err(e) => failures.push(format!("{}: {e}", cfg.name)),
        }
    }

    // Kernel side: batches of at most MAX_DISKS disks, one VM each.
    let mut batches: Vec<Vec<(Config, u64)>> = vec![Vec::new()];
    let mut disks_in_batch = 0;
    for item in ready {
        let n = item.0.n() - usize::from(item.0.missing.is_some());
        if disks_in_batch + n > MAX_DISKS {
            batches.push(Vec::new());
            disks_in_batch = 0;
        }
        disks_in_batch += n;
        batches.last_mut().unwrap().push(item);
    }
    for batch in batches.iter().filter(|b| !b.is_empty()) {
        failures.extend(judge_batch(&md, dir.path(), &rkp, batch));
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn judge_batch(md: &Mdref, dir: &Path, rkp: &Path, batch: &[(Config, u64)]) -> Vec<String> {
    let mut run = Run {
        snapshot: true,
        files: vec![rkp.to_path_buf()],
        timeout_secs: 900,
        date: Some("2024-01-01T00:00:00".into()),
        ..Run::default()
    };
    let mut script = GUEST_FUNC.to_string();
    for (i, (cfg, _)) in batch.iter().enumerate() {
        let mut devs = Vec::new();
        for p in member_paths(dir, cfg).into_iter().flatten() {
            devs.push(format!("/dev/vd{}", (b'a' + run.disks.len() as u8) as char));
            run.disks.push(p);
        }
        writeln!(
            script,
            "judge md{i} {} {} \"{}\"",
            cfg.name,
            cfg.seed(),
            devs.join(" ")
        )
        .unwrap();
    }
    run.script = script;
    let names: Vec<&str> = batch.iter().map(|(c, _)| c.name.as_str()).collect();
    let start = std::time::Instant::now();
    let out = match md.run(&run) {
        Ok(o) => o,
        Err(e) => return vec![format!("mdref-run for {names:?}: {e}")],
    };
    println!(
        "VM batch {names:?}: {} disks, exit {}, {:.1} s\n{}",
        run.disks.len(),
        out.status,
        start.elapsed().as_secs_f64(),
        out.stdout
    );
    let mut failures = Vec::new();
    if out.status != 0 {
        failures.push(format!(
            "mdref-run exit {} for {names:?}: {}",
            out.status,
            out.stderr.trim()
        ));
    }
    for (cfg, bytes) in batch {
        let want = expected_line(cfg, *bytes);
        let prefix = format!("RESULT {} ", cfg.name);
        let got: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .collect();
        match got[..] {
            [line] if line == want => {}
            [line] => failures.push(format!("{}:\n   got  {line}\n   want {want}", cfg.name)),
            _ => failures.push(format!("{}: {} RESULT lines (want 1)", cfg.name, got.len())),
        }
    }
    failures
}

#[test]
fn expected_lines_and_configs() {
    let cfgs = sample_configs();
    assert!(cfgs.len() >= 12);
    let mut names: Vec<&str> = cfgs.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cfgs.len(), "config names must be unique");
    let r0 = cfgs.iter().find(|c| c.name == "r0-zones").unwrap();
    assert_eq!(
        expected_line(r0, 100),
        "RESULT r0-zones assemble=ok checksums=ok state=clean initial_action=n/a size=100 level=raid0 degraded=0 pattern=ok mismatch_cnt=n/a write_mostly=none write_behind=0"
    );
    let deg = cfgs.iter().find(|c| c.missing.is_some()).unwrap();
    assert!(expected_line(deg, 1).ends_with(
        "level=raid5 degraded=1 pattern=ok mismatch_cnt=n/a write_mostly=none write_behind=0"
    ));
    assert_eq!(
        member_paths(Path::new("d"), deg)
            .iter()
            .filter(|p| p.is_none())
            .count(),
        1
    );
    // UUIDs in mdadm text form and distinct.
    let u = cfgs[0].uuid();
    assert_eq!(u.len(), 35);
    assert_eq!(u.split(':').count(), 4);
    assert_ne!(cfgs[0].uuid(), cfgs[1].uuid());
}
