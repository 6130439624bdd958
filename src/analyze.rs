//! `sinklab analyze` and `sinklab dark`: look inside a trained checkpoint (REFERENCE §4, §7).
//!
//! Everything works on any sinklab checkpoint: non-softmax normalisers are read through their
//! proxy (the metric is then Sink*), slots and sink tokens are reported as slot mass. Results go
//! to `analysis.json` / `dark.json` and PNG plots in the output directory, and optionally to the
//! run's TensorBoard (tags `analyze/...` and `dark/...` at the checkpoint's step).
//!
//! Definitions beyond `metrics`:
//! - probe kinds (Gu et al. Table 1): `natural` = validation windows; `random` = tokens drawn
//!   uniformly from the vocabulary without the special tokens; `repeated` = one such token
//!   repeated (a different one per sequence); BOS first when the run trains with BOS;
//! - q·k geometry per (layer, head), queries t ≥ 1 (0-based): for the first key
//!   `mean_t cos(q_t, k_0)` and `mean_t ‖q_t‖‖k_0‖/√d_h`, against the mean over the other
//!   visible keys `1 ≤ j ≤ t`; the logit is their product;
//! - attention bars ("HMLV" tokens, Cancedda §7): key position k ≥ 1 of a sequence in head
//!   (l, h) whose received attention from the later queries `t ∈ (k, T)` (at least
//!   `bar_min_queries` of them) has mean > `bar_mean` and standard deviation < `bar_std`;
//! - massive channels: for each layer, how often each channel holds a massive activation
//!   (|x| > 100 and ≥ 1000 × the sequence's median |h|), and the channels with the largest
//!   max |h| with the share of those maxima found at token 1.

use crate::config::Experiment;
use crate::dark::{self, Bands};
use crate::data::{Batch, Dataset};
use crate::metrics::{Array, LayerArrays, Proxy, SinkReport, eps_name};
use crate::model::{Lm, StreamFilter};
use crate::plot::{self, Bars, Heatmap, LinePlot, Series};
use crate::tensorboard::EventWriter;
use crate::train::{self, OpenRun};
use anyhow::{Context, Result, bail};
use burn::tensor::{Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Options of `sinklab analyze`.
#[derive(Debug, Clone)]
pub struct AnalyzeOptions {
    pub sequences: usize,
    /// Probe length T (capped at model.ctx).
    pub len: usize,
    pub eps: Vec<f64>,
    pub k_max: usize,
    /// (layer, head) attention maps to draw; empty = per layer the head with the highest
    /// first-token importance.
    pub maps: Vec<(usize, usize)>,
    /// Input of the attention maps; None = the first natural probe sequence.
    pub map_text: Option<String>,
    pub bar_mean: f64,
    pub bar_std: f64,
    pub bar_min_queries: usize,
    pub bands: usize,
    pub out: Option<PathBuf>,
    pub tensorboard: bool,
    pub seed: u64,
}

/// Where figures and JSON go, and the optional TensorBoard writer.
struct Sink {
    dir: PathBuf,
    tb: Option<EventWriter>,
    step: i64,
    files: Vec<String>,
}

impl Sink {
    fn new(dir: PathBuf, tb: bool, run_dir: &Path, step: u64) -> Result<Self> {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let tb = if tb {
            Some(EventWriter::create(&run_dir.join("tb"))?)
        } else {
            None
        };
        Ok(Self {
            dir,
            tb,
            step: step as i64,
            files: Vec::new(),
        })
    }

    fn png(&mut self, name: &str, tag: &str, png: Vec<u8>) -> Result<()> {
        plot::save(&self.dir.join(name), &png)?;
        if let Some(tb) = &mut self.tb {
            let (w, h) = plot::png_size(&png)?;
            tb.add_png(tag, self.step, w, h, png)?;
        }
        self.files.push(name.to_string());
        Ok(())
    }

    fn scalars(&mut self, prefix: &str, values: &[(String, f64)]) -> Result<()> {
        if let Some(tb) = &mut self.tb {
            let named: Vec<(String, f64)> = values
                .iter()
                .filter(|(_, v)| v.is_finite())
                .map(|(k, v)| (format!("{prefix}/{k}"), *v))
                .collect();
            tb.add_scalars(self.step, &named)?;
        }
        Ok(())
    }

    fn json(&mut self, name: &str, value: &Value) -> Result<()> {
        let path = self.dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(value)?)
            .with_context(|| format!("writing {}", path.display()))?;
        self.files.push(name.to_string());
        if let Some(tb) = &mut self.tb {
            tb.flush()?;
        }
        Ok(())
    }
}

fn batch_of(seqs: Vec<Vec<u32>>) -> Batch {
    let n = seqs.len();
    let len = seqs[0].len();
    Batch {
        batch: n,
        len,
        inputs: seqs.into_iter().flatten().collect(),
        targets: vec![0; n * len],
        loss_mask: vec![0.0; n * len],
        domains: vec![0; n],
    }
}

/// The three probe kinds (natural, random, repeated), `n` sequences of `len` tokens.
pub fn probe_batches(
    data: &Dataset,
    n: usize,
    len: usize,
    bos: bool,
    seed: u64,
) -> Result<Vec<(&'static str, Batch)>> {
    let natural = crate::data::validation_batch(data, n, len, bos)?;
    let v = data.vocab_size() as u32;
    let special = [data.tokenizer.bos_id, data.tokenizer.eot_id];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let token = |rng: &mut ChaCha8Rng| loop {
        let t = rng.gen_range(0..v);
        if !special.contains(&t) {
            break t;
        }
    };
    let start = |s: &mut Vec<u32>| {
        if bos {
            s.push(data.tokenizer.bos_id);
        }
    };
    let random = (0..n)
        .map(|_| {
            let mut s = Vec::with_capacity(len);
            start(&mut s);
            while s.len() < len {
                s.push(token(&mut rng));
            }
            s
        })
        .collect();
    let repeated = (0..n)
        .map(|_| {
            let mut s = Vec::with_capacity(len);
            start(&mut s);
            let t = token(&mut rng);
            s.resize(len, t);
            s
        })
        .collect();
    Ok(vec![
        ("natural", natural),
        ("random", batch_of(random)),
        ("repeated", batch_of(repeated)),
    ])
}

