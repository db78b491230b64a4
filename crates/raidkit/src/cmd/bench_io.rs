//! `raidkit bench io`: fio-style workloads on a file, a block device, an existing array
//! (`--array MEMBER...`) or an array created on the fly in a temporary folder (`--create`),
//! with `--sweep` grids and charts.

use crate::units::parse_size;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use raidkit_layout::Level;
use raidkit_tools::bench::{
    self, ArraySpec, ArrayTarget, BenchResult, BenchSpec, FileTarget, Pattern, SweepParam,
    SweepPoint, SweepResult, Target,
};
use raidkit_tools::charts;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `bench io`.
#[derive(Args, Debug, Clone)]
pub struct BenchIoArgs {
    /// Workload: read, write, randread, randwrite, rw:P, randrw:P (P = % reads).
    #[arg(long = "rw", default_value = "randread")]
    pub rw: String,
    /// Block size.
    #[arg(long = "bs", default_value = "4K")]
    pub bs: String,
    /// Outstanding IOs per job (threads per job).
    #[arg(long, default_value_t = 1)]
    pub iodepth: usize,
    /// Jobs.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Run for this long (`10s`, `500ms`, `2m`; bare number = seconds), wrapping around.
    #[arg(long)]
    pub runtime: Option<String>,
    /// Bytes per job (default: one pass over the job's part of the region).
    #[arg(long)]
    pub size: Option<String>,
    /// O_DIRECT with aligned buffers (files and devices).
    #[arg(long)]
    pub direct: bool,
    /// Start of the region used.
    #[arg(long, default_value = "0")]
    pub offset: String,
    /// Length of the region used (default: to the end).
    #[arg(long)]
    pub region: Option<String>,
    /// Create TARGET as a file of this size (filled with data) if it does not exist.
    #[arg(long = "file-size")]
    pub file_size: Option<String>,
    /// The target is the array formed by these members (assembled through the engine).
    #[arg(long, num_args = 1.., value_name = "MEMBER")]
    pub array: Vec<PathBuf>,
    /// Create a throwaway array LEVEL:MEMBERS:MEMBER_SIZE (e.g. 5:4:64M) of sparse files.
    #[arg(long, value_name = "LEVEL:N:SIZE")]
    pub create: Option<String>,
    /// Chunk of the --create array.
    #[arg(long)]
    pub chunk: Option<String>,
    /// Layout of the --create array.
    #[arg(long)]
    pub layout: Option<String>,
    /// Stripe cache of a RAID4/5/6 target: entries (4 KiB per data member) or `auto`.
    #[arg(long, value_name = "ENTRIES|auto")]
    pub stripe_cache: Option<String>,
    /// Upper bound of the automatic stripe cache, bytes (K/M/G); not with a fixed
    /// --stripe-cache (in a stripe_cache sweep it applies to the `auto` points).
    #[arg(long, value_name = "SIZE")]
    pub stripe_cache_max: Option<String>,
    /// Folder for --create members (default: a new folder in the temp dir, removed after).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Allow writes to a block device or an existing array.
    #[arg(long)]
    pub force: bool,
    /// Run a grid: bs=4K,64K | iodepth=1,4,16 | jobs=1,2 | chunk=16K,64K | layout=n2,f2 |
    /// stripe_cache=512,4096,auto.
    #[arg(long, value_name = "PARAM=V1,V2,...")]
    pub sweep: Option<String>,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    /// Draw charts to this file (.png or .svg).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// File or block device (not with --array / --create).
    pub target: Option<PathBuf>,
}

fn size(s: &str) -> Result<u64> {
    parse_size(s, 1).map_err(|e| anyhow!(e))
}

fn duration(s: &str) -> Result<Duration> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .parse()
        .map_err(|_| anyhow!("{s:?} is not a duration (examples: 10s, 500ms, 2m)"))?;
    if !(v > 0.0 && v * mult <= 86400.0) {
        bail!("{s:?}: the runtime must be positive and at most a day");
    }
    Ok(Duration::from_secs_f64(v * mult))
}

