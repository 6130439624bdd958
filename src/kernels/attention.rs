//! The fused attention kernel: `normalise(q kᵀ / √d_h + bias, mask) v` for (B, H, Q, d_h)
//! queries against (B, H, C, d_h) keys and values without the (B, H, Q, C) weights ever
//! existing — tiles with an online softmax, forward and backward ([`super::cpu::attention`]).
//!
//! What it covers, beyond plain causal softmax attention:
//! - softmax_n (`exp(s) / (n + Σ exp(s))`: an extra logit ln n with value 0) and the learned
//!   sink logit (the extra logit is z_h, trained through the kernel's own ∂z);
//! - key/value slots (KV bias, K bias, memory K/V): extra key columns in front, never masked,
//!   no position bias; the V bias, the output gate, sink tokens, grouped-query heads and RoPE
//!   are outside the kernel;
//! - every mask (causal, sliding window, sinks + window, prefix), passed as at most two runs
//!   of visible key columns per query row;
//! - ALiBi (a fixed logit bias) and a row scale α (applied to the output, `α A V = α (A V)`);
//! - Scalable-Softmax (the model scales q by σ_h ln n_i before the kernel) and every output
//!   gate (Qwen's, the per-token and the sparse head gate: they act on the kernel's output).
//!
//! Not covered (the explicit path runs and `check` says why): the other normalisers (softpick
//! and clipped softmax included: [`covers`] says what in their maths the kernel lacks), T5
//! relative buckets (a learned bias), U-SPA / E-SPA and shaped attention / Value-SkipInit
//! (they change the weights after the normaliser), cached decoding and any forward whose hooks
//! want the pattern (the probe path).

use super::{Choice, Coverage, Half};
use crate::config::{
    AttentionKernel, DeviceKind, GateConfig, MaskConfig, ModelConfig, NormaliserConfig,
    PositionsConfig, Precision, ShapingConfig, SlotConfig, SpaConfig, ValueOutputConfig,
};
use burn::tensor::{FloatDType, Tensor};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Whether the kernel covers the model's attention, axis by axis (every variant of every axis
/// named, so a new one is a compile error here): `Ok`, or each setting it does not cover.
pub fn covers(m: &ModelConfig) -> Coverage {
    let a = &m.attention;
    let mut why = Vec::new();
    match a.normaliser {
        // Scalable-Softmax is softmax of q scaled per row and head before the kernel
        NormaliserConfig::Softmax {}
        | NormaliserConfig::SoftmaxN { .. }
        | NormaliserConfig::ScalableSoftmax { .. } => {}
        NormaliserConfig::Softpick { .. } => why.push(
            "softpick is not softmax: its weights ReLU(e^(s−m) − e^(−m)) / (Σ|e^(s−m) − e^(−m)| \
             + ε e^(−m)) need a rectified numerator and a sum of absolute values per row, and \
             the backward ∂s = e^(s−lse) (1[s > 0] ∂p − sign(s) D); the kernel's online softmax \
             keeps only e^(s−m) and its sum (an online form exists: both rescale by e^(m−m') \
             when the row max grows; neither half implements it)"
                .to_string(),
        ),
        NormaliserConfig::ClippedSoftmax { .. } => why.push(
            "clipped softmax clips each normalised weight, clip((ζ − γ) e^(s−lse) + γ, 0, 1), \
             which needs the row's final log-sum-exp before the first weight is known: the \
             kernel's single online pass adds e^(s−m) v into the output while lse is still \
             growing, so it cannot clip (a second pass over the keys could)"
                .to_string(),
        ),
        NormaliserConfig::Sigmoid { .. }
        | NormaliserConfig::SigmoidNormalised {}
        | NormaliserConfig::Elu1 {}
        | NormaliserConfig::Elu1Normalised {}
        | NormaliserConfig::Relu {}
        | NormaliserConfig::Linear { .. } => {
            why.push("the normaliser is neither softmax nor softmax_n".to_string())
        }
    }
    match a.slot {
        // an extra logit; keys and values in front; the V bias is added after the kernel
        SlotConfig::None {}
        | SlotConfig::SinkLogit { .. }
        | SlotConfig::KvBias { .. }
        | SlotConfig::KBias { .. }
        | SlotConfig::MemoryKv { .. }
        | SlotConfig::VBias { .. } => {}
    }
    match a.mask {
        // each at most two runs of visible keys per row
        MaskConfig::Causal {}
        | MaskConfig::Prefix { .. }
        | MaskConfig::SlidingWindow { .. }
        | MaskConfig::SinksWindow { .. } => {}
    }
    match a.gate {
        // applied to the kernel's output, before W_O
        GateConfig::None {}
        | GateConfig::Headwise {}
        | GateConfig::Elementwise {}
        | GateConfig::PerToken { .. }
        | GateConfig::Sparse { .. } => {}
    }
    match a.value_output {
        // W_V and W_O sit outside the weighted sum
        ValueOutputConfig::Dense {}
        | ValueOutputConfig::Reparam { .. }
        | ValueOutputConfig::Identity { .. } => {}
    }
    match m.positions {
        // rotations and embeddings come before the kernel; ALiBi is its fixed bias
        PositionsConfig::Nope {}
        | PositionsConfig::Sinusoidal {}
        | PositionsConfig::Learned {}
        | PositionsConfig::Alibi {}
        | PositionsConfig::Rope { .. } => {}
        PositionsConfig::Relative { .. } => {
            why.push("T5 relative positions add a learned logit bias".to_string())
        }
    }
    match a.shaping {
        ShapingConfig::None {} => {}
        ShapingConfig::ValueSkipinit { .. } | ShapingConfig::Shaped { .. } => {
            why.push("the attention matrix is shaped".to_string())
        }
    }
    match a.spa {
        SpaConfig::None {} => {}
        SpaConfig::USpa { .. } | SpaConfig::ESpa { .. } => {
            why.push("U-SPA / E-SPA add a logit bias and rescale rows".to_string())
        }
    }
    if why.is_empty() { Ok(()) } else { Err(why) }
}