/// q·k geometry of one head (see the module docs).
#[derive(Debug, Clone, Serialize)]
pub struct QkHead {
    pub cos_first: f64,
    pub cos_rest: f64,
    pub norm_first: f64,
    pub norm_rest: f64,
}

/// Row `i` of the (T, d_h) block starting at `base`.
fn row(x: &Array, base: usize, i: usize, dh: usize) -> &[f32] {
    &x.data[base + i * dh..base + (i + 1) * dh]
}

/// q·k geometry of every head of one layer from queries and keys (B, H, T, d_h).
pub fn qk_geometry(q: &Array, k: &Array) -> Vec<QkHead> {
    let [b, h, t, dh] = q.shape[..] else {
        panic!("queries must be (B, H, T, d_h)")
    };
    let norm = |x: &[f32]| x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
    let scale = (dh as f64).sqrt();
    (0..h)
        .map(|hi| {
            let (mut cf, mut nf, mut cr, mut nr, mut n1, mut n2) = (0.0, 0.0, 0.0, 0.0, 0, 0);
            for bi in 0..b {
                let base = (bi * h + hi) * t * dh;
                let kn: Vec<f64> = (0..t).map(|j| norm(row(k, base, j, dh))).collect();
                for ti in 1..t {
                    let qt = row(q, base, ti, dh);
                    let qn = norm(qt);
                    for (j, &k_norm) in kn.iter().enumerate().take(ti + 1) {
                        let dot: f64 = qt
                            .iter()
                            .zip(row(k, base, j, dh))
                            .map(|(&a, &c)| a as f64 * c as f64)
                            .sum();
                        let prod = qn * k_norm;
                        let cos = if prod > 0.0 { dot / prod } else { 0.0 };
                        if j == 0 {
                            (cf, nf, n1) = (cf + cos, nf + prod / scale, n1 + 1);
                        } else {
                            (cr, nr, n2) = (cr + cos, nr + prod / scale, n2 + 1);
                        }
                    }
                }
            }
            let (n1, n2) = (n1.max(1) as f64, n2.max(1) as f64);
            QkHead {
                cos_first: cf / n1,
                cos_rest: cr / n2,
                norm_first: nf / n1,
                norm_rest: nr / n2,
            }
        })
        .collect()
}

/// One detected attention bar.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    pub sequence: usize,
    pub layer: usize,
    pub head: usize,
    pub position: usize,
    pub token: u32,
    pub mean: f64,
    pub std: f64,
}

/// Mean and standard deviation of the attention key k receives from queries t ∈ (k, T), for
/// every key of one (sequence, head) block `a` (T × T); None where fewer than `min_q` queries.
pub fn received_stats(a: &[f32], t: usize, min_q: usize) -> Vec<Option<(f64, f64)>> {
    (0..t)
        .map(|k| {
            let n = t - k - 1;
            if n < min_q.max(1) {
                return None;
            }
            let xs = (k + 1..t).map(|q| a[q * t + k] as f64);
            let mean = xs.clone().sum::<f64>() / n as f64;
            let var = xs.map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
            Some((mean, var.sqrt()))
        })
        .collect()
}

/// Attention bars of one layer's attention (B, H, T, T) (see the module docs).
pub fn find_bars(
    attn: &Array,
    layer: usize,
    tokens: &[u32],
    mean_min: f64,
    std_max: f64,
    min_q: usize,
) -> Vec<Bar> {
    let [b, h, t, _] = attn.shape[..] else {
        panic!("attention must be (B, H, T, T)")
    };
    let mut out = Vec::new();
    for bi in 0..b {
        for hi in 0..h {
            let block = &attn.data[(bi * h + hi) * t * t..(bi * h + hi + 1) * t * t];
            for (k, s) in received_stats(block, t, min_q).into_iter().enumerate() {
                if let Some((mean, std)) = s
                    && k >= 1
                    && mean > mean_min
                    && std < std_max
                {
                    out.push(Bar {
                        sequence: bi,
                        layer,
                        head: hi,
                        position: k,
                        token: tokens[bi * t + k],
                        mean,
                        std,
                    });
                }
            }
        }
    }
    out
}

/// Per-position mean hidden-state norm `mean_b ‖h_{b,t}‖` of (B, T, D).
pub fn norms_by_position(hidden: &Array) -> Vec<f64> {
    let [b, t, d] = hidden.shape[..] else {
        panic!("hidden must be (B, T, D)")
    };
    (0..t)
        .map(|ti| {
            (0..b)
                .map(|bi| {
                    let x = &hidden.data[(bi * t + ti) * d..(bi * t + ti + 1) * d];
                    x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt()
                })
                .sum::<f64>()
                / b as f64
        })
        .collect()
}

