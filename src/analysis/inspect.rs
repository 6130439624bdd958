//! `sinklab analyze`: Sink_k^ε on every probe kind, the first-token importance map,
//! activations and massive channels, the q·k geometry of the first-token logit, attention bars
//! and attention maps of one checkpoint. The result is an [`AnalysisReport`], written as
//! `analysis.json` and rendered for the terminal by [`AnalysisReport::print`].

use super::geometry::{
    Bar, QkHead, channel_stats, find_bars, norms_by_position, qk_geometry, received_stats,
};
use super::probes::{batch_of, probe_batches, token_label, token_text};
use super::{Output, unembedding_bands};
use crate::dark::Bands;
use crate::data::{Batch, Sampler};
use crate::eval::{ProbeSpec, probe_each};
use crate::metrics::{
    Array, HEADLINE_EPS, LayerArrays, LayerSummary, Proxy, SinkReport, eps_name, uniform_first_mass,
};
use crate::plot::{self, Bars, Heatmap, LinePlot, Scale, Series};
use crate::run::OpenRun;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub use super::findings::{
    AnalysisReport, BarThresholds, BarToken, BarsReport, ChannelCount, KindSummary,
    LayerActivations, MapFile, ProbeInfo, TopChannel,
};

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
    pub dest: super::Destination,
    pub seed: u64,
    /// Natural probes from this text (consecutive windows of `len` tokens, at most
    /// `sequences`) instead of the validation split.
    pub text: Option<PathBuf>,
}

/// Run `sinklab analyze`: writes `analysis.json` and the figures, returns the report.
pub fn analyze(
    run: &OpenRun,
    o: &AnalyzeOptions,
    log: &mut dyn FnMut(&str),
) -> Result<AnalysisReport> {
    let claim = o.dest.claim(run, "analysis")?;
    let exp = &run.exp;
    let ctx = exp.model.ctx;
    if o.len < 2 || o.sequences == 0 {
        bail!("--len must be ≥ 2 and --sequences ≥ 1");
    }
    if !o.eps.contains(&HEADLINE_EPS) {
        bail!(
            "--eps {:?} lacks {HEADLINE_EPS}, the headline ε of the summary, the maps and the \
             Sink_k plot; add it to the list",
            o.eps
        );
    }
    let len = o.len.min(ctx);
    if len < o.len {
        log(&format!(
            "probe length {} capped at model.ctx = {ctx}",
            o.len
        ));
    }
    // With --text the natural probes are the text's complete windows (a short text: one
    // window of its own length, and every probe kind takes that length).
    let text = match &o.text {
        None => None,
        Some(file) => {
            let body = std::fs::read_to_string(file)
                .with_context(|| format!("reading --text {}", file.display()))?;
            let ids = run.data.tokenizer.encode(&body)?;
            let bos = exp.data.bos.then_some(run.data.tokenizer.bos_id);
            let mut b = crate::data::text_batch(&ids, len, bos, true)
                .with_context(|| format!("--text {}", file.display()))?;
            if b.batch > o.sequences {
                b = crate::eval::slice_batch(&b, 0, o.sequences);
            }
            log(&format!(
                "--text {}: {} tokens → {} window(s) of {}",
                file.display(),
                ids.len(),
                b.batch,
                b.len
            ));
            Some((ids.len(), b))
        }
    };
    let len = text.as_ref().map_or(len, |(_, b)| b.len);
    let k_max = o.k_max.min(len);
    let (n_layers, n_heads) = (exp.model.n_layers, exp.model.n_heads);
    for &(l, h) in &o.maps {
        if l >= n_layers || h >= n_heads {
            bail!("--map {l}:{h}: the model has layers 0..{n_layers} and heads 0..{n_heads}");
        }
    }
    let mut out = Output::new(claim, run)?;
    let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
    let metric = if proxy == Proxy::Weights {
        "Sink"
    } else {
        "Sink*"
    };
    let text_tokens = text.as_ref().map(|(n, _)| *n);
    let natural_text = text.map(|(_, b)| b);
    // The W_U bands for the dark ratio of bars, before the probes (their peaks don't add up).
    let bands = unembedding_bands(&run.model, o.bands);
    let (kinds, natural) =
        probe_all_kinds(run, o, len, k_max, natural_text, &bands, &mut out, log)?;
    let star = &metric[4..];
    let png = crate::recorder::importance_map(
        &natural.report.importance_first,
        &format!("first-token importance α₁{star} (natural text)"),
    )?;
    out.png("importance_first.png", "analyze/importance_first", png)?;
    let mut clock = std::time::Instant::now();
    let mut lap = |name: &str, log: &mut dyn FnMut(&str)| {
        log(&format!("{name}: {:.1} s", clock.elapsed().as_secs_f64()));
        clock = std::time::Instant::now();
    };
    let activations = activations(&natural, &mut out)?;
    lap("activations", log);
    let qk = qk_section(&natural.layers.qk, &mut out)?;
    lap("q·k geometry", log);
    let bars = bars_section(run, o, &natural, bands.n_bands(), proxy, &mut out)?;
    lap("attention bars and dark ratios", log);
    let (report, batch) = (&natural.report, &natural.batch);
    let attention_maps = maps_section(run, o, report, batch, proxy, star, &mut out)?;
    lap("attention maps", log);
    let valley = super::valley::section(report, &mut out)?;
    let value = AnalysisReport {
        run_dir: run.run_dir.clone(),
        checkpoint: run.checkpoint.clone(),
        step: run.state.step,
        probe: ProbeInfo {
            sequences: batch.batch,
            text: o.text.clone(),
            text_tokens,
            len,
            bos: exp.data.bos,
            eps: o.eps.clone(),
            k_max,
            seed: o.seed,
            f_attn_uniform: uniform_first_mass(len),
        },
        metric: metric.to_string(),
        kinds,
        importance_first: report.importance_first.clone(),
        activations,
        qk,
        bars,
        attention_maps,
        valley,
        files: out.files.clone(),
    };
    out.json("analysis.json", &value)?;
    Ok(value)
}