fn spec_of(a: &BenchIoArgs) -> Result<BenchSpec> {
    Ok(BenchSpec {
        pattern: Pattern::parse(&a.rw)?,
        block_size: size(&a.bs)?,
        iodepth: a.iodepth,
        jobs: a.jobs,
        runtime: a.runtime.as_deref().map(duration).transpose()?,
        size: a.size.as_deref().map(size).transpose()?,
        offset: size(&a.offset)?,
        region: a.region.as_deref().map(size).transpose()?,
        seed: 0x5eed,
    })
}

fn array_spec(a: &BenchIoArgs) -> Result<ArraySpec> {
    let c = a.create.as_deref().unwrap_or_default();
    let parts: Vec<&str> = c.split(':').collect();
    let [l, n, s] = parts[..] else {
        bail!("--create {c:?}: write LEVEL:MEMBERS:MEMBER_SIZE, e.g. 5:4:64M");
    };
    Ok(ArraySpec {
        level: Level::parse(l)?,
        raid_devices: n
            .parse()
            .map_err(|_| anyhow!("--create: {n:?} is not a number of members"))?,
        member_size: parse_size(s, 1024).map_err(|e| anyhow!(e))?,
        chunk: a
            .chunk
            .as_deref()
            .map(|c| parse_size(c, 1024).map_err(|e| anyhow!(e)))
            .transpose()?,
        layout: a.layout.clone(),
    })
}

/// Removes the temporary folder of --create on every exit path.
struct TempDir(Option<PathBuf>);
impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The stripe cache asked for: a fixed size in entries, and/or a bound of the automatic
/// size; both at once is refused.
fn cache_choice(a: &BenchIoArgs) -> Result<(Option<usize>, Option<u64>)> {
    let fixed =
        match a.stripe_cache.as_deref() {
            None => None,
            Some(v) if v.eq_ignore_ascii_case("auto") => None,
            Some(v) => Some(v.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                anyhow!("--stripe-cache {v:?}: give a number of entries or auto")
            })?),
        };
    let max = a.stripe_cache_max.as_deref().map(size).transpose()?;
    if let (Some(n), Some(_)) = (fixed, max) {
        bail!("--stripe-cache {n} is a fixed size; --stripe-cache-max bounds the automatic size: give one of them (or --stripe-cache auto with --stripe-cache-max)");
    }
    Ok((fixed, max))
}

/// Apply --stripe-cache / --stripe-cache-max.
fn configure_cache(a: &BenchIoArgs, t: &ArrayTarget) -> Result<()> {
    let (fixed, max) = cache_choice(a)?;
    t.array()
        .configure_stripe_cache(max, fixed)
        .context("--stripe-cache")?;
    Ok(())
}

/// Run one point: open the target, run, clean up.
fn one(a: &BenchIoArgs, spec: &BenchSpec, dir: &Path, tag: &str) -> Result<BenchResult> {
    let writes = spec.pattern.writes();
    if a.create.is_some() {
        let (t, paths) = bench::create_array(dir, tag, &array_spec(a)?)?;
        if let Err(e) = configure_cache(a, &t) {
            bench::remove_array(&paths);
            return Err(e);
        }
        let r = bench::run(&t, spec, Some(&t));
        let stopped = t.stop();
        bench::remove_array(&paths);
        let r = r?;
        stopped?;
        return Ok(r);
    }
    if !a.array.is_empty() {
        if writes && !a.force {
            bail!("a write workload destroys the array's data; add --force");
        }
        let t = ArrayTarget::open(&a.array, writes, false)?;
        configure_cache(a, &t)?;
        let r = bench::run(&t, spec, Some(&t));
        let stopped = if writes { t.stop() } else { Ok(()) };
        let r = r?;
        stopped?;
        return Ok(r);
    }
    let Some(p) = &a.target else {
        bail!("give a TARGET file or device, --array MEMBER..., or --create LEVEL:N:SIZE");
    };
    let is_block = std::fs::metadata(p)
        .map(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()))
        .unwrap_or(false);
    if writes && is_block && !a.force {
        bail!(
            "{}: a write workload destroys the device's data; add --force",
            p.display()
        );
    }
    let fsz = a.file_size.as_deref().map(size).transpose()?;
    let t = FileTarget::open(p, writes, a.direct, fsz)?;
    Ok(bench::run(&t as &dyn Target, spec, None)?)
}