/// Massive-activation channel counts and the channels with the largest max |h| (see the
/// module docs): `(massive: [(channel, count)], top: [(channel, max |h|, share at token 1)])`.
#[allow(clippy::type_complexity)]
pub fn channel_stats(hidden: &Array, top: usize) -> (Vec<(usize, usize)>, Vec<(usize, f64, f64)>) {
    let [b, t, d] = hidden.shape[..] else {
        panic!("hidden must be (B, T, D)")
    };
    let mut massive = vec![0usize; d];
    let mut max_abs = vec![0f64; d];
    let mut at_first = vec![0usize; d];
    for seq in hidden.data.chunks_exact(t * d) {
        let mut abs: Vec<f64> = seq.iter().map(|&x| (x as f64).abs()).collect();
        let mut sorted = abs.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let med = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
        };
        for c in 0..d {
            let (mut best, mut pos) = (0.0, 0);
            for ti in 0..t {
                let x = abs[ti * d + c];
                if x > 100.0 && x >= 1000.0 * med {
                    massive[c] += 1;
                }
                if x > best {
                    (best, pos) = (x, ti);
                }
            }
            max_abs[c] = max_abs[c].max(best);
            at_first[c] += usize::from(pos == 0);
        }
        abs.clear();
    }
    let mut m: Vec<(usize, usize)> = massive
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| (c, *n))
        .collect();
    m.sort_by_key(|b| std::cmp::Reverse(b.1));
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&a, &c| max_abs[c].total_cmp(&max_abs[a]));
    let tops = order
        .into_iter()
        .take(top)
        .map(|c| (c, max_abs[c], at_first[c] as f64 / b as f64))
        .collect();
    (m, tops)
}

/// The residual-side unembedding `diag(g) W_U` (d × V, g = the final norm's gain) and the
/// embedding `Eᵀ` (d × V) as f64 host matrices.
pub fn unembedding_and_embedding(model: &Lm) -> (Vec<f64>, Vec<f64>, usize, usize) {
    let host = |t: Tensor<2>| -> Vec<f64> {
        t.into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("f32")
            .into_iter()
            .map(f64::from)
            .collect()
    };
    let [v, d] = model.embed.dims();
    let e_t = host(model.embed.val().transpose()); // (d, V)
    let mut w_u = match &model.head {
        Some(h) => host(h.matrix()), // (d, V)
        None => e_t.clone(),
    };
    if let Some(n) = &model.norm_f {
        let g = host(n.gain.val().unsqueeze::<2>());
        for (i, gi) in g.iter().enumerate() {
            w_u[i * v..(i + 1) * v].iter_mut().for_each(|x| *x *= gi);
        }
    }
    (w_u, e_t, d, v)
}

fn kind_summary(report: &SinkReport, proxy: Proxy) -> Value {
    json!({
        "metric": if proxy == Proxy::Weights { "Sink" } else { "Sink*" },
        "sink_rate": report.sink_rate,
        "slot_rate": report.slot_rate,
        "slot_mass": report.slot_mass,
        "first_token_mass": report.first_mass,
        "f_attn": report.f_attn(),
        "m_act": report.m_act(),
        "entropy": report.entropy,
    })
}

fn hidden_inputs(model: &Lm, batch: &Batch, chunk: usize, run: &OpenRun) -> Vec<Array> {
    let model = burn::module::Module::valid(model);
    let mut parts: Vec<Vec<Array>> = Vec::new();
    let mut from = 0;
    while from < batch.batch {
        let to = (from + chunk).min(batch.batch);
        let ids: Vec<i64> = batch.inputs[from * batch.len..to * batch.len]
            .iter()
            .map(|&x| x as i64)
            .collect();
        let x =
            Tensor::<2, Int>::from_data(TensorData::new(ids, [to - from, batch.len]), &run.device);
        parts.push(
            model
                .hidden_states(x)
                .into_iter()
                .map(train::to_array)
                .collect(),
        );
        from = to;
    }
    (0..parts[0].len())
        .map(|l| {
            let mut shape = parts[0][l].shape.clone();
            shape[0] = batch.batch;
            Array::new(
                shape,
                parts
                    .iter()
                    .flat_map(|p| p[l].data.iter().copied())
                    .collect(),
            )
        })
        .collect()
}

fn token_text(data: &Dataset, t: u32) -> String {
    data.tokenizer
        .decode(&[t])
        .map(|s| format!("{s:?}"))
        .unwrap_or_else(|_| format!("#{t}"))
}