/// What the rest of the analysis reads of the natural probe: its metrics, its batch and what
/// the sections need of every layer.
struct Natural {
    report: SinkReport,
    batch: Batch,
    layers: NaturalLayers,
}

/// Per layer, what the sections need of the natural probe, reduced as each layer's arrays
/// arrive.
#[derive(Default)]
struct NaturalLayers {
    /// [layer][position] mean ‖h‖ of the block output.
    norms_by_position: Vec<Vec<f64>>,
    /// [layer] [`channel_stats`] of the block output.
    #[allow(clippy::type_complexity)]
    channels: Vec<(Vec<(usize, usize)>, Vec<(usize, f64, f64)>)>,
    /// [layer][head] q·k geometry.
    qk: Vec<Vec<QkHead>>,
    /// Attention bars of every layer.
    bars: Vec<Bar>,
    /// [layer][b · T + t] dark ratio of block l's input (W_U bands).
    dark: Vec<Vec<f64>>,
}

impl NaturalLayers {
    /// Reduce one layer of the natural probe (block `l`'s input and probe arrays for the probe
    /// tokens `tokens`).
    fn add(
        &mut self,
        (o, bands, tokens): (&AnalyzeOptions, &Bands, &[u32]),
        l: usize,
        x: &Array,
        la: &LayerArrays,
    ) {
        use rayon::prelude::*;
        self.norms_by_position.push(norms_by_position(&la.hidden));
        self.channels.push(channel_stats(&la.hidden, 5));
        self.qk.push(qk_geometry(
            la.queries.as_ref().expect("natural probe records queries"),
            &la.keys,
        ));
        self.bars.extend(find_bars(
            &la.attn,
            l,
            tokens,
            o.bar_mean,
            o.bar_std,
            o.bar_min_queries,
        ));
        self.dark.push(
            x.data
                .par_chunks(x.shape[2])
                .map(|row| bands.dark_ratio(&row.iter().map(|&z| z as f64).collect::<Vec<_>>()))
                .collect(),
        );
    }
}

