//! The attention kernel against the explicit path, timed on the device a run trains on: the
//! measurement behind the CubeCL half's choice per shape (`crate::kernels::attention::choose_on`).

use super::Attention;
use crate::config::ModelConfig;
use crate::model::context::Ctx;
use crate::model::hooks::Frame;
use crate::model::layers::{Compute, Init};
use burn::tensor::Tensor;

/// One layer's weighted sum (the stage the attention kernel replaces) timed both ways on an
/// autodiff `device`: the kernel and the explicit path ([`Attention::mix`]'s two arms, the
/// model's own code), forward and backward at batch `b` and the model's context, products in
/// `compute`, on random q, k, v. Each way runs `warmup` untimed calls, then `reps` timed ones,
/// each ended by reading one value back; the medians are recorded
/// ([`crate::kernels::attention::record`]) so that the model's forwards of this shape take the
/// faster. None where the kernel does not run on this device for this model (the CPU half
/// needs no measurement: there the explicit path never wins).
pub fn time_attention(
    cfg: &ModelConfig,
    b: usize,
    compute: Compute,
    device: &burn::tensor::Device,
    warmup: usize,
    reps: usize,
) -> Option<(
    crate::kernels::attention::Shape,
    crate::kernels::attention::Measured,
)> {
    use crate::kernels::{Half, attention};
    use burn::tensor::Distribution;
    let precision = match compute {
        None => crate::config::Precision::F32,
        Some(burn::tensor::FloatDType::F16) => crate::config::Precision::F16,
        Some(_) => crate::config::Precision::Bf16,
    };
    if crate::kernels::half_on(device) != Ok(Half::Cube) {
        return None;
    }
    let t = cfg.ctx;
    let tables = crate::model::context::PositionTables::new(cfg, t, device);
    let ctx = Ctx::new(cfg, &tables, None, t, device, compute);
    let plan = ctx.fused.clone()?;
    let mut init = Init {
        base: crate::model::layers::HostRng::new(0),
        extra: crate::model::layers::HostRng::new(1),
        std: cfg.resolved_init_std(),
        device,
        lazy: false,
    };
    let attn = Attention::new(cfg, &mut init, 0, None);
    let (h, dh) = (cfg.n_heads, cfg.d_model / cfg.n_heads);
    let s = cfg.sink_tokens + t;
    let normal = Distribution::Normal(0.0, 1.0);
    let [q, k, v, g] = [0, 1, 2, 3].map(|_| Tensor::<4>::random([b, h, s, dh], normal, device));
    let frame = Frame {
        sink_tokens: ctx.sink_tokens,
        q_start: 0,
        slot_cols: 0,
    };
    let run = |fused: bool| {
        let (q, k, v) = (
            q.clone().require_grad(),
            k.clone().require_grad(),
            v.clone().require_grad(),
        );
        let out = if fused {
            attn.mix_fused(q.clone(), k.clone(), v.clone(), &plan, compute)
        } else {
            attn.mix_explicit(q.clone(), k.clone(), v.clone(), &ctx, &mut None, frame)
        };
        let grads = (out * g.clone()).sum().backward();
        let read = q.grad(&grads).map(|d| d.sum().into_scalar::<f32>());
        std::hint::black_box(read);
    };
    let time = |fused: bool| {
        for _ in 0..warmup {
            run(fused);
        }
        let mut ms: Vec<f64> = (0..reps.max(1))
            .map(|_| {
                let start = std::time::Instant::now();
                run(fused);
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        ms[ms.len() / 2]
    };
    let kernel_ms = time(true);
    let explicit_ms = time(false);
    let shape = attention::Shape {
        heads: h,
        rows: s,
        cols: s + cfg.attention.slot.slot_columns() - cfg.attention.slot.logit_columns(),
        width: dh,
        precision,
    };
    let measured = attention::Measured {
        batch: b,
        kernel_ms,
        explicit_ms,
    };
    attention::record(shape, measured);
    Some((shape, measured))
}
