//! The head scores' probe pass (docs/reference.md §11): one walk over a probe batch, layer by
//! layer, recording each layer's weights (through the normaliser's proxy, slot mass apart),
//! values and each head's z, reduced on the host by [`crate::heads`] before the next layer
//! runs; and the OV copying score of every head from the weights alone.

use super::{ProbeSpec, Record, host_f64 as host, probe_pass};
use crate::config::BlockConfig;
use crate::data::Batch;
use crate::heads::{LayerHeads, Measure, copy_score};
use crate::metrics::Proxy;
use crate::model::Lm;
use anyhow::Result;
use burn::tensor::{Device, Tensor};

/// Every layer's head scores on `probe` (its token ids are the scores' tokens), `done(l)`
/// after layer `l`.
pub fn head_scores(
    model: &Lm,
    probe: &Batch,
    chunk: usize,
    proxy: Proxy,
    measure: Measure,
    device: &Device,
    done: &mut dyn FnMut(usize),
) -> Vec<LayerHeads> {
    let mut out = Vec::new();
    let spec = ProbeSpec {
        record: Record {
            queries: false,
            z: true,
        },
        ..ProbeSpec::new(probe, chunk, proxy, device)
    };
    probe_pass(model, spec, &mut |l, _, a, z| {
        let z = z.expect("z is recorded");
        let slot = a.slot_mass.as_ref();
        out.push(LayerHeads::of(
            &a.attn,
            slot,
            &a.values,
            &z,
            &probe.inputs,
            measure,
        ));
        done(l);
    });
    out
}

/// How the OV circuits are formed (written into `heads.json`).
pub const OV_CIRCUIT: &str = "eigenvalues of W_O^h (diag(g_f) W_U E) diag(g_1) W_V^h (d_h × d_h; \
     W_V^h the key/value group's slice under GQA): the final norm's gain g_f and the gain g_1 of \
     the norm the attention reads (pre-norm and parallel blocks) folded in; the normalisation \
     scale, norm and projection biases, positions, gates and slots left out; an absent W_V or W_O \
     (SAS) is the identity";

/// The OV copying score `[layer][head]` of every head ([`OV_CIRCUIT`]).
pub fn ov_copy_scores(model: &Lm) -> Result<Vec<Vec<f64>>> {
    let cfg = &model.cfg;
    let (d, h, dh) = (cfg.d_model, cfg.n_heads, cfg.d_head());
    let group = h / cfg.kv_heads();
    let device = model.embed.val().device();
    let embed = model.embed.val(); // (V, d)
    let mut w_u = match &model.head {
        Some(head) => head.matrix(),       // (d, V)
        None => embed.clone().transpose(), // tied: Eᵀ
    };
    if let Some(n) = &model.norm_f {
        w_u = w_u * n.gain.val().unsqueeze_dim::<2>(1); // diag(g_f) W_U
    }
    let g = w_u.matmul(embed); // (d, d): W_U E
    let eye = || Tensor::<2>::eye(d, &device);
    let mut out = Vec::with_capacity(model.blocks.len());
    for block in &model.blocks {
        let attn = &block.attn;
        let mut w_v = attn.wv.as_ref().map_or_else(eye, |w| w.matrix()); // (d, KV·d_h)
        if !matches!(cfg.block, BlockConfig::PostNorm {})
            && let Some(n) = &block.norm1
        {
            w_v = n.gain.val().unsqueeze_dim::<2>(1) * w_v; // diag(g_1) W_V
        }
        let w_o = attn.wo.as_ref().map_or_else(eye, |w| w.matrix()); // (d, d)
        let mut row = Vec::with_capacity(h);
        for hi in 0..h {
            let kv = hi / group;
            let wv_h = w_v.clone().narrow(1, kv * dh, dh); // (d, d_h)
            let wo_h = w_o.clone().narrow(0, hi * dh, dh); // (d_h, d)
            let m = host(wo_h.matmul(g.clone()).matmul(wv_h)); // (d_h, d_h)
            row.push(copy_score(&m, dh)?);
        }
        out.push(row);
    }
    Ok(out)
}