/// Probe every kind (natural, as trained when the run changes tokens, random, repeated), write
/// their scalars and the Sink_k plot.
#[allow(clippy::too_many_arguments)]
fn probe_all_kinds(
    run: &OpenRun,
    o: &AnalyzeOptions,
    len: usize,
    k_max: usize,
    natural_text: Option<Batch>,
    bands: &Bands,
    out: &mut Output,
    log: &mut dyn FnMut(&str),
) -> Result<(BTreeMap<String, KindSummary>, Natural)> {
    let exp = &run.exp;
    let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
    let chunk = exp.train.micro_batch.max(1);
    let metric = if proxy == Proxy::Weights {
        "Sink"
    } else {
        "Sink*"
    };
    let mut kinds = probe_batches(&run.data, o.sequences, len, exp.data.bos, o.seed)?;
    if let Some(b) = natural_text {
        kinds[0].1 = b;
    }
    // A run trained with a fixed or random token is also probed as trained: the natural probe
    // with the data's token changes (Gu et al. measure the sink where the model saw the token).
    let sampler = Sampler::new(&run.data, &exp.data, exp.model.ctx, exp.run.seed)?;
    if sampler.has_token_changes() {
        let mut as_trained = kinds[0].1.clone();
        sampler.apply_token_changes(&mut as_trained);
        kinds.insert(1, ("as_trained", as_trained));
    }
    let mut by_kind = BTreeMap::new();
    let mut natural = None;
    let mut series = Vec::new();
    for (name, batch) in kinds {
        log(&format!("probe {name}: {} × {len}", batch.batch));
        let is_natural = name == "natural";
        let mut summaries = Vec::new();
        let mut layers = NaturalLayers::default();
        let spec = ProbeSpec::new(&batch, chunk, proxy, &run.device).with_queries(is_natural);
        probe_each(&run.model, spec, &mut |l, x, la| {
            summaries.push(LayerSummary::of(&la, None));
            if is_natural {
                layers.add((o, bands, &batch.inputs), l, &x, &la);
            }
        });
        let report = SinkReport::from_summaries(&summaries, &o.eps, k_max);
        by_kind.insert(name.to_string(), KindSummary::new(&report, metric));
        out.scalars(&format!("analyze/{name}"), &report.scalars())?;
        if let Some(r) = report.sink_rate.get(&eps_name(HEADLINE_EPS)) {
            series.push(Series {
                name: name.to_string(),
                points: r
                    .iter()
                    .enumerate()
                    .map(|(k, v)| ((k + 1) as f64, *v))
                    .collect(),
                err: None,
            });
        }
        if is_natural {
            natural = Some(Natural {
                report,
                batch,
                layers,
            });
        }
    }
    if !series.is_empty() {
        let png = plot::lines(&LinePlot {
            title: &format!(
                "{metric}_k (ε = {HEADLINE_EPS}), {} × {len} probe{}",
                o.sequences,
                if o.text.is_some() {
                    " (natural: --text)"
                } else {
                    ""
                }
            ),
            x_label: "k (key position, 1-based)",
            y_label: "% of (layer, head, sequence)",
            series: &series,
            x_scale: Scale::Integer,
            y_scale: Scale::Linear,
            hlines: &[],
            vlines: &[],
            markers: true,
        })?;
        out.png("sink_k.png", "analyze/sink_k", png)?;
    }
    Ok((by_kind, natural.expect("the natural probe always runs")))
}

/// `(layer, f(layer))` for every layer.
fn per_layer(n: usize, f: &dyn Fn(usize) -> f64) -> Vec<(f64, f64)> {
    (0..n).map(|l| (l as f64, f(l))).collect()
}

fn series(name: &str, points: Vec<(f64, f64)>) -> Series {
    Series {
        name: name.into(),
        points,
        err: None,
    }
}

