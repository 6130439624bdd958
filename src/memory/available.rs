//! The memory the chosen device offers: RAM for `flex` (what Linux says is available, and the
//! headroom of every enclosing cgroup when that is smaller: SLURM jobs and containers), the
//! adapter's memory for a GPU where its runtime reports one.

use crate::config::DeviceKind;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What the device has for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Available {
    /// `bytes` free for the run, and where the figure comes from.
    Known { bytes: u64, source: String },
    /// No figure: why (the estimate is printed, the check is not made).
    Unknown { why: String },
}

impl Available {
    pub fn bytes(&self) -> Option<u64> {
        match self {
            Available::Known { bytes, .. } => Some(*bytes),
            Available::Unknown { .. } => None,
        }
    }
}

/// This process's peak resident set so far (`VmHWM` of `/proc/self/status`), in bytes; `None`
/// off Linux.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    meminfo_field(&status, "VmHWM:")
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn mem_available(meminfo: &str) -> Option<u64> {
    meminfo_field(meminfo, "MemAvailable:")
}

fn meminfo_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let mut parts = line[key.len()..].split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => Some(n * 1024),
        None => Some(n),
        Some(_) => None,
    }
}

/// The value of `key` in a cgroup `memory.stat` file.
fn stat_field(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let mut p = l.split_whitespace();
        (p.next() == Some(key)).then(|| p.next()?.parse().ok())?
    })
}

/// One cgroup's headroom: `limit − (usage − inactive file cache)`, the kernel's own notion of
/// the working set (the inactive page cache is reclaimed before the OOM killer acts). `None`
/// without a limit (`max`, or v1's "unlimited" near 2⁶³).
pub fn cgroup_headroom(limit: &str, usage: &str, inactive_file: Option<u64>) -> Option<u64> {
    let limit = limit.trim();
    if limit == "max" {
        return None;
    }
    let limit: u64 = limit.parse().ok()?;
    if limit >= 1 << 62 {
        return None;
    }
    let usage: u64 = usage.trim().parse().ok()?;
    let working = usage.saturating_sub(inactive_file.unwrap_or(0));
    Some(limit.saturating_sub(working))
}

/// The memory cgroup directories that enclose this process, innermost first, with the names of
/// their limit, usage and inactive-file keys (v2: `memory.max`, `memory.current`,
/// `inactive_file`; v1: `memory.limit_in_bytes`, `memory.usage_in_bytes`,
/// `total_inactive_file`).
fn cgroup_dirs() -> Vec<(PathBuf, [&'static str; 3])> {
    const V2: [&str; 3] = ["memory.max", "memory.current", "inactive_file"];
    const V1: [&str; 3] = [
        "memory.limit_in_bytes",
        "memory.usage_in_bytes",
        "total_inactive_file",
    ];
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut out = Vec::new();
    let mut push_chain = |root: &Path, rel: &str, keys: [&'static str; 3]| {
        let mut dir = root.join(rel.trim_start_matches('/'));
        loop {
            if dir.join(keys[0]).exists() && !out.iter().any(|(d, _)| d == &dir) {
                out.push((dir.clone(), keys));
            }
            if dir == root || !dir.pop() {
                break;
            }
        }
        // a namespaced container sees its own cgroup at the root
        if root.join(keys[0]).exists() && !out.iter().any(|(d, _)| d == root) {
            out.push((root.to_path_buf(), keys));
        }
    };
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), Some(c)) => (a, b, c),
            _ => continue,
        };
        if controllers.is_empty() {
            push_chain(Path::new("/sys/fs/cgroup"), path, V2);
        } else if controllers.split(',').any(|c| c == "memory") {
            push_chain(Path::new("/sys/fs/cgroup/memory"), path, V1);
        }
    }
    out
}