/// Run `bench io`.
pub fn run(a: BenchIoArgs) -> Result<()> {
    let n = usize::from(a.target.is_some())
        + usize::from(!a.array.is_empty())
        + usize::from(a.create.is_some());
    if n != 1 {
        bail!("give exactly one of: a TARGET file or device, --array MEMBER..., --create LEVEL:N:SIZE");
    }
    if a.create.is_none() && (a.chunk.is_some() || a.layout.is_some()) {
        bail!("--chunk and --layout are for --create");
    }
    crate::cmd::check_members(&a.array)?;
    cache_choice(&a)?;
    if let Some(t) = &a.target {
        crate::cmd::check_member(t)?;
    }
    let _cleanup;
    let dir = match (&a.dir, &a.create) {
        (Some(d), _) => d.clone(),
        (None, Some(_)) => {
            // A new private folder: one that exists (another user may have made it in the
            // shared temp dir) is refused rather than used.
            let d = std::env::temp_dir().join(format!("raidkit-bench-{}", std::process::id()));
            std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
                .create(&d)
                .with_context(|| {
                    format!("creating {} (give --dir DIR to use another)", d.display())
                })?;
            _cleanup = TempDir(Some(d.clone()));
            d
        }
        (None, None) => PathBuf::from("."),
    };
    let base = spec_of(&a)?;
    let Some(sw) = &a.sweep else {
        let r = one(&a, &base, &dir, "run")?;
        if let Some(p) = &a.plot {
            charts::draw(p, &charts::bench_figure(&r))?;
        }
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            out!("{}", r.to_text());
        }
        return Ok(());
    };
    let param = SweepParam::parse(sw, &|s| parse_size(s, 1).ok())?;
    if param.needs_new_array() && a.create.is_none() {
        bail!(
            "--sweep {}: needs --create (a new array per point)",
            param.name()
        );
    }
    let labels = param.labels();
    let mut points = Vec::new();
    for (i, label) in labels.iter().enumerate() {
        let mut spec = base.clone();
        let mut args = a.clone();
        match &param {
            SweepParam::BlockSize(v) => spec.block_size = v[i],
            SweepParam::IoDepth(v) => spec.iodepth = v[i],
            SweepParam::Jobs(v) => spec.jobs = v[i],
            SweepParam::Chunk(v) => args.chunk = Some(format!("{}b", v[i])),
            SweepParam::Layout(v) => args.layout = Some(v[i].clone()),
            SweepParam::StripeCache(v) => {
                args.stripe_cache = Some(v[i].map_or_else(|| "auto".into(), |n| n.to_string()));
                if v[i].is_some() {
                    // --stripe-cache-max bounds the automatic points only.
                    args.stripe_cache_max = None;
                }
            }
        }
        if !a.json {
            eprintln!("{} = {label} ...", param.name());
        }
        let r = one(&args, &spec, &dir, &format!("p{i}"))?;
        points.push(SweepPoint {
            value: label.clone(),
            result: r,
        });
    }
    let res = SweepResult {
        param: param.name().to_string(),
        points,
    };
    if let Some(p) = &a.plot {
        charts::draw(p, &charts::sweep_figure(&res))?;
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&res)?);
    } else {
        out!("{}", res.to_text());
    }
    Ok(())
}