/// Run `sinklab analyze`; prints the summary and returns the JSON written.
pub fn analyze(run: &OpenRun, o: &AnalyzeOptions, log: &mut dyn FnMut(&str)) -> Result<Value> {
    let exp: &Experiment = &run.exp;
    let model = &run.model;
    let ctx = exp.model.ctx;
    if o.len < 2 || o.sequences == 0 {
        bail!("--len must be ≥ 2 and --sequences ≥ 1");
    }
    let len = o.len.min(ctx);
    if len < o.len {
        log(&format!(
            "probe length {} capped at model.ctx = {ctx}",
            o.len
        ));
    }
    let k_max = o.k_max.min(len);
    let (n_layers, n_heads) = (exp.model.n_layers, exp.model.n_heads);
    for &(l, h) in &o.maps {
        if l >= n_layers || h >= n_heads {
            bail!("--map {l}:{h}: the model has layers 0..{n_layers} and heads 0..{n_heads}");
        }
    }
    let dir = o.out.clone().unwrap_or_else(|| {
        run.run_dir
            .join("analysis")
            .join(format!("step_{:08}", run.state.step))
    });
    let mut sink = Sink::new(dir, o.tensorboard, &run.run_dir, run.state.step)?;
    let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
    let chunk = exp.train.micro_batch.max(1);
    let kinds = probe_batches(&run.data, o.sequences, len, exp.data.bos, o.seed)?;
    let mut by_kind = serde_json::Map::new();
    let mut natural: Option<(Vec<LayerArrays>, SinkReport, Batch)> = None;
    let mut sink_series = Vec::new();
    for (name, batch) in kinds {
        log(&format!("probe {name}: {} × {len}", batch.batch));
        let layers = train::probe_layers(
            model,
            &batch,
            chunk,
            proxy,
            &run.device,
            None,
            name == "natural",
        );
        let report = SinkReport::compute(&layers, &o.eps, k_max);
        by_kind.insert(name.into(), kind_summary(&report, proxy));
        sink.scalars(&format!("analyze/{name}"), &report.scalars())?;
        if let Some(r) = report.sink_rate.get(&eps_name(0.3)) {
            sink_series.push(Series {
                name: name.to_string(),
                points: r
                    .iter()
                    .enumerate()
                    .map(|(k, v)| ((k + 1) as f64, *v))
                    .collect(),
                err: None,
            });
        }
        if name == "natural" {
            natural = Some((layers, report, batch));
        }
    }
    let (layers, report, batch) = natural.expect("the natural probe always runs");
    let star = if proxy == Proxy::Weights { "" } else { "*" };
    if !sink_series.is_empty() {
        let png = plot::lines(&LinePlot {
            title: &format!("Sink_k{star} (ε = 0.3), {} × {len} probe", o.sequences),
            x_label: "k (key position, 1-based)",
            y_label: "% of (layer, head, sequence)",
            series: &sink_series,
            log_x: false,
            log_y: false,
            hlines: &[],
            markers: true,
        })?;
        sink.png("sink_k.png", "analyze/sink_k", png)?;
    }
    // First-token importance heat map.
    let png = plot::heatmap(&Heatmap {
        title: &format!("first-token importance α₁{star} (natural text)"),
        x_label: "head",
        y_label: "layer",
        rows: &report.importance_first,
        x_ticks: None,
        y_ticks: None,
        range: Some((0.0, 1.0)),
        annotate: true,
    })?;
    sink.png("importance_first.png", "analyze/importance_first", png)?;
    // Activations.
    let inputs = hidden_inputs(model, &batch, chunk, run);
    let by_pos: Vec<Vec<f64>> = layers
        .iter()
        .map(|l| norms_by_position(&l.hidden))
        .collect();
    let png = plot::heatmap(&Heatmap {
        title: "mean ‖h‖ by layer output and position (natural text)",
        x_label: "position",
        y_label: "layer",
        rows: &by_pos,
        x_ticks: None,
        y_ticks: None,
        range: None,
        annotate: false,
    })?;
    sink.png("norms_by_position.png", "analyze/norms_by_position", png)?;
    let per_layer = |f: &dyn Fn(usize) -> f64| -> Vec<(f64, f64)> {
        (0..n_layers).map(|l| (l as f64, f(l))).collect()
    };
    let act_series = vec![
        Series {
            name: "‖h‖ token 1".into(),
            points: per_layer(&|l| report.hidden[l].norm_first),
            err: None,
        },
        Series {
            name: "‖h‖ other tokens".into(),
            points: per_layer(&|l| report.hidden[l].norm_rest),
            err: None,
        },
        Series {
            name: "top-1 |h|".into(),
            points: per_layer(&|l| report.hidden[l].top3[0]),
            err: None,
        },
        Series {
            name: "median |h|".into(),
            points: per_layer(&|l| report.hidden[l].median_abs),
            err: None,
        },
    ];
    let png = plot::lines(&LinePlot {
        title: "residual stream by layer (natural text)",
        x_label: "layer (block output)",
        y_label: "magnitude",
        series: &act_series,
        log_x: false,
        log_y: true,
        hlines: &[],
        markers: true,
    })?;
    sink.png("activations.png", "analyze/activations", png)?;
    let mut activations = Vec::new();
    for (l, la) in layers.iter().enumerate() {
        let (massive, top) = channel_stats(&la.hidden, 5);
        let hs = &report.hidden[l];
        activations.push(json!({
            "layer": l,
            "norm_first": hs.norm_first, "norm_rest": hs.norm_rest, "norm_ratio": hs.norm_ratio,
            "top3": hs.top3, "median_abs": hs.median_abs, "massive_count": hs.massive_count,
            "massive_channels": massive.iter().take(8).map(|(c, n)| json!({"channel": c, "count": n})).collect::<Vec<_>>(),
            "top_channels": top.iter().map(|(c, m, f)| json!({"channel": c, "max_abs": m, "share_at_token1": f})).collect::<Vec<_>>(),
            "key_norm_first": report.key_norms[l].0, "key_norm_rest": report.key_norms[l].1,
            "value_norm_first": report.value_norms[l].0, "value_norm_rest": report.value_norms[l].1,
            "norm_by_position": by_pos[l],
        }));
    }
    // q·k geometry.
    let qk: Vec<Vec<QkHead>> = layers
        .iter()
        .map(|l| {
            qk_geometry(
                l.queries.as_ref().expect("natural probe records queries"),
                &l.keys,
            )
        })
        .collect();
    let mean_heads = |l: usize, f: &dyn Fn(&QkHead) -> f64| {
        qk[l].iter().map(f).sum::<f64>() / qk[l].len() as f64
    };
    let qk_cos = vec![
        Series {
            name: "cos(q_t, k_1)".into(),
            points: per_layer(&|l| mean_heads(l, &|h| h.cos_first)),
            err: None,
        },
        Series {
            name: "cos(q_t, k_j), j > 1".into(),
            points: per_layer(&|l| mean_heads(l, &|h| h.cos_rest)),
            err: None,
        },
    ];
    let qk_norm = vec![
        Series {
            name: "‖q_t‖‖k_1‖/√d_h".into(),
            points: per_layer(&|l| mean_heads(l, &|h| h.norm_first)),
            err: None,
        },
        Series {
            name: "‖q_t‖‖k_j‖/√d_h, j > 1".into(),
            points: per_layer(&|l| mean_heads(l, &|h| h.norm_rest)),
            err: None,
        },
    ];
    let png = plot::lines(&LinePlot {
        title: "angle of the first-token logit (mean over heads)",
        x_label: "layer",
        y_label: "mean cosine",
        series: &qk_cos,
        log_x: false,
        log_y: false,
        hlines: &[],
        markers: true,
    })?;
    sink.png("qk_cos.png", "analyze/qk_cos", png)?;
    let png = plot::lines(&LinePlot {
        title: "norm of the first-token logit (mean over heads)",
        x_label: "layer",
        y_label: "‖q‖‖k‖/√d_h",
        series: &qk_norm,
        log_x: false,
        log_y: false,
        hlines: &[],
        markers: true,
    })?;
    sink.png("qk_norm.png", "analyze/qk_norm", png)?;
    // Attention bars and their dark ratio (W_U bands).
    let (w_u, _, d, v) = unembedding_and_embedding(model);
    let bands = Bands::from_matrix(&w_u, d, v, o.bands.min(d));
    let dark_of = |l: usize, b: usize, t: usize| -> f64 {
        let x = &inputs[l];
        let (tt, dd) = (x.shape[1], x.shape[2]);
        let h: Vec<f64> = x.data[(b * tt + t) * dd..(b * tt + t + 1) * dd]
            .iter()
            .map(|&z| z as f64)
            .collect();
        bands.dark_ratio(&h)
    };
    let mut bars: Vec<Bar> = Vec::new();
    for (l, la) in layers.iter().enumerate() {
        bars.extend(find_bars(
            &la.attn,
            l,
            &batch.inputs,
            o.bar_mean,
            o.bar_std,
            o.bar_min_queries,
        ));
    }
    let mut per_token: std::collections::BTreeMap<u32, (usize, f64)> = Default::default();
    for b in &bars {
        let e = per_token.entry(b.token).or_default();
        e.0 += 1;
        e.1 += dark_of(b.layer, b.sequence, b.position);
    }
    let mut tokens: Vec<(u32, usize, f64)> = per_token
        .into_iter()
        .map(|(t, (n, dr))| (t, n, dr / n as f64))
        .collect();
    tokens.sort_by_key(|b| std::cmp::Reverse(b.1));
    let mean_dark = |pos: &dyn Fn(usize) -> bool| -> Vec<f64> {
        (0..n_layers)
            .map(|l| {
                let (bn, tn) = (batch.batch, batch.len);
                let mut s = 0.0;
                let mut n = 0;
                for b in 0..bn {
                    for t in (0..tn).filter(|&t| pos(t)) {
                        s += dark_of(l, b, t);
                        n += 1;
                    }
                }
                s / n.max(1) as f64
            })
            .collect()
    };
    let dark_first = mean_dark(&|t| t == 0);
    let dark_rest = mean_dark(&|t| t > 0);
    let bar_dark = if bars.is_empty() {
        None
    } else {
        Some(
            bars.iter()
                .map(|b| dark_of(b.layer, b.sequence, b.position))
                .sum::<f64>()
                / bars.len() as f64,
        )
    };
    let mut counts = vec![vec![0.0; n_heads]; n_layers];
    for b in &bars {
        counts[b.layer][b.head] += 1.0 / o.sequences as f64;
    }
    // The bar plot: the (sequence, layer, head) with the most bars, else the head with the
    // highest first-token importance on sequence 0.
    let (bs, bl, bh) = {
        let mut best = std::collections::HashMap::new();
        for b in &bars {
            *best.entry((b.sequence, b.layer, b.head)).or_insert(0) += 1;
        }
        best.into_iter()
            .max_by_key(|(k, n)| (*n, std::cmp::Reverse(*k)))
            .map(|(k, _)| k)
            .unwrap_or_else(|| {
                let (l, h) = argmax2(&report.importance_first);
                (0, l, h)
            })
    };
    {
        let t = batch.len;
        let block =
            &layers[bl].attn.data[(bs * n_heads + bh) * t * t..(bs * n_heads + bh + 1) * t * t];
        let stats = received_stats(block, t, o.bar_min_queries);
        let shown: Vec<usize> = (0..t).filter(|&k| stats[k].is_some()).collect();
        let labels: Vec<String> = shown
            .iter()
            .map(|&k| format!("{k}:{}", token_text(&run.data, batch.inputs[bs * t + k])))
            .collect();
        let values: Vec<f64> = shown.iter().map(|&k| stats[k].expect("shown").0).collect();
        let err: Vec<f64> = shown.iter().map(|&k| stats[k].expect("shown").1).collect();
        let highlight: Vec<bool> = shown
            .iter()
            .map(|&k| {
                bars.iter()
                    .any(|b| (b.sequence, b.layer, b.head, b.position) == (bs, bl, bh, k))
            })
            .collect();
        let png = plot::bars(&Bars {
            title: &format!(
                "attention received (mean ± std over later queries), layer {bl} head {bh}, \
                 sequence {bs}; bars: mean > {} and std < {}",
                o.bar_mean, o.bar_std
            ),
            x_label: "key position:token",
            y_label: "attention received",
            labels: &labels,
            values: &values,
            err: Some(&err),
            highlight: &highlight,
        })?;
        sink.png("attention_bars.png", "analyze/attention_bars", png)?;
    }
    // Attention maps.
    let map_tokens: Vec<u32> = match &o.map_text {
        Some(text) => {
            let mut ids = Vec::new();
            if exp.data.bos {
                ids.push(run.data.tokenizer.bos_id);
            }
            ids.extend(run.data.tokenizer.encode(text)?);
            ids.truncate(ctx);
            if ids.len() < 2 {
                bail!("--map-text encodes to fewer than 2 tokens");
            }
            ids
        }
        None => batch.inputs[..batch.len].to_vec(),
    };
    let maps: Vec<(usize, usize)> = if o.maps.is_empty() {
        report
            .importance_first
            .iter()
            .enumerate()
            .map(|(l, heads)| (l, argmax(heads)))
            .collect()
    } else {
        o.maps.clone()
    };
    let map_batch = batch_of(vec![map_tokens.clone()]);
    let map_layers = train::probe_layers(model, &map_batch, 1, proxy, &run.device, None, false);
    let t = map_tokens.len();
    let ticks: Vec<String> = map_tokens
        .iter()
        .map(|&x| token_text(&run.data, x))
        .collect();
    let mut map_files = Vec::new();
    for &(l, h) in &maps {
        let a = &map_layers[l].attn.data[h * t * t..(h + 1) * t * t];
        let rows: Vec<Vec<f64>> = a
            .chunks_exact(t)
            .enumerate()
            .map(|(q, r)| {
                r.iter()
                    .enumerate()
                    .map(|(k, &x)| if k <= q { x as f64 } else { f64::NAN })
                    .collect()
            })
            .collect();
        let name = format!("attention_l{l:02}_h{h:02}.png");
        let png = plot::heatmap(&Heatmap {
            title: &format!("attention{star}, layer {l} head {h}"),
            x_label: "key",
            y_label: "query",
            rows: &rows,
            x_ticks: Some(&ticks),
            y_ticks: Some(&ticks),
            range: Some((0.0, 1.0)),
            annotate: false,
        })?;
        sink.png(&name, &format!("analyze/attention_l{l:02}_h{h:02}"), png)?;
        map_files.push(json!({"layer": l, "head": h, "file": name}));
    }
    let value = json!({
        "run_dir": run.run_dir,
        "checkpoint": run.checkpoint,
        "step": run.state.step,
        "probe": {"sequences": o.sequences, "len": len, "bos": exp.data.bos, "eps": o.eps, "k_max": k_max, "seed": o.seed},
        "metric": if proxy == Proxy::Weights { "Sink" } else { "Sink*" },
        "kinds": by_kind,
        "importance_first": report.importance_first,
        "activations": activations,
        "qk": qk,
        "bars": {
            "thresholds": {"mean_gt": o.bar_mean, "std_lt": o.bar_std, "min_queries": o.bar_min_queries},
            "per_sequence_by_layer_head": counts,
            "total": bars.len(),
            "tokens": tokens.iter().take(20).map(|(t, n, dr)| json!({"token": t, "text": token_text(&run.data, *t), "count": n, "dark_ratio": dr})).collect::<Vec<_>>(),
            "dark_ratio_bars": bar_dark,
            "dark_ratio_first_by_layer": dark_first,
            "dark_ratio_rest_by_layer": dark_rest,
            "bands": bands.n_bands(),
        },
        "attention_maps": map_files,
        "files": sink.files.clone(),
    });
    sink.json("analysis.json", &value)?;
    print_summary(&value, &o.eps, k_max, &sink.dir);
    Ok(value)
}