/// The one decision every caller asks (`check`, `train`'s start lines, the memory estimate,
/// each forward's context): whether `m`'s attention runs in the kernel on `device` at
/// `precision`, and on which half — or every reason it does not. The CPU half computes in f32
/// only (a low precision runs the explicit path, its products in that precision); the CubeCL
/// half stores q, k, v in any of them and computes in f32.
pub fn choose(m: &ModelConfig, device: DeviceKind, precision: Precision) -> Choice {
    decide(m, super::half_of(device), precision, None)
}

/// [`choose`] for a forward of `rows` query rows against `cols` key columns on a live device,
/// products in `compute` (None: f32): on the CubeCL half the kernel also gives way to the
/// explicit path where [`record`] measured that faster at this shape.
pub fn choose_on(
    m: &ModelConfig,
    device: &burn::tensor::Device,
    compute: Option<FloatDType>,
    rows: usize,
    cols: usize,
) -> Choice {
    let precision = match compute {
        None => Precision::F32,
        Some(FloatDType::BF16) => Precision::Bf16,
        Some(FloatDType::F16) => Precision::F16,
        Some(other) => return Err(vec![format!("products in {other:?}")]),
    };
    let key = Shape {
        heads: m.n_heads,
        rows,
        cols,
        width: m.d_model / m.n_heads,
        precision,
    };
    decide(m, super::half_on(device), precision, Some(key))
}

fn decide(m: &ModelConfig, half: Choice, precision: Precision, shape: Option<Shape>) -> Choice {
    let mut why = match m.attention.kernel {
        AttentionKernel::Fused => Vec::new(),
        AttentionKernel::Manual => vec!["model.attention.kernel = \"manual\"".to_string()],
    };
    if let Err(w) = covers(m) {
        why.extend(w);
    }
    match (&half, precision) {
        (Err(w), _) => why.extend(w.iter().cloned()),
        (Ok(Half::Flex), Precision::F32) | (Ok(Half::Cube), _) => {}
        (Ok(Half::Flex), Precision::Bf16 | Precision::F16) => why.push(format!(
            "precision {} on flex (the CPU attention kernel computes in f32)",
            precision.name()
        )),
    }
    if let (Ok(Half::Cube), Some(shape)) = (&half, shape)
        && let Some(m) = measured(&shape).filter(|m| !m.kernel_wins())
    {
        why.push(format!(
            "measured slower than the explicit path at this shape ({})",
            m.line()
        ));
    }
    if why.is_empty() { half } else { Err(why) }
}

/// The shape a measurement of the CubeCL half was taken at (the batch aside: it scales both
/// paths alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Shape {
    pub heads: usize,
    pub rows: usize,
    pub cols: usize,
    pub width: usize,
    pub precision: Precision,
}

/// One layer's attention, forward and backward, timed both ways on a CubeCL device
/// (`crate::model::time_attention`): milliseconds per call, medians.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub batch: usize,
    pub kernel_ms: f64,
    pub explicit_ms: f64,
}

impl Measured {
    /// The kernel keeps the call unless the explicit path measured faster.
    pub fn kernel_wins(&self) -> bool {
        self.kernel_ms <= self.explicit_ms
    }
    /// "tiled kernel 2.91 ms, explicit 5.12 ms per layer forward + backward at batch 8".
    pub fn line(&self) -> String {
        format!(
            "tiled kernel {:.2} ms, explicit {:.2} ms per layer forward + backward at batch {}",
            self.kernel_ms, self.explicit_ms, self.batch
        )
    }
}