/// RAM available to this process: `MemAvailable`, or the smallest headroom of an enclosing
/// memory cgroup when that is smaller.
pub fn ram() -> Available {
    let meminfo = match std::fs::read_to_string("/proc/meminfo") {
        Ok(t) => t,
        Err(e) => {
            return Available::Unknown {
                why: format!("/proc/meminfo cannot be read ({e}): not Linux?"),
            };
        }
    };
    let Some(mut bytes) = mem_available(&meminfo) else {
        return Available::Unknown {
            why: "/proc/meminfo has no MemAvailable line".into(),
        };
    };
    let mut source = "MemAvailable".to_string();
    for (dir, [limit, usage, inactive]) in cgroup_dirs() {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        let (Some(l), Some(u)) = (read(limit), read(usage)) else {
            continue;
        };
        let inactive_file = read("memory.stat").and_then(|s| stat_field(&s, inactive));
        if let Some(h) = cgroup_headroom(&l, &u, inactive_file)
            && h < bytes
        {
            bytes = h;
            source = format!(
                "cgroup {} limit {} minus its working set",
                dir.join(limit).display(),
                super::estimate::human(l.trim().parse().unwrap_or(0))
            );
        }
    }
    Available::Known { bytes, source }
}

/// The memory of `kind`'s first device: RAM for `flex`; for a GPU, the capacity its CubeCL
/// runtime reports (CUDA: the card's total memory, `cuDeviceTotalMem`; wgpu's WGSL path reports
/// none).
pub fn device_memory(kind: DeviceKind) -> Available {
    match kind {
        DeviceKind::Flex => ram(),
        DeviceKind::Wgpu => gpu(kind),
        DeviceKind::Cuda => gpu(kind),
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu(kind: DeviceKind) -> Available {
    use burn::cubecl::device::{self, Device};
    let dev = match kind {
        #[cfg(feature = "cuda")]
        DeviceKind::Cuda => Device::Cuda(device::CudaDevice { index: 0 }),
        // the device `crate::backend::device` opens for wgpu
        #[cfg(feature = "wgpu")]
        DeviceKind::Wgpu => Device::Wgpu(device::WgpuDevice::new(
            device::WgpuDeviceKind::DefaultDevice,
        )),
        _ => {
            return Available::Unknown {
                why: format!("the `{}` backend is not compiled in", kind.name()),
            };
        }
    };
    // Opening a device that is not there panics inside CubeCL: turn that into a reason.
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let max = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        dev.client().properties().memory.max_memory()
    }));
    std::panic::set_hook(quiet);
    match max {
        Ok(Some(bytes)) => Available::Known {
            bytes,
            source: format!(
                "{} device 0's memory as its CubeCL runtime reports it (the whole card: \
                 other processes on it are not subtracted)",
                kind.name()
            ),
        },
        Ok(None) => Available::Unknown {
            why: format!(
                "the {} runtime (CubeCL 0.11) reports no memory size for its adapter",
                kind.name()
            ),
        },
        Err(_) => Available::Unknown {
            why: format!("{} device 0 could not be opened", kind.name()),
        },
    }
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
fn gpu(kind: DeviceKind) -> Available {
    Available::Unknown {
        why: format!("the `{}` backend is not compiled in", kind.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_available_in_bytes() {
        let text = "MemTotal:       24684032 kB\nMemFree:        23469568 kB\n\
                    MemAvailable:   24252416 kB\nBuffers:          102400 kB\n";
        assert_eq!(mem_available(text), Some(24_252_416 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots kB\n"), None);
    }

    #[test]
    fn cgroup_headroom_subtracts_the_working_set() {
        // v2: 8 GiB limit, 3 GiB charged of which 1 GiB inactive page cache → 6 GiB headroom
        let g = 1u64 << 30;
        assert_eq!(
            cgroup_headroom(&format!("{}\n", 8 * g), &format!("{}\n", 3 * g), Some(g)),
            Some(6 * g)
        );
        assert_eq!(cgroup_headroom("max\n", "123\n", None), None);
        // v1 without a limit
        assert_eq!(
            cgroup_headroom("9223372036854771712\n", "5000\n", None),
            None
        );
        // usage above the limit (cache not yet reclaimed): no headroom, not an underflow
        assert_eq!(cgroup_headroom("100", "250", Some(20)), Some(0));
        let stat = "anon 100\nfile 900\ninactive_file 400\nactive_file 500\n";
        assert_eq!(stat_field(stat, "inactive_file"), Some(400));
        assert_eq!(stat_field(stat, "total_inactive_file"), None);
    }
}