fn argmax(xs: &[f64]) -> usize {
    xs.iter()
        .enumerate()
        .fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &v)| {
            if v > bv { (i, v) } else { (bi, bv) }
        })
        .0
}

fn argmax2(rows: &[Vec<f64>]) -> (usize, usize) {
    let l = argmax(&rows.iter().map(|r| r[argmax(r)]).collect::<Vec<_>>());
    (l, argmax(&rows[l]))
}

fn print_summary(v: &Value, eps: &[f64], k_max: usize, dir: &Path) {
    let metric = v["metric"].as_str().unwrap_or("Sink");
    println!(
        "{metric}_k^eps (%), {} sequences × {} tokens (BOS: {})",
        v["probe"]["sequences"], v["probe"]["len"], v["probe"]["bos"]
    );
    for kind in ["natural", "random", "repeated"] {
        let k = &v["kinds"][kind];
        println!("\n{kind}:");
        print!("{:>6}", "eps");
        for i in 1..=k_max {
            print!("{:>7}", format!("k={i}"));
        }
        println!();
        for e in eps {
            print!("{:>6}", eps_name(*e));
            if let Some(rates) = k["sink_rate"][eps_name(*e)].as_array() {
                for r in rates {
                    print!("{:>7.1}", r.as_f64().unwrap_or(f64::NAN));
                }
            }
            println!();
        }
        if let Some(slot) = k["slot_rate"].as_object().filter(|m| !m.is_empty()) {
            let parts: Vec<String> = slot
                .iter()
                .map(|(e, r)| format!("eps {e}: {:.1}", r.as_f64().unwrap_or(f64::NAN)))
                .collect();
            println!("slot Sink1* (%): {}", parts.join("  "));
        }
        println!(
            "F-Attn {:.3} | M-Act {:.2}",
            k["f_attn"].as_f64().unwrap_or(f64::NAN),
            k["m_act"].as_f64().unwrap_or(f64::NAN)
        );
    }
    println!(
        "\nlayer | ‖h1‖/‖h_rest‖ | top1 |h| | median |h| | massive | cos(q,k1) vs rest | ‖q‖‖k1‖ vs rest"
    );
    if let (Some(acts), Some(qk)) = (v["activations"].as_array(), v["qk"].as_array()) {
        for (a, heads) in acts.iter().zip(qk) {
            let heads = heads.as_array().map(Vec::as_slice).unwrap_or(&[]);
            let m = |key: &str| {
                heads.iter().filter_map(|h| h[key].as_f64()).sum::<f64>()
                    / heads.len().max(1) as f64
            };
            println!(
                "{:>5} | {:>13.2} | {:>8.2} | {:>10.3} | {:>7.1} | {:>6.3} vs {:>6.3} | {:>6.2} vs {:>6.2}",
                a["layer"].as_u64().unwrap_or(0),
                a["norm_ratio"].as_f64().unwrap_or(f64::NAN),
                a["top3"][0].as_f64().unwrap_or(f64::NAN),
                a["median_abs"].as_f64().unwrap_or(f64::NAN),
                a["massive_count"].as_f64().unwrap_or(f64::NAN),
                m("cos_first"),
                m("cos_rest"),
                m("norm_first"),
                m("norm_rest")
            );
        }
    }
    let b = &v["bars"];
    println!(
        "\nattention bars (mean > {}, std < {}): {} found; dark ratio of bar tokens {}",
        b["thresholds"]["mean_gt"],
        b["thresholds"]["std_lt"],
        b["total"],
        b["dark_ratio_bars"]
            .as_f64()
            .map_or("-".to_string(), |x| format!("{x:.3}"))
    );
    println!("results: {}", dir.display());
}

