//! sinklab's kernels: fused operations that replace a stage of the explicit computation
//! (`model/`) where they cover the model, each owning the check of which configurations it
//! covers ([`Coverage`]). Where a kernel does not cover a model, the model runs the explicit
//! path and says so (`sinklab check`, the start of `train`); a configuration is never refused
//! because a kernel does not cover it, and never runs a kernel that does not.
//!
//! Each kernel is one Burn operation (Burn's backend extensions) of one shape: a module
//! `kernels::<name>` that holds the maths, the kernel's one decision — `choose(...)`, which
//! every caller asks, returns the [`Half`] that runs a call or every reason none does — and the
//! call; and a module `kernels::<name>_op` that holds the operation: the forward (returning
//! what its backward needs), the backward where there is one, and the differentiable operation
//! recorded on `Autodiff`, implemented by a CPU half on `Flex` ([`cpu`], host code on slices,
//! vectorised with [`simd`]) and a `Cube` half for the GPU backends ([`cube`], CubeCL
//! kernels) where the kernel has one:
//!
//! | kernel | CPU half | Cube half | where it does not run |
//! |---|---|---|---|
//! | [`attention`] ([`attention_op`]): softmax attention in tiles with an online softmax, forward and backward, without the T × T weights | f32 | f32, f16, bf16 storage; FlashAttention-2's tiles, on tensor cores where the device has them | variants it does not cover ([`attention::covers`]); low precision on the CPU; on a GPU, shapes where the explicit path measured faster |
//! | [`xent`] ([`xent_op`]): the softmax cross-entropy over the vocabulary, one pass each way | f32 logits | f32, f16, bf16 logits | – |
//! | [`adamw`] ([`adamw_op`]): AdamW's update, one pass, the clipping scale read on the device | yes | yes | – |
//! | [`ops::linear`], [`ops::norm`], [`ops::glu`], [`ops::rope`] ([`ops`]): linear layers, RMSNorm/LayerNorm, gated FFNs, RoPE, one pass each way | yes | – (Burn's autotuned matrix products and fused element-wise ops) | GPUs |
//!
//! [`runs_on`] and [`half_of`] / [`half_on`] say where the kernels run at all (the
//! [`SWITCH`] turns them all off).

pub mod adamw;
#[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
pub mod adamw_op;
pub mod attention;
#[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
pub mod attention_op;
#[cfg(feature = "flex")]
pub mod cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod cube;
#[cfg(feature = "flex")]
pub mod ops;
pub mod simd;
#[cfg(feature = "flex")]
pub mod views;
pub mod xent;
#[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
pub mod xent_op;

use crate::config::{DeviceKind, ModelConfig, Precision};

/// Whether a kernel covers a model: `Ok` or the reasons it does not, each naming the setting.
pub type Coverage = Result<(), Vec<String>>;

/// The two halves of a kernel: host code on the CPU backend (`Flex`, [`cpu`]) and CubeCL
/// kernels on the GPU backends (`Cube`, [`cube`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    Flex,
    Cube,
}

/// A kernel's decision for a call: the half that runs it, or every reason none does (the
/// explicit computation runs then).
pub type Choice = Result<Half, Vec<String>>;

/// The half of the kernels a device kind offers: flex the CPU half, wgpu and cuda the CubeCL
/// half, each where its cargo feature is compiled in and [`SWITCH`] leaves the kernels on.
pub fn half_of(device: DeviceKind) -> Choice {
    let (half, built) = match device {
        DeviceKind::Flex => (Half::Flex, cfg!(feature = "flex")),
        DeviceKind::Wgpu => (Half::Cube, cfg!(feature = "wgpu")),
        DeviceKind::Cuda => (Half::Cube, cfg!(feature = "cuda")),
    };
    if !enabled() {
        Err(vec![format!("{SWITCH}=0 turns them off")])
    } else if built {
        Ok(half)
    } else {
        Err(vec![format!(
            "run.device = \"{}\" is not compiled in",
            device.name()
        )])
    }
}

/// The half of the kernels a live device offers (with or without autodiff): flex the CPU
/// half, a CubeCL device the CubeCL half.
pub fn half_on(device: &burn::tensor::Device) -> Choice {
    if !enabled() {
        return Err(vec![format!("{SWITCH}=0 turns them off")]);
    }
    if on_device(device) {
        return Ok(Half::Flex);
    }
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if matches!(
        device.clone().inner().as_dispatch(),
        burn::backend::DispatchDevice::Cube(_)
    ) {
        return Ok(Half::Cube);
    }
    Err(vec![format!("no kernels on {device:?}")])
}

/// The environment variable that turns the kernels off for a whole process
/// (`SINKLAB_KERNELS=0`): every operation then runs Burn's element-wise ops as before the
/// kernels existed, bit for bit — for A/B timings and for reproducing a result computed that
/// way. Any other value, or none, leaves them on.
pub const SWITCH: &str = "SINKLAB_KERNELS";

/// Whether [`SWITCH`] leaves the kernels on (read once per process).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var(SWITCH).map_or(true, |v| v.trim() != "0"))
}

/// Whether the kernels run on a device: the CPU backend (`Flex`) has them; other backends keep
/// the explicit path.
pub fn runs_on(device: DeviceKind) -> Coverage {
    if !enabled() {
        Err(vec![format!("{SWITCH}=0 turns them off")])
    } else if device == DeviceKind::Flex && cfg!(feature = "flex") {
        Ok(())
    } else {
        Err(vec![format!(
            "run.device = \"{}\" has no implementation of the kernels (flex has)",
            device.name()
        )])
    }
}