/// Norms, massive activations and channels of every layer output; `norms_by_position.png`
/// and `activations.png`.
fn activations(natural: &Natural, out: &mut Output) -> Result<Vec<LayerActivations>> {
    let report = &natural.report;
    let by_pos = &natural.layers.norms_by_position;
    let n = by_pos.len();
    let png = plot::heatmap(&Heatmap {
        title: "mean ‖h‖ by layer output and position (natural text)",
        x_label: "position",
        y_label: "layer",
        rows: by_pos,
        x_ticks: None,
        y_ticks: None,
        range: None,
        annotate: false,
        colours: crate::plot::Colours::Sequential,
    })?;
    out.png("norms_by_position.png", "analyze/norms_by_position", png)?;
    let h = &report.hidden;
    let act_series = vec![
        series("‖h‖ token 1", per_layer(n, &|l| h[l].norm_first)),
        series("‖h‖ other tokens", per_layer(n, &|l| h[l].norm_rest)),
        series("top-1 |h|", per_layer(n, &|l| h[l].top3[0])),
        series("median |h|", per_layer(n, &|l| h[l].median_abs)),
    ];
    let png = plot::lines(&LinePlot {
        title: "residual stream by layer (natural text)",
        x_label: "layer (block output)",
        y_label: "magnitude",
        series: &act_series,
        x_scale: Scale::Integer,
        y_scale: Scale::Log,
        hlines: &[],
        vlines: &[],
        markers: true,
    })?;
    out.png("activations.png", "analyze/activations", png)?;
    Ok(natural
        .layers
        .channels
        .iter()
        .enumerate()
        .map(|(l, (massive, top))| {
            let hs = &report.hidden[l];
            LayerActivations {
                layer: l,
                norm_first: hs.norm_first,
                norm_rest: hs.norm_rest,
                norm_ratio: hs.norm_ratio,
                top3: hs.top3,
                median_abs: hs.median_abs,
                massive_count: hs.massive_count,
                massive_channels: massive
                    .iter()
                    .take(8)
                    .map(|&(channel, count)| ChannelCount { channel, count })
                    .collect(),
                top_channels: top
                    .iter()
                    .map(|&(channel, max_abs, share_at_token1)| TopChannel {
                        channel,
                        max_abs,
                        share_at_token1,
                    })
                    .collect(),
                key_norm_first: report.key_norms[l].0,
                key_norm_rest: report.key_norms[l].1,
                value_norm_first: report.value_norms[l].0,
                value_norm_rest: report.value_norms[l].1,
                norm_by_position: by_pos[l].clone(),
            }
        })
        .collect())
}

/// The first-token logit split into angle and norm per (layer, head); `qk_cos.png` and
/// `qk_norm.png`.
fn qk_section(qk: &[Vec<QkHead>], out: &mut Output) -> Result<Vec<Vec<QkHead>>> {
    let n = qk.len();
    let mean = |l: usize, f: &dyn Fn(&QkHead) -> f64| {
        qk[l].iter().map(f).sum::<f64>() / qk[l].len() as f64
    };
    for (file, title, y_label, first, rest) in [
        (
            "qk_cos",
            "angle of the first-token logit (mean over heads)",
            "mean cosine",
            series(
                "cos(q_t, k_1)",
                per_layer(n, &|l| mean(l, &|h| h.cos_first)),
            ),
            series(
                "cos(q_t, k_j), j > 1",
                per_layer(n, &|l| mean(l, &|h| h.cos_rest)),
            ),
        ),
        (
            "qk_norm",
            "norm of the first-token logit (mean over heads)",
            "‖q‖‖k‖/√d_h",
            series(
                "‖q_t‖‖k_1‖/√d_h",
                per_layer(n, &|l| mean(l, &|h| h.norm_first)),
            ),
            series(
                "‖q_t‖‖k_j‖/√d_h, j > 1",
                per_layer(n, &|l| mean(l, &|h| h.norm_rest)),
            ),
        ),
    ] {
        let png = plot::lines(&LinePlot {
            title,
            x_label: "layer",
            y_label,
            series: &[first, rest],
            x_scale: Scale::Integer,
            y_scale: Scale::Linear,
            hlines: &[],
            vlines: &[],
            markers: true,
        })?;
        out.png(&format!("{file}.png"), &format!("analyze/{file}"), png)?;
    }
    Ok(qk.to_vec())
}