/// Options of `sinklab dark`.
#[derive(Debug, Clone)]
pub struct DarkOptions {
    pub bands: usize,
    /// Block inputs to filter (0..=L; L = before the final norm); None = every one.
    pub layers: Option<Vec<usize>>,
    /// Values of k for the Φ / Ω / random sweeps; empty = 1..=bands.
    pub ks: Vec<usize>,
    pub both_cos: f64,
    /// Validation sequences for ΔNLL (default: train.eval_sequences).
    pub sequences: Option<usize>,
    /// Probe sequences for Sink₁ under each filter.
    pub probe_sequences: usize,
    pub probe_len: usize,
    pub out: Option<PathBuf>,
    pub tensorboard: bool,
    pub seed: u64,
}

/// One filter's effect.
#[derive(Debug, Clone, Serialize)]
pub struct FilterResult {
    pub filter: String,
    pub k: Option<usize>,
    pub nll: f64,
    pub delta_nll: f64,
    pub sink1: Option<f64>,
}

fn stream_filter(m: &[f64], d: usize, layers: &[usize], run: &OpenRun) -> StreamFilter {
    let data: Vec<f32> = m.iter().map(|&x| x as f32).collect();
    StreamFilter {
        layers: layers.to_vec(),
        matrix: Tensor::from_data(TensorData::new(data, [d, d]), &run.device),
    }
}