/// Whether a live tensor's device is one the kernels run on (the CPU backend, with or without
/// autodiff) and [`SWITCH`] leaves them on.
pub fn on_device(device: &burn::tensor::Device) -> bool {
    #[cfg(feature = "flex")]
    return enabled() && device.clone().inner() == burn::tensor::Device::flex();
    #[cfg(not(feature = "flex"))]
    return {
        let _ = device;
        false
    };
}

/// The line `check` and `train` print about the kernels a run uses: None when it asks for
/// none.
pub fn summary(m: &ModelConfig, device: DeviceKind, precision: Precision) -> Option<String> {
    use crate::config::AttentionKernel;
    let place = runs_on(device);
    let xent = match (&place, half_of(device)) {
        (Ok(()), _) => {
            format!(
                "linear layers, norms, gated FFNs, cross-entropy and AdamW: the CPU kernels \
                 (matrix products: {})",
                cpu::sgemm::products()
            )
        }
        (Err(_), Ok(Half::Cube)) => "cross-entropy (logits in the products' dtype) and AdamW: \
             the CubeCL kernels; linear layers, norms and gated FFNs: Burn's ops (its matrix \
             products autotuned, the element-wise ops fused)"
            .to_string(),
        (Err(why), _) => format!(
            "linear layers, norms, gated FFNs, cross-entropy and AdamW: Burn's ops ({})",
            why.join(", ")
        ),
    };
    let attn = match (m.attention.kernel, attention::choose(m, device, precision)) {
        (AttentionKernel::Manual, _) => {
            return (place.is_ok() || half_of(device) == Ok(Half::Cube)).then_some(xent);
        }
        (AttentionKernel::Fused, Ok(half)) => format!(
            "attention: the fused kernel ({}; training and evaluation; the probe path and \
             cached decoding keep the explicit weights)",
            match half {
                Half::Flex => "CPU half",
                Half::Cube => "CubeCL half, tiled; the explicit path where measured faster",
            }
        ),
        (AttentionKernel::Fused, Err(why)) => format!(
            "attention: kernel = \"fused\" does not cover this model ({}): the explicit \
             path runs",
            why.join(", ")
        ),
    };
    Some(format!("kernels: {attn}; {xent}"))
}

/// `x W` over the last dimension of x (…, in) by the linear kernel ([`cpu::linear`]), W
/// (in, out); `transposed`: W is given as Wᵀ (out, in) (a tied head's embedding). Only where
/// [`on_device`] holds.
pub fn linear<const D: usize>(
    x: burn::tensor::Tensor<D>,
    w: burn::tensor::Tensor<2>,
    transposed: bool,
) -> burn::tensor::Tensor<D> {
    let dims = x.dims();
    let mut out = dims;
    out[D - 1] = w.dims()[if transposed { 0 } else { 1 }];
    let n = dims[..D - 1].iter().product();
    #[cfg(feature = "flex")]
    {
        let lay = if transposed {
            ops::WeightLayout::OutIn
        } else {
            ops::WeightLayout::InOut
        };
        ops::linear(x.reshape([n, dims[D - 1]]), w, lay).reshape(out)
    }
    #[cfg(not(feature = "flex"))]
    unreachable!("the kernels run only on flex ({n}, {out:?})")
}

/// `act(a) ⊙ b` element-wise (a gated feed-forward product) by [`cpu::glu`]; only where
/// [`on_device`] holds.
#[cfg(feature = "flex")]
pub fn glu<const D: usize>(
    a: burn::tensor::Tensor<D>,
    b: burn::tensor::Tensor<D>,
    act: ops::Act,
) -> burn::tensor::Tensor<D> {
    let dims = a.dims();
    let n = dims[..D - 1].iter().product();
    let f = dims[D - 1];
    ops::glu(a.reshape([n, f]), b.reshape([n, f]), act).reshape(dims)
}

/// RoPE on (B, H, S, d_h) x by [`cpu::rope`] with the tables cos, sin (…, S, r/2); only where
/// [`on_device`] holds and x is f32.
#[cfg(feature = "flex")]
pub fn rope(
    x: burn::tensor::Tensor<4>,
    cos: &burn::tensor::Tensor<4>,
    sin: &burn::tensor::Tensor<4>,
    r: usize,
    pairing: crate::config::RopePairing,
) -> burn::tensor::Tensor<4> {
    use cpu::rope::Pairing;
    let [s, half] = [cos.dims()[2], cos.dims()[3]];
    assert_eq!(x.dims()[2], s, "rope: one table row per position");
    let args = ops::RopeArgs {
        r,
        pairing: match pairing {
            crate::config::RopePairing::Halves => Pairing::Halves,
            crate::config::RopePairing::Adjacent => Pairing::Adjacent,
        },
    };
    let table = |t: &burn::tensor::Tensor<4>| t.clone().reshape([s, half]);
    ops::rope(x, table(cos), table(sin), args)
}

/// RMSNorm / LayerNorm over the last dimension by [`cpu::norm`] (`b` unused by RMSNorm); only
/// where [`on_device`] holds.
#[cfg(feature = "flex")]
pub fn norm<const D: usize>(
    x: burn::tensor::Tensor<D>,
    g: burn::tensor::Tensor<1>,
    b: burn::tensor::Tensor<1>,
    args: ops::NormArgs,
) -> burn::tensor::Tensor<D> {
    let dims = x.dims();
    let n = dims[..D - 1].iter().product();
    ops::norm(x.reshape([n, dims[D - 1]]), g, b, args).reshape(dims)
}
