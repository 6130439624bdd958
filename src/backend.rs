//! Run-time backend selection and run provenance.
//!
//! Backends are cargo features (`flex` default, `wgpu`, `cuda`); the device is chosen at run
//! time from `[run] device` or `--device`. Asking for a backend that was not compiled in is an
//! error naming the feature to enable: there is no silent fallback to the CPU.

use crate::config::{DeviceKind, Experiment, Precision};
use anyhow::{Result, bail};
use burn::tensor::Device;
use serde::Serialize;

/// Cargo features compiled into this binary.
pub fn compiled_features() -> Vec<&'static str> {
    let mut f = Vec::new();
    if cfg!(feature = "flex") {
        f.push("flex");
    }
    if cfg!(feature = "wgpu") {
        f.push("wgpu");
    }
    if cfg!(feature = "cuda") {
        f.push("cuda");
    }
    f
}

/// The (non-autodiff) device for a backend kind: GPU 0 of a GPU backend.
pub fn device(kind: DeviceKind) -> Result<Device> {
    device_at(kind, 0)
}

/// The (non-autodiff) device for a backend kind; on a GPU backend GPU `index` (an MPI rank's
/// GPU: [`crate::config::RunConfig::devices`] > 1 is refused in favour of one rank per GPU).
pub fn device_at(kind: DeviceKind, index: usize) -> Result<Device> {
    let _ = index; // only GPU backends have more than one device
    // unused when every backend is compiled in
    #[cfg_attr(
        all(feature = "flex", feature = "wgpu", feature = "cuda"),
        allow(unused_variables)
    )]
    let missing = |feature: &str| -> Result<Device> {
        bail!(
            "device `{feature}` was requested but this sinklab binary was built without the `{feature}` \
             cargo feature (compiled in: [{}]); rebuild with `cargo build --release --features {feature}`",
            compiled_features().join(", ")
        )
    };
    match kind {
        DeviceKind::Flex => {
            #[cfg(feature = "flex")]
            return Ok(Device::flex());
            #[cfg(not(feature = "flex"))]
            return missing("flex");
        }
        DeviceKind::Wgpu => {
            #[cfg(feature = "wgpu")]
            return opened(
                kind,
                index,
                if index == 0 {
                    Device::wgpu(burn::tensor::DeviceKind::DefaultDevice)
                } else {
                    Device::wgpu(burn::tensor::DeviceKind::DiscreteGpu(index))
                },
            );
            #[cfg(not(feature = "wgpu"))]
            return missing("wgpu");
        }
        DeviceKind::Cuda => {
            #[cfg(feature = "cuda")]
            return opened(kind, index, Device::cuda(index));
            #[cfg(not(feature = "cuda"))]
            return missing("cuda");
        }
    }
}

/// A GPU device, opened now: one that is not there (no GPU, no driver library) would otherwise
/// panic inside CubeCL at its first tensor.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn opened(kind: DeviceKind, index: usize, device: Device) -> Result<Device> {
    if quietly(|| device.supports_dtype(burn::tensor::FloatDType::F32)).is_none() {
        bail!(
            "run.device = \"{}\": {} device {index} could not be opened (no GPU, or no driver: \
             cuda needs the NVIDIA driver's libcuda.so, wgpu a Vulkan driver{})",
            kind.name(),
            kind.name(),
            if index > 0 {
                "; with one MPI rank per GPU, rank i of a machine takes GPU i: start at most as \
                 many ranks per machine as it has GPUs"
            } else {
                ""
            }
        );
    }
    Ok(device)
}

