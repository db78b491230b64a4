//! `--sweep`: one parameter over a list of values, one run per value.

use super::{us, BenchResult};
use crate::error::{Result, ToolsError};
use serde::Serialize;

/// A parameter swept by `--sweep`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SweepParam {
    /// Block size (`bs`).
    BlockSize(Vec<u64>),
    /// Queue depth (`iodepth`, `qd`).
    IoDepth(Vec<usize>),
    /// Jobs (`jobs`, `numjobs`).
    Jobs(Vec<usize>),
    /// Chunk size of an array created on the fly (`chunk`).
    Chunk(Vec<u64>),
    /// Layout of an array created on the fly (`layout`).
    Layout(Vec<String>),
    /// Stripe cache entries (`stripe_cache`; None = automatic, written `auto`).
    StripeCache(Vec<Option<usize>>),
}

impl SweepParam {
    /// Parse `bs=4K,64K`, `iodepth=1,4,16`, `jobs=1,2`, `chunk=16K,64K`, `layout=n2,f2`.
    /// `size` parses sizes.
    pub fn parse(s: &str, size: &dyn Fn(&str) -> Option<u64>) -> Result<SweepParam> {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| ToolsError::Invalid(format!("--sweep {s:?}: write PARAM=V1,V2,...")))?;
        let vals: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .collect();
        if vals.is_empty() {
            return Err(ToolsError::Invalid(format!("--sweep {s:?}: no values")));
        }
        let sizes = || -> Result<Vec<u64>> {
            vals.iter()
                .map(|x| {
                    size(x)
                        .ok_or_else(|| ToolsError::Invalid(format!("--sweep: {x:?} is not a size")))
                })
                .collect()
        };
        let nums = || -> Result<Vec<usize>> {
            vals.iter()
                .map(|x| {
                    x.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                        ToolsError::Invalid(format!("--sweep: {x:?} is not a positive number"))
                    })
                })
                .collect()
        };
        Ok(match k.trim().to_ascii_lowercase().as_str() {
            "bs" | "blocksize" | "block-size" => SweepParam::BlockSize(sizes()?),
            "iodepth" | "qd" | "queue-depth" => SweepParam::IoDepth(nums()?),
            "jobs" | "numjobs" => SweepParam::Jobs(nums()?),
            "chunk" => SweepParam::Chunk(sizes()?),
            "layout" => SweepParam::Layout(vals.iter().map(|x| x.to_string()).collect()),
            "stripe_cache" | "stripe-cache" => SweepParam::StripeCache(
                vals.iter()
                    .map(|x| {
                        if x.eq_ignore_ascii_case("auto") {
                            Ok(None)
                        } else {
                            x.parse::<usize>().ok().filter(|&n| n > 0).map(Some).ok_or_else(
                                || {
                                    ToolsError::Invalid(format!(
                                        "--sweep: {x:?} is neither a number of entries nor auto"
                                    ))
                                },
                            )
                        }
                    })
                    .collect::<Result<_>>()?,
            ),
            other => {
                return Err(ToolsError::Invalid(format!(
                    "--sweep: unknown parameter {other:?}: use bs, iodepth, jobs, chunk, layout or stripe_cache"
                )))
            }
        })
    }
    /// Parameter name for reports and charts.
    pub fn name(&self) -> &'static str {
        match self {
            SweepParam::BlockSize(_) => "bs",
            SweepParam::IoDepth(_) => "iodepth",
            SweepParam::Jobs(_) => "jobs",
            SweepParam::Chunk(_) => "chunk",
            SweepParam::Layout(_) => "layout",
            SweepParam::StripeCache(_) => "stripe_cache",
        }
    }
    /// The values as labels.
    pub fn labels(&self) -> Vec<String> {
        match self {
            SweepParam::BlockSize(v) | SweepParam::Chunk(v) => {
                v.iter().map(|&b| crate::trace::size_label(b)).collect()
            }
            SweepParam::IoDepth(v) | SweepParam::Jobs(v) => {
                v.iter().map(|n| n.to_string()).collect()
            }
            SweepParam::Layout(v) => v.clone(),
            SweepParam::StripeCache(v) => v
                .iter()
                .map(|e| e.map_or_else(|| "auto".to_string(), |n| n.to_string()))
                .collect(),
        }
    }
    /// True if each point needs a new array.
    pub fn needs_new_array(&self) -> bool {
        matches!(
            self,
            SweepParam::Chunk(_) | SweepParam::Layout(_) | SweepParam::StripeCache(_)
        )
    }
}

/// One point of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepPoint {
    /// The parameter's value as a label (`64K`, `16`, `f2`).
    pub value: String,
    /// The run.
    pub result: BenchResult,
}

/// A finished sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepResult {
    /// Parameter name.
    pub param: String,
    /// Points in the order given.
    pub points: Vec<SweepPoint>,
}

impl SweepResult {
    /// Table.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{:>8} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            self.param, "MiB/s", "IOPS", "p50", "p99", "p99.9"
        );
        for p in &self.points {
            let r = &p.result;
            s += &format!(
                "{:>8} {:>10.1} {:>10.0} {:>10} {:>10} {:>10}\n",
                p.value,
                r.mib_s,
                r.iops,
                us(r.lat_ns.p50),
                us(r.lat_ns.p99),
                us(r.lat_ns.p999)
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_parse() {
        let sz = |s: &str| {
            s.trim_end_matches('K')
                .parse::<u64>()
                .ok()
                .map(|v| v * 1024)
        };
        assert_eq!(
            SweepParam::parse("bs=4K,64K", &sz).unwrap(),
            SweepParam::BlockSize(vec![4096, 65536])
        );
        assert_eq!(
            SweepParam::parse("qd=1,8", &sz).unwrap(),
            SweepParam::IoDepth(vec![1, 8])
        );
        assert!(SweepParam::parse("qd=0", &sz).is_err());
        assert!(SweepParam::parse("colour=red", &sz).is_err());
        let sc = SweepParam::parse("stripe_cache=512,32768,auto", &sz).unwrap();
        assert_eq!(
            sc,
            SweepParam::StripeCache(vec![Some(512), Some(32768), None])
        );
        assert_eq!(sc.labels(), vec!["512", "32768", "auto"]);
        assert!(sc.needs_new_array());
        assert_eq!(
            SweepParam::parse("stripe_cache=0", &sz)
                .unwrap_err()
                .to_string(),
            "--sweep: \"0\" is neither a number of entries nor auto"
        );
        assert!(SweepParam::parse("bs", &sz).is_err());
    }
}