/// Attention bars, their tokens and dark ratio (W_U bands); `attention_bars.png` for the
/// (sequence, layer, head) with the most bars (else the head with the highest first-token
/// importance on sequence 0).
fn bars_section(
    run: &OpenRun,
    o: &AnalyzeOptions,
    natural: &Natural,
    n_bands: usize,
    proxy: Proxy,
    out: &mut Output,
) -> Result<BarsReport> {
    let exp = &run.exp;
    let (n_layers, n_heads) = (exp.model.n_layers, exp.model.n_heads);
    let (report, batch, bars, dark) = (
        &natural.report,
        &natural.batch,
        &natural.layers.bars,
        &natural.layers.dark,
    );
    let dark_of = |l: usize, b: usize, t: usize| -> f64 { dark[l][b * batch.len + t] };
    let mut per_token: BTreeMap<u32, (usize, f64)> = BTreeMap::new();
    for b in bars {
        let e = per_token.entry(b.token).or_default();
        e.0 += 1;
        e.1 += dark_of(b.layer, b.sequence, b.position);
    }
    let mut tokens: Vec<BarToken> = per_token
        .into_iter()
        .map(|(token, (count, dr))| BarToken {
            token,
            text: token_text(&run.data, token),
            count,
            dark_ratio: dr / count as f64,
        })
        .collect();
    tokens.sort_by_key(|b| std::cmp::Reverse(b.count));
    tokens.truncate(20);
    let mean_dark = |pos: &dyn Fn(usize) -> bool| -> Vec<f64> {
        (0..n_layers)
            .map(|l| {
                let (mut s, mut n) = (0.0, 0);
                for b in 0..batch.batch {
                    for t in (0..batch.len).filter(|&t| pos(t)) {
                        s += dark_of(l, b, t);
                        n += 1;
                    }
                }
                s / n.max(1) as f64
            })
            .collect()
    };
    let dark_ratio_bars = (!bars.is_empty()).then(|| {
        bars.iter()
            .map(|b| dark_of(b.layer, b.sequence, b.position))
            .sum::<f64>()
            / bars.len() as f64
    });
    let mut counts = vec![vec![0.0; n_heads]; n_layers];
    for b in bars {
        counts[b.layer][b.head] += 1.0 / batch.batch as f64;
    }
    let (bs, bl, bh) = {
        let mut best = std::collections::HashMap::new();
        for b in bars {
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
    let t = batch.len;
    // That block's attention again, from one sequence's probe (the pass kept no layer's).
    let one = crate::eval::slice_batch(batch, bs, bs + 1);
    let mut block = Vec::new();
    probe_each(
        &run.model,
        ProbeSpec::new(&one, 1, proxy, &run.device),
        &mut |l, _, la| {
            if l == bl {
                block = la.attn.data[bh * t * t..(bh + 1) * t * t].to_vec();
            }
        },
    );
    let stats = received_stats(&block, t, o.bar_min_queries);
    let shown: Vec<usize> = (0..t).filter(|&k| stats[k].is_some()).collect();
    let labels: Vec<String> = shown
        .iter()
        .map(|&k| format!("{k}:{}", token_label(&run.data, batch.inputs[bs * t + k])))
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
    out.png("attention_bars.png", "analyze/attention_bars", png)?;
    Ok(BarsReport {
        thresholds: BarThresholds {
            mean_gt: o.bar_mean,
            std_lt: o.bar_std,
            min_queries: o.bar_min_queries,
        },
        per_sequence_by_layer_head: counts,
        total: bars.len(),
        tokens,
        dark_ratio_bars,
        dark_ratio_first_by_layer: mean_dark(&|t| t == 0),
        dark_ratio_rest_by_layer: mean_dark(&|t| t > 0),
        bands: n_bands,
    })
}

/// Attention maps of the requested (or most first-token-attending) heads.
fn maps_section(
    run: &OpenRun,
    o: &AnalyzeOptions,
    report: &SinkReport,
    batch: &Batch,
    proxy: Proxy,
    star: &str,
    out: &mut Output,
) -> Result<Vec<MapFile>> {
    let exp = &run.exp;
    let map_tokens: Vec<u32> = match &o.map_text {
        Some(text) => {
            let mut ids = Vec::new();
            if exp.data.bos {
                ids.push(run.data.tokenizer.bos_id);
            }
            ids.extend(run.data.tokenizer.encode(text)?);
            ids.truncate(exp.model.ctx);
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
    let t = map_tokens.len();
    // The requested heads' (T, T) blocks, kept layer by layer.
    let mut blocks: BTreeMap<(usize, usize), Vec<f32>> = BTreeMap::new();
    probe_each(
        &run.model,
        ProbeSpec::new(&map_batch, 1, proxy, &run.device),
        &mut |l, _, la| {
            for &(ml, h) in &maps {
                if ml == l {
                    blocks.insert((l, h), la.attn.data[h * t * t..(h + 1) * t * t].to_vec());
                }
            }
        },
    );
    let ticks: Vec<String> = map_tokens
        .iter()
        .map(|&x| token_label(&run.data, x))
        .collect();
    let mut files = Vec::new();
    for &(l, h) in &maps {
        let a = &blocks[&(l, h)];
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
            colours: crate::plot::Colours::Sequential,
        })?;
        out.png(&name, &format!("analyze/attention_l{l:02}_h{h:02}"), png)?;
        files.push(MapFile {
            layer: l,
            head: h,
            file: name,
        });
    }
    Ok(files)
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
