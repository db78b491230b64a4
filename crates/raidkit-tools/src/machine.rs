//! Where a measurement ran: cores, architecture, CPU model, kernel. Charts put the short
//! form in their titles (`2-core x86_64`), reports the whole.

use serde::Serialize;

/// The machine a benchmark ran on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Machine {
    /// CPUs this process may run on.
    pub cores: usize,
    /// `x86_64`, `aarch64`, ...
    pub arch: String,
    /// CPU model from /proc/cpuinfo, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Kernel release.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
}

/// The CPU model of a /proc/cpuinfo text (`model name` on x86, `Model`/`cpu model` elsewhere).
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        let k = k.trim();
        let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
        (matches!(k, "model name" | "Model" | "cpu model") && !v.is_empty()).then_some(v)
    })
}

impl Machine {
    /// This machine.
    pub fn this() -> Machine {
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            arch: std::env::consts::ARCH.to_string(),
            cpu: std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|s| cpu_model(&s)),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
        }
    }
    /// `2-core x86_64`.
    pub fn short(&self) -> String {
        format!("{}-core {}", self.cores, self.arch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_form_and_cpu_model() {
        let m = Machine {
            cores: 2,
            arch: "x86_64".into(),
            cpu: None,
            kernel: None,
        };
        assert_eq!(m.short(), "2-core x86_64");
        let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC  7B13 64-Core Processor\n";
        assert_eq!(
            cpu_model(x86).as_deref(),
            Some("AMD EPYC 7B13 64-Core Processor")
        );
        assert_eq!(cpu_model("processor : 0\nBogoMIPS : 50.00\n"), None);
        assert!(Machine::this().cores >= 1);
    }
}
