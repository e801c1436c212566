//! Provenance of a scenario: the machine, the git commit and the command line.
//!
//! Owns reading `/proc` (cores, RAM, kernel, CPU model), asking
//! `git rev-parse HEAD` (read-only) and quoting the command line so it can be
//! pasted back into a shell. It must never fail a scenario: anything it cannot
//! find is recorded as unknown (`None`), and it must never run a git command
//! that changes state.

use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// The machine a scenario ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Logical CPUs (`processor` entries of `/proc/cpuinfo`, else the parallelism the OS reports).
    pub cores: Option<usize>,
    /// `MemTotal` of `/proc/meminfo`, bytes.
    pub ram_bytes: Option<u64>,
    /// Kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: Option<String>,
    /// First `model name` of `/proc/cpuinfo`.
    pub cpu_model: Option<String>,
}

impl Machine {
    /// Reads the running machine's description.
    pub fn current() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        let (cores, cpu_model) = parse_cpuinfo(&cpuinfo);
        Machine {
            cores: cores.or_else(|| std::thread::available_parallelism().ok().map(|n| n.get())),
            ram_bytes: parse_meminfo_total(&meminfo),
            kernel,
            cpu_model,
        }
    }

    /// One line for reports: `2 cores (AMD EPYC), 23.4 GiB RAM, kernel 6.1.0`.
    pub fn describe(&self) -> String {
        let unknown = || "?".to_string();
        format!(
            "{} cores ({}), {} RAM, kernel {}",
            self.cores.map_or_else(unknown, |c| c.to_string()),
            self.cpu_model.clone().unwrap_or_else(unknown),
            self.ram_bytes.map_or_else(unknown, |b| format!(
                "{:.1} GiB",
                b as f64 / (1u64 << 30) as f64
            )),
            self.kernel.clone().unwrap_or_else(unknown),
        )
    }
}

/// `(processor count, first model name)` of a `/proc/cpuinfo` text.
pub fn parse_cpuinfo(text: &str) -> (Option<usize>, Option<String>) {
    let field = |line: &str, name: &str| -> Option<String> {
        let (k, v) = line.split_once(':')?;
        (k.trim() == name).then(|| v.trim().to_string())
    };
    let cores = text
        .lines()
        .filter(|l| field(l, "processor").is_some())
        .count();
    let model = text.lines().find_map(|l| field(l, "model name"));
    ((cores > 0).then_some(cores), model)
}

/// `MemTotal` of a `/proc/meminfo` text, bytes.
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut parts = line["MemTotal:".len()..].split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => n.checked_mul(1024),
        Some(_) => None,
    }
}

/// `git rev-parse HEAD` in the current directory, when it works.
pub fn git_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let sha = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !sha.is_empty()).then_some(sha)
}

/// Quotes `arg` for a POSIX shell when it needs it.
pub fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./,=:+@%".contains(&b));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// The command line, quoted for a shell.
pub fn command_line(args: &[String]) -> String {
    args.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_and_meminfo_are_parsed() {
        let cpu = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(parse_cpuinfo(cpu), (Some(2), Some("AMD EPYC 7B13".into())));
        assert_eq!(parse_cpuinfo(""), (None, None));
        let mem = "MemTotal:       24576000 kB\nMemFree: 1 kB\n";
        assert_eq!(parse_meminfo_total(mem), Some(24_576_000 * 1024));
        assert_eq!(parse_meminfo_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: x kB\n"), None);
    }

    #[test]
    fn command_lines_are_quoted_for_a_shell() {
        let args: Vec<String> = ["tablinum", "--out", "a b", "it's", ""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(command_line(&args), r#"tablinum --out 'a b' 'it'\''s' ''"#);
    }
}