/// The environment variable that fixes the CubeCL half's choice instead of measuring it:
/// `SINKLAB_ATTENTION=kernel` keeps the tiled kernel at every shape it covers (a benchmark of
/// the kernel itself); unset or `measure`, each run measures both ways at its shape. (The
/// explicit path everywhere is `model.attention.kernel = "manual"`.)
pub const PATH_SWITCH: &str = "SINKLAB_ATTENTION";

/// Whether runs measure the kernel against the explicit path ([`PATH_SWITCH`]); read once.
pub fn measure_paths() -> bool {
    static MEASURE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MEASURE.get_or_init(|| std::env::var(PATH_SWITCH).map_or(true, |v| v.trim() != "kernel"))
}

/// The measurements of this process, by shape.
static MEASURED: Mutex<BTreeMap<Shape, Measured>> = Mutex::new(BTreeMap::new());

/// Remember a measurement: later forwards of that shape on a CubeCL device take the faster
/// path ([`choose_on`]).
pub fn record(shape: Shape, m: Measured) {
    MEASURED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(shape, m);
    GENERATION.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// Bumped by every [`record`]: a context built before a measurement is built again
/// (`crate::model`'s context cache keys on it).
static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The number of measurements recorded so far in this process.
pub fn generation() -> u64 {
    GENERATION.load(std::sync::atomic::Ordering::SeqCst)
}

fn measured(shape: &Shape) -> Option<Measured> {
    MEASURED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(shape)
        .copied()
}

/// What a forward passes to the kernel for its query rows: the visible key columns of each
/// row and the fixed logit bias, built once per forward ([`crate::model`]'s context).
#[derive(Debug, Clone)]
pub struct Plan {
    /// Per query row, up to two half-open runs of visible key columns, in order.
    pub runs: Arc<Vec<[[u32; 2]; 2]>>,
    /// ALiBi's bias (H, Q, C), row-major (the CPU half's form); None without.
    pub bias: Option<Arc<Vec<f32>>>,
    /// The same bias as slopes (the CubeCL half's form); present exactly with `bias`.
    pub alibi: Option<Alibi>,
}

/// ALiBi's bias `−m_h |pos_i − pos_j|` from its slopes: query row i of the forward sits at
/// position `q_start + i`, key column j at `j − kv_slots` (the key/value slot columns in front
/// get no bias).
#[derive(Debug, Clone)]
pub struct Alibi {
    /// m_h (H).
    pub slopes: Arc<Vec<f32>>,
    pub kv_slots: usize,
    pub q_start: usize,
}

/// The CubeCL half's launch shape: a block of 16 · `planes` rows and tiles of `bc` columns
/// (`bc` a multiple of 16, 1–4 planes), or the largest the sizes and the device's shared memory
/// allow (`Auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tiles {
    #[default]
    Auto,
    Fixed {
        planes: usize,
        bc: usize,
    },
}

impl Plan {
    /// The plan for `nq` query rows from the visibility of each (row, column) of the explicit
    /// path's C columns and ALiBi's bias (the (H, Q, C) table with the slopes it was built
    /// from and the first query row's position; its `kv_slots` count the slot columns after
    /// the logit's), or None when some row's visible keys are more than two runs. The first
    /// `logit_cols` columns (the sink logit's) are the kernel's extra logit, not keys: they are
    /// dropped, and the kernel's key columns are the remaining C − `logit_cols`.
    pub fn new(
        nq: usize,
        c: usize,
        logit_cols: usize,
        visible: impl Fn(usize, usize) -> bool,
        bias: Option<(Arc<Vec<f32>>, Alibi)>,
    ) -> Option<Self> {
        let (bias, alibi) = match bias {
            Some((table, alibi)) => (Some(table), Some(alibi)),
            None => (None, None),
        };
        let visible = |i: usize, j: usize| visible(i, j + logit_cols);
        let bias = match bias {
            Some(b) if logit_cols > 0 => Some(Arc::new(
                b.chunks_exact(c)
                    .flat_map(|row| row[logit_cols..].iter().copied())
                    .collect(),
            )),
            other => other,
        };
        let c = c - logit_cols;
        let mut runs = Vec::with_capacity(nq);
        for i in 0..nq {
            let mut row = [[0u32; 2]; 2];
            let mut n = 0;
            let mut j = 0;
            while j < c {
                if visible(i, j) {
                    let start = j;
                    while j < c && visible(i, j) {
                        j += 1;
                    }
                    if n == 2 {
                        return None;
                    }
                    row[n] = [start as u32, j as u32];
                    n += 1;
                } else {
                    j += 1;
                }
            }
            runs.push(row);
        }
        Some(Self {
            runs: Arc::new(runs),
            bias,
            alibi,
        })
    }
}