/// Run `sinklab dark`; prints the summary and returns the JSON written.
pub fn dark(run: &OpenRun, o: &DarkOptions, log: &mut dyn FnMut(&str)) -> Result<Value> {
    let exp = &run.exp;
    let model = &run.model;
    let n_layers = exp.model.n_layers;
    let (w_u, e_t, d, v) = unembedding_and_embedding(model);
    let n_bands = o.bands;
    if !(2..=d).contains(&n_bands) {
        bail!("--bands {n_bands}: need 2 ≤ bands ≤ d_model = {d}");
    }
    let layers: Vec<usize> = o.layers.clone().unwrap_or_else(|| (0..=n_layers).collect());
    if let Some(&bad) = layers.iter().find(|&&l| l > n_layers) {
        bail!(
            "--layer {bad}: valid block inputs are 0..={n_layers} ({n_layers} = before the final norm), or `all`"
        );
    }
    let ks: Vec<usize> = if o.ks.is_empty() {
        (1..=n_bands).collect()
    } else {
        o.ks.clone()
    };
    if let Some(&bad) = ks.iter().find(|&&k| k > n_bands) {
        bail!("--k {bad} exceeds --bands {n_bands}");
    }
    log("SVD of W_U and W_E");
    let bu = Bands::from_matrix(&w_u, d, v, n_bands);
    let be = Bands::from_matrix(&e_t, d, v, n_bands);
    let rand_bands = Bands::random(d, n_bands, o.seed);
    let dir = o.out.clone().unwrap_or_else(|| {
        run.run_dir
            .join("analysis")
            .join(format!("step_{:08}", run.state.step))
    });
    let mut sink = Sink::new(dir, o.tensorboard, &run.run_dir, run.state.step)?;
    // Band energy of the residual stream (every block input), first token vs the rest.
    let n_val = o.sequences.unwrap_or(exp.train.eval_sequences);
    let chunk = exp.train.micro_batch.max(1);
    let probe = crate::data::validation_batch(
        &run.data,
        o.probe_sequences,
        o.probe_len.min(exp.model.ctx),
        exp.data.bos,
    )?;
    let inputs = hidden_inputs(model, &probe, chunk, run);
    let mut energy = Vec::new();
    let mut energy_rows_first = Vec::new();
    let mut energy_rows_rest = Vec::new();
    for (l, x) in inputs.iter().enumerate() {
        let [b, t, dd] = x.shape[..] else {
            unreachable!("hidden states are rank 3")
        };
        let mut first = vec![0.0; n_bands];
        let mut rest = vec![0.0; n_bands];
        let (mut dr_first, mut dr_rest) = (0.0, 0.0);
        for bi in 0..b {
            for ti in 0..t {
                let h: Vec<f64> = x.data[(bi * t + ti) * dd..(bi * t + ti + 1) * dd]
                    .iter()
                    .map(|&z| z as f64)
                    .collect();
                let e = bu.band_energy(&h);
                let dr = bu.dark_ratio(&h);
                if ti == 0 {
                    first.iter_mut().zip(&e).for_each(|(a, b)| *a += b);
                    dr_first += dr;
                } else {
                    rest.iter_mut().zip(&e).for_each(|(a, b)| *a += b);
                    dr_rest += dr;
                }
            }
        }
        first.iter_mut().for_each(|x| *x /= b as f64);
        rest.iter_mut()
            .for_each(|x| *x /= (b * (t - 1)).max(1) as f64);
        energy.push(json!({
            "layer": l,
            "band_energy_first": first,
            "band_energy_rest": rest,
            "dark_ratio_first": dr_first / b as f64,
            "dark_ratio_rest": dr_rest / (b * (t - 1)).max(1) as f64,
        }));
        energy_rows_first.push(first);
        energy_rows_rest.push(rest);
    }
    for (name, rows, tag) in [
        ("band_energy_first.png", &energy_rows_first, "first token"),
        ("band_energy_rest.png", &energy_rows_rest, "other tokens"),
    ] {
        let png = plot::heatmap(&Heatmap {
            title: &format!(
                "W_U band energy of the residual stream, {tag} (band {n_bands} = dark)"
            ),
            x_label: "band (1 = largest singular values)",
            y_label: "block input (layer)",
            rows,
            x_ticks: Some(&(1..=n_bands).map(|j| j.to_string()).collect::<Vec<_>>()),
            y_ticks: None,
            range: Some((0.0, 1.0)),
            annotate: false,
        })?;
        sink.png(
            name,
            &format!("dark/{}", name.trim_end_matches(".png")),
            png,
        )?;
    }
    // Write weights onto the bands.
    let host = |t: Tensor<2>| -> Vec<f64> {
        t.into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("f32")
            .into_iter()
            .map(f64::from)
            .collect()
    };
    let dh = exp.model.d_head();
    let mut writes = Vec::new();
    for (l, block) in model.blocks.iter().enumerate() {
        let heads: Vec<Vec<f64>> = (0..exp.model.n_heads)
            .map(|h| match &block.attn.wo {
                Some(wo) => {
                    let w = host(wo.matrix()); // (d, d): rows h·d_h.. are head h's writes
                    bu.write_share(&w[h * dh * d..(h + 1) * dh * d], dh)
                }
                None => {
                    let mut w = vec![0.0; dh * d];
                    (0..dh).for_each(|i| w[i * d + h * dh + i] = 1.0);
                    bu.write_share(&w, dh)
                }
            })
            .collect();
        let mlp = block.mlp.as_ref().map(|m| {
            let w = host(m.w_down.matrix()); // (f, d)
            bu.write_share(&w, w.len() / d)
        });
        writes.push(json!({"layer": l, "heads": heads, "mlp": mlp}));
    }
    // Filters.
    let mut val = crate::data::validation_batch(&run.data, n_val, exp.model.ctx, exp.data.bos)?;
    crate::data::ignore_first_targets(&mut val, exp.model.attention.mask.ignored_targets());
    let base = train::eval_loss(model, &val, chunk, &run.device);
    let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
    let sink1 = |f: Option<&StreamFilter>| -> Option<f64> {
        let la = train::probe_layers(model, &probe, chunk, proxy, &run.device, f, false);
        SinkReport::compute(&la, &[0.3], 1).sink1()
    };
    let base_sink = sink1(None);
    let (psi, psi_dim) = dark::psi(&bu, &be, o.both_cos);
    let total = ks.len() * 3 + 2;
    let bar = crate::train::progress_bar(total as u64, "filters");
    let mut results = Vec::new();
    let eval = |name: &str, k: Option<usize>, m: &[f64]| -> FilterResult {
        let f = stream_filter(m, d, &layers, run);
        let nll = train::eval_loss_filtered(model, &val, chunk, &run.device, Some(&f));
        let s = sink1(Some(&f));
        bar.inc(1);
        FilterResult {
            filter: name.to_string(),
            k,
            nll,
            delta_nll: nll - base,
            sink1: s,
        }
    };
    results.push(eval(
        "identity (Φ, all bands)",
        Some(n_bands),
        &bu.phi(n_bands),
    ));
    results.push(eval("Ψ", None, &psi));
    for &k in &ks {
        results.push(eval("Φ", Some(k), &bu.phi(k)));
        results.push(eval("Ω", Some(k), &bu.omega(k)));
        results.push(eval("random Φ", Some(k), &rand_bands.phi(k)));
    }
    bar.finish_and_clear();
    let series_of = |name: &str| Series {
        name: name.to_string(),
        points: results
            .iter()
            .filter(|r| r.filter == name)
            .map(|r| (r.k.expect("swept") as f64, r.nll))
            .collect(),
        err: None,
    };
    let series = vec![series_of("Φ"), series_of("Ω"), series_of("random Φ")];
    let layer_text = if layers.len() == n_layers + 1 {
        "every block input".to_string()
    } else {
        format!("block input(s) {layers:?}")
    };
    let png = plot::lines(&LinePlot {
        title: &format!("validation NLL with spectral filters at {layer_text}"),
        x_label: &format!("k (bands kept, of {n_bands}; W_U bands)"),
        y_label: "NLL (nats/token)",
        series: &series,
        log_x: false,
        log_y: false,
        hlines: &[
            ("unfiltered".to_string(), base),
            (format!("Ψ (removes {psi_dim} dims)"), results[1].nll),
        ],
        markers: true,
    })?;
    sink.png("dark_filters.png", "dark/filters", png)?;
    sink.scalars(
        "dark",
        &results
            .iter()
            .map(|r| {
                (
                    format!(
                        "delta_nll/{}{}",
                        r.filter.replace(' ', "_"),
                        r.k.map_or(String::new(), |k| format!("/k{k:02}"))
                    ),
                    r.delta_nll,
                )
            })
            .collect::<Vec<_>>(),
    )?;
    let value = json!({
        "run_dir": run.run_dir,
        "checkpoint": run.checkpoint,
        "step": run.state.step,
        "bands": n_bands,
        "d_model": d,
        "layers": layers,
        "validation": {"sequences": n_val, "len": exp.model.ctx, "nll": base},
        "probe": {"sequences": o.probe_sequences, "len": probe.len},
        "sink1_unfiltered": base_sink,
        "singular_values": {"unembedding": bu.singular_values, "embedding": be.singular_values},
        "psi": {"both_cos": o.both_cos, "removed_dims": psi_dim},
        "band_energy": energy,
        "write_shares": writes,
        "filters": results,
        "files": sink.files.clone(),
    });
    sink.json("dark.json", &value)?;
    println!(
        "dark signals: {n_bands} bands of W_U (d = {d}); filters at {layer_text}; validation NLL {base:.4} \
         ({n_val} × {}), Sink1 {}",
        exp.model.ctx,
        base_sink.map_or("-".into(), |s| format!("{s:.1}%"))
    );
    println!(
        "{:>24} {:>4} {:>9} {:>9} {:>8}",
        "filter", "k", "NLL", "ΔNLL", "Sink1"
    );
    for r in &results {
        println!(
            "{:>24} {:>4} {:>9.4} {:>+9.4} {:>8}",
            r.filter,
            r.k.map_or("-".into(), |k| k.to_string()),
            r.nll,
            r.delta_nll,
            r.sink1.map_or("-".into(), |s| format!("{s:.1}"))
        );
    }
    println!("results: {}", sink.dir.display());
    Ok(value)
}