/// Refuse a mixed precision the backend cannot compute in, with the reason: WGSL has no bf16;
/// f16 on wgpu needs the adapter's `shader-f16`; flex and CUDA have both.
pub fn check_precision(kind: DeviceKind, device: &Device, p: Precision) -> Result<()> {
    let dtype = match p {
        Precision::F32 => return Ok(()),
        Precision::Bf16 => burn::tensor::FloatDType::BF16,
        Precision::F16 => burn::tensor::FloatDType::F16,
    };
    if kind == DeviceKind::Wgpu && p == Precision::Bf16 {
        bail!(
            "train.precision = \"bf16\" on run.device = \"wgpu\": WGSL (wgpu's shader language) \
             has no bf16 arithmetic; use \"f16\" on wgpu (where the adapter has shader-f16), or \
             bf16 on cuda or flex"
        );
    }
    let Some(supported) = quietly(|| device.supports_dtype(dtype)) else {
        bail!(
            "precision \"{}\" on run.device = \"{}\": {} device 0 could not be opened to ask \
             whether it computes in {} (no GPU, or no driver: cuda needs the NVIDIA driver's \
             libcuda.so, wgpu a Vulkan driver)",
            p.name(),
            kind.name(),
            kind.name(),
            p.name()
        );
    };
    if !supported {
        bail!(
            "precision \"{}\" on run.device = \"{}\": this device cannot compute in {} (for \
             wgpu: the adapter lacks shader-f16); use \"f32\"{}",
            p.name(),
            kind.name(),
            p.name(),
            if kind == DeviceKind::Wgpu {
                ", or the cuda backend"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// `f()`, or `None` when it panics, without printing the panic. Opening a GPU device that is not
/// there (no GPU, no driver library) panics inside CubeCL; callers turn that into a reason.
pub fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    out.ok()
}

/// Whether `device` is the CPU (`flex`), where concurrent jobs each get their own cores.
pub fn is_cpu(device: &Device) -> bool {
    #[cfg(feature = "flex")]
    return *device == Device::flex();
    #[cfg(not(feature = "flex"))]
    return {
        let _ = device;
        false
    };
}

/// Where a run came from: written to `provenance.json` before step 0.
#[derive(Debug, Serialize)]
pub struct Provenance {
    pub sinklab_version: &'static str,
    pub burn_version: &'static str,
    pub git_revision: Option<String>,
    pub git_dirty: Option<bool>,
    pub build_git_revision: &'static str,
    pub features: Vec<&'static str>,
    pub device: String,
    /// The CPU the process ran on: the kernels' results depend on its vector width.
    pub cpu: Cpu,
    /// The kernel choices of this run ([`crate::kernels::summary`]; None: the explicit path
    /// everywhere) and the environment variables that change them, as set.
    pub kernels: Option<String>,
    pub kernel_env: std::collections::BTreeMap<&'static str, String>,
    pub seed: u64,
    pub argv: Vec<String>,
    pub cwd: String,
    pub hostname: String,
    pub started_unix: u64,
    pub resumed_from_step: Option<u64>,
    /// The number of MPI ranks training the run (1: one process).
    pub world_size: usize,
    /// Every rank's host and device when several train the run (docs/distributed.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankInfo>,
}

/// One MPI rank of a run, as its provenance records it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RankInfo {
    pub rank: usize,
    /// The rank among its machine's ranks (the GPU it takes).
    pub local_rank: usize,
    pub host: String,
    /// Its device: `flex (1 thread)`, `cuda:1`, `wgpu:0`.
    pub device: String,
    pub pid: u32,
}

/// The CPU a process runs on, as far as it decides the kernels' summation order: the model
/// name, the widest vector extension the CPU kernels use and the logical cores.
#[derive(Debug, Clone, Serialize)]
pub struct Cpu {
    pub model: String,
    /// "AVX-512" (avx512f), "AVX2" (avx2 and fma), or "scalar".
    pub vector: &'static str,
    pub cores: usize,
}

impl Cpu {
    pub fn detect() -> Self {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        #[cfg(target_arch = "x86_64")]
        let vector = if is_x86_feature_detected!("avx512f") {
            "AVX-512"
        } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            "AVX2"
        } else {
            "scalar"
        };
        #[cfg(not(target_arch = "x86_64"))]
        let vector = "scalar";
        Self {
            model,
            vector,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// The environment variables that change which kernels run, and their values where set
/// (`SINKLAB_KERNELS`, `SINKLAB_GEMM`).
pub fn kernel_env() -> std::collections::BTreeMap<&'static str, String> {
    let names = [
        Some(crate::kernels::SWITCH),
        #[cfg(feature = "flex")]
        Some(crate::kernels::cpu::sgemm::ENV),
        #[cfg(not(feature = "flex"))]
        None,
    ];
    names
        .into_iter()
        .flatten()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k, v)))
        .collect()
}

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Provenance {
    pub fn collect(exp: &Experiment, resumed_from_step: Option<u64>) -> Self {
        let revision = git(&["rev-parse", "HEAD"]);
        let dirty = revision
            .as_ref()
            .and_then(|_| git(&["status", "--porcelain", "--untracked-files=no"]))
            .map(|s| !s.is_empty());
        Self {
            sinklab_version: env!("CARGO_PKG_VERSION"),
            burn_version: env!("SINKLAB_BURN_VERSION"),
            git_revision: revision,
            git_dirty: dirty,
            build_git_revision: env!("SINKLAB_BUILD_GIT"),
            features: compiled_features(),
            device: exp.run.device.name().to_string(),
            cpu: Cpu::detect(),
            kernels: crate::kernels::summary(&exp.model, exp.run.device, exp.train.precision),
            kernel_env: kernel_env(),
            seed: exp.run.seed,
            argv: std::env::args().collect(),
            cwd: std::env::current_dir()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            hostname: std::fs::read_to_string("/etc/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            resumed_from_step,
            world_size: 1,
            ranks: Vec::new(),
        }
    }
}