/// (B, H, Q, d_h) q, (B, H, C, d_h) k and v (slot columns first), the extra logit z (H; −inf
/// for none) → (B, H, Q, d_h). Only where [`choose_on`] chose a half.
pub fn forward(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, z: Tensor<1>, plan: &Plan) -> Tensor<4> {
    #[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
    {
        let dh = q.dims()[3];
        let args = super::attention_op::AttnArgs {
            scale: 1.0 / (dh as f32).sqrt(),
            runs: plan.runs.clone(),
            bias: plan.bias.clone(),
            alibi: plan.alibi.clone(),
            tiles: Tiles::Auto,
        };
        super::attention_op::attention(q, k, v, z, args)
    }
    #[cfg(not(any(feature = "flex", feature = "wgpu", feature = "cuda")))]
    {
        let _ = (q, k, v, z, plan);
        unreachable!("no backend is compiled in")
    }
}

/// For each block of `rows` query rows, at most two runs of key tiles (of `bc` columns) that
/// hold a visible column of one of its rows: the union of the rows' first runs and of their
/// second runs, merged when they touch. (nqb × 4) `[t0, t1, t2, t3]`.
pub fn query_block_tiles(runs: &[[[u32; 2]; 2]], rows: usize, bc: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(runs.len().div_ceil(rows) * 4);
    for block in runs.chunks(rows) {
        let mut span = [[u32::MAX, 0u32]; 2];
        for row in block {
            for (r, &[a, b]) in row.iter().enumerate() {
                if a < b {
                    span[r][0] = span[r][0].min(a);
                    span[r][1] = span[r][1].max(b);
                }
            }
        }
        let tiles = |[a, b]: [u32; 2]| {
            if a < b {
                [a as usize / bc, (b as usize).div_ceil(bc)]
            } else {
                [0, 0]
            }
        };
        let (mut x, mut y) = (tiles(span[0]), tiles(span[1]));
        if x[0] == x[1] {
            std::mem::swap(&mut x, &mut y);
        }
        if y[0] < y[1] && y[0] <= x[1] && x[0] <= y[1] {
            x = [x[0].min(y[0]), x[1].max(y[1])];
            y = [0, 0];
        }
        out.extend([x[0], x[1], y[0], y[1]].map(|t| t as i32));
    }
    out
}

/// For each block of `rows` key columns (of C), the run of query tiles (of `bc` rows) holding
/// a row that sees one of its keys: the first to the last such tile. (nkb × 2).
pub fn key_block_tiles(runs: &[[[u32; 2]; 2]], c: usize, rows: usize, bc: usize) -> Vec<i32> {
    let nkb = c.div_ceil(rows);
    let mut span = vec![[usize::MAX, 0usize]; nkb];
    for (i, row) in runs.iter().enumerate() {
        let t = i / bc;
        for &[a, b] in row {
            if a < b {
                let blocks = (a as usize / rows)..(b as usize).div_ceil(rows);
                for s in &mut span[blocks] {
                    s[0] = s[0].min(t);
                    s[1] = s[1].max(t + 1);
                }
            }
        }
    }
    span.iter()
        .flat_map(|&[a, b]| if a < b { [a as i32, b as i32] } else { [0, 0] })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causal(n: usize, slots: usize) -> Vec<[[u32; 2]; 2]> {
        (0..n)
            .map(|i| [[0, (slots + i + 1) as u32], [0, 0]])
            .collect()
    }

    /// A causal block stops at its last row's diagonal; a sinks + window block visits the
    /// sink tile and the window's tiles, not what lies between.
    #[test]
    fn query_blocks_visit_only_tiles_with_a_visible_column() {
        let t = query_block_tiles(&causal(130, 0), 64, 32);
        assert_eq!(t, vec![0, 2, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0]);
        // sinks (1 key) + a window of 8 over 200 rows, blocks of 16, tiles of 16
        let runs: Vec<[[u32; 2]; 2]> = (0..200u32)
            .map(|i| {
                let lo = (i + 1).saturating_sub(8).max(1);
                if lo <= 1 {
                    [[0, i + 1], [0, 0]]
                } else {
                    [[0, 1], [lo, i + 1]]
                }
            })
            .collect();
        let t = query_block_tiles(&runs, 16, 16);
        assert_eq!(&t[0..4], &[0, 1, 0, 0]); // rows 0..16: keys 0..16
        assert_eq!(&t[40..44], &[0, 1, 9, 11]); // rows 160..176: key 0, keys 153..176
    }

    /// A causal key block is seen from its own query tile to the last.
    #[test]
    fn key_blocks_visit_the_query_tiles_that_see_them() {
        let t = key_block_tiles(&causal(100, 2), 102, 32, 16);
        // key block 0 (keys 0..32, with the 2 slots): every tile; block 3 (keys 96..102):
        // rows 94.. → tiles 5..7
        assert_eq!(&t[0..2], &[0, 7]);
        assert_eq!(&t[6..8], &[5, 7]);
    }
}
