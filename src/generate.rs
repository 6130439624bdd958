//! Decoding with a key/value cache: sampling (`sinklab generate`) and StreamingLLM evaluation
//! (`sinklab stream-eval`, REFERENCE §6).
//!
//! Streaming perplexity is token-by-token: token i+1 is scored from a cache holding what the
//! policy kept of tokens 0..=i. The compared policies are
//! - dense: every token, only up to the training context (`model.ctx`);
//! - sliding window with re-computation: token i+1 from a fresh forward over the last `ctx`
//!   tokens (the quality reference; not a cache, batched here);
//! - window only (S = 0, W), and window + S sinks (S + W = the same cache size).
//!
//! The model's own sink tokens and slots (sink logit, KV bias) are part of the model and are
//! always attended; S counts real initial tokens kept on top of them.

use crate::model::{CachePolicy, Lm};
use anyhow::{Result, bail};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

fn ids_tensor(ids: &[u32], device: &Device) -> Tensor<2, Int> {
    let v: Vec<i64> = ids.iter().map(|&x| x as i64).collect();
    Tensor::from_data(TensorData::new(v, [1, ids.len()]), device)
}

/// Host copy of logits (1, n, V) as n rows of V.
fn rows(logits: Tensor<3>) -> Vec<Vec<f32>> {
    let [_, n, v] = logits.dims();
    let flat: Vec<f32> = logits
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 logits");
    debug_assert_eq!(flat.len(), n * v);
    flat.chunks_exact(v).map(<[f32]>::to_vec).collect()
}

/// `−log softmax(row)[target]` in f64.
pub fn nll(row: &[f32], target: u32) -> f64 {
    let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let z: f64 = row.iter().map(|&x| (x as f64 - m).exp()).sum();
    m + z.ln() - row[target as usize] as f64
}

/// Sampling settings.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    /// 0 = greedy (argmax).
    pub temperature: f64,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    pub seed: u64,
}

/// Draw a token from one row of logits.
pub fn sample(row: &[f32], s: &Sampling, rng: &mut ChaCha8Rng) -> u32 {
    let argmax = || {
        row.iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
                if v > bv { (i, v) } else { (bi, bv) }
            })
            .0 as u32
    };
    if s.temperature <= 0.0 {
        return argmax();
    }
    let mut idx: Vec<usize> = (0..row.len()).collect();
    if s.top_k > 0 && s.top_k < row.len() {
        idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        idx.truncate(s.top_k);
    }
    let m = idx
        .iter()
        .map(|&i| row[i])
        .fold(f32::NEG_INFINITY, f32::max) as f64;
    let w: Vec<f64> = idx
        .iter()
        .map(|&i| ((row[i] as f64 - m) / s.temperature).exp())
        .collect();
    let total: f64 = w.iter().sum();
    let mut u = rng.r#gen::<f64>() * total;
    for (&i, wi) in idx.iter().zip(&w) {
        if u < *wi {
            return i as u32;
        }
        u -= wi;
    }
    *idx.last().expect("at least one candidate") as u32
}

/// Continue `prompt` by `new_tokens` tokens with a cache under `policy` (the prompt is
/// prefilled in one call). Returns only the new tokens.
pub fn generate(
    model: &Lm,
    prompt: &[u32],
    new_tokens: usize,
    sampling: &Sampling,
    policy: CachePolicy,
    device: &Device,
) -> Result<Vec<u32>> {
    if prompt.is_empty() {
        bail!("the prompt encodes to no tokens");
    }
    let mut cache = model.cache(policy)?;
    let mut rng = ChaCha8Rng::seed_from_u64(sampling.seed);
    let logits = model.forward_cached(ids_tensor(prompt, device), &mut cache)?;
    let mut last = rows(logits).pop().expect("one row per prompt token");
    let mut out = Vec::with_capacity(new_tokens);
    for _ in 0..new_tokens {
        let next = sample(&last, sampling, &mut rng);
        out.push(next);
        let logits = model.forward_cached(ids_tensor(&[next], device), &mut cache)?;
        last = rows(logits).pop().expect("one row");
    }
    Ok(out)
}

/// NLL of tokens 1..n, each predicted token by token from a cache under `policy`:
/// `out[i] = −log p(tokens[i+1] | cache after tokens[..=i])`.
pub fn stream_nll(
    model: &Lm,
    tokens: &[u32],
    policy: CachePolicy,
    device: &Device,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<f64>> {
    let mut cache = model.cache(policy)?;
    let mut out = Vec::with_capacity(tokens.len().saturating_sub(1));
    for (i, pair) in tokens.windows(2).enumerate() {
        let logits = model.forward_cached(ids_tensor(&pair[..1], device), &mut cache)?;
        out.push(nll(&rows(logits)[0], pair[1]));
        progress(i + 1);
    }
    Ok(out)
}

/// NLL of tokens 1..n with full attention over the whole sequence in one forward (needs
/// n − 1 ≤ model.ctx inputs): the reference that an evicting-free cache must reproduce.
pub fn dense_nll(model: &Lm, tokens: &[u32], device: &Device) -> Result<Vec<f64>> {
    let n = tokens.len();
    if n < 2 || n - 1 > model.cfg.ctx {
        bail!(
            "{n} tokens: dense scoring needs 2 ≤ tokens ≤ model.ctx + 1 = {} (attention is only \
             defined within the training context)",
            model.cfg.ctx + 1
        );
    }
    let logits = model.forward(ids_tensor(&tokens[..n - 1], device));
    Ok(rows(logits)
        .iter()
        .zip(&tokens[1..])
        .map(|(r, &t)| nll(r, t))
        .collect())
}

/// NLL of tokens 1..n, token i+1 predicted by a fresh forward over the `ctx` tokens ending at
/// i (sliding window with re-computation), `batch` windows per forward.
pub fn recompute_nll(
    model: &Lm,
    tokens: &[u32],
    batch: usize,
    device: &Device,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<f64>> {
    let ctx = model.cfg.ctx;
    let n = tokens.len();
    let mut out = vec![f64::NAN; n - 1];
    // Positions 0..min(ctx, n−1) come from one forward over the first window.
    let head = n.min(ctx + 1);
    out[..head - 1].copy_from_slice(&dense_nll(model, &tokens[..head], device)?);
    let rest: Vec<usize> = (ctx..n - 1).collect(); // predict tokens[i+1] from tokens[i+1−ctx..=i]
    for chunk in rest.chunks(batch.max(1)) {
        let ids: Vec<i64> = chunk
            .iter()
            .flat_map(|&i| tokens[i + 1 - ctx..=i].iter().map(|&x| x as i64))
            .collect();
        let x = Tensor::<2, Int>::from_data(TensorData::new(ids, [chunk.len(), ctx]), device);
        let logits = model.forward(x); // (b, ctx, V)
        let v = logits.dims()[2];
        let last = logits.narrow(1, ctx - 1, 1).reshape([chunk.len(), 1, v]);
        let flat: Vec<f32> = last
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("f32 logits");
        for (row, &i) in flat.chunks_exact(v).zip(chunk) {
            out[i] = nll(row, tokens[i + 1]);
        }
        progress(chunk.len());
    }
    Ok(out)
}

/// One policy's result.
#[derive(Debug, Clone, Serialize)]
pub struct StreamRow {
    pub name: String,
    /// Initial real tokens kept (None: not a cache policy).
    pub sinks: Option<usize>,
    pub window: Option<usize>,
    /// Tokens scored.
    pub scored: usize,
    pub mean_nll: f64,
    pub ppl: f64,
    /// Mean NLL of the scored tokens past the training context (None if none are).
    pub ppl_past_ctx: Option<f64>,
    /// Per-token NLL (index i scores token i+1).
    pub nll: Vec<f64>,
}

impl StreamRow {
    pub fn new(
        name: &str,
        sinks: Option<usize>,
        window: Option<usize>,
        nll: Vec<f64>,
        ctx: usize,
    ) -> Self {
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
        let past = (nll.len() > ctx).then(|| mean(&nll[ctx..]).exp());
        let m = mean(&nll);
        Self {
            name: name.to_string(),
            sinks,
            window,
            scored: nll.len(),
            mean_nll: m,
            ppl: m.exp(),
            ppl_past_ctx: past,
            nll,
        }
    }
}

/// Options of `sinklab stream-eval`.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Initial real tokens kept by the "window + sinks" policy.
    pub sinks: usize,
    /// Recent tokens kept by the "window + sinks" policy (the other policies keep the same
    /// total S + W).
    pub window: usize,
    /// Tokens of the evaluation text.
    pub tokens: usize,
    /// A text file to evaluate instead of the validation split.
    pub text: Option<std::path::PathBuf>,
    /// Windows per forward of the re-computation reference.
    pub batch: usize,
    pub out: Option<std::path::PathBuf>,
    /// Also write the perplexities and the plot to the run's TensorBoard.
    pub tensorboard: bool,
}

/// Run `sinklab stream-eval`: every policy on one long text; writes `stream.json` and
/// `stream_ppl.png`, prints the table and returns the rows.
pub fn stream_eval(
    run: &crate::train::OpenRun,
    o: &StreamOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<StreamRow>> {
    let exp = &run.exp;
    let model = &run.model;
    let ctx = exp.model.ctx;
    let cache = o.sinks + o.window;
    if o.window == 0 || cache > ctx {
        bail!(
            "--sinks {} --window {}: need a window ≥ 1 and sinks + window ≤ model.ctx = {ctx}",
            o.sinks,
            o.window
        );
    }
    let mut tokens: Vec<u32> = Vec::new();
    if exp.data.bos {
        tokens.push(run.data.tokenizer.bos_id);
    }
    match &o.text {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            tokens.extend(run.data.tokenizer.encode(&text)?);
        }
        None => tokens.extend(run.data.domains.iter().flat_map(|d| d.val.iter().copied())),
    }
    tokens.truncate(o.tokens);
    if tokens.len() < 2 {
        bail!("the evaluation text has fewer than 2 tokens");
    }
    if tokens.len() < o.tokens {
        log(&format!(
            "the text has only {} tokens (asked for {})",
            tokens.len(),
            o.tokens
        ));
    }
    let n = tokens.len();
    let device = &run.device;
    let model = burn::module::Module::valid(model);
    let mut rows = Vec::new();
    let within = n.min(ctx + 1);
    log(&format!("dense over the first {within} tokens"));
    rows.push(StreamRow::new(
        "dense (within context)",
        None,
        None,
        dense_nll(&model, &tokens[..within], device)?,
        ctx,
    ));
    let policies = [
        ("window only", 0, cache),
        ("window + 1 sink", 1, cache - 1),
        ("window + sinks", o.sinks, o.window),
    ];
    let bar = crate::train::progress_bar(((n - 1) * policies.len() + n) as u64, "tokens");
    let mut seen = std::collections::BTreeSet::new();
    for (name, s, w) in policies {
        if !seen.insert((s, w)) {
            continue; // e.g. --sinks 1 repeats the one-sink row
        }
        let policy = CachePolicy {
            sinks: s,
            window: Some(w),
        };
        let nll = stream_nll(&model, &tokens, policy, device, &mut |_| bar.inc(1))?;
        rows.push(StreamRow::new(
            &format!("{name} ({s}+{w})"),
            Some(s),
            Some(w),
            nll,
            ctx,
        ));
    }
    let nll = recompute_nll(&model, &tokens, o.batch, device, &mut |k| bar.inc(k as u64))?;
    bar.finish_and_clear();
    rows.push(StreamRow::new(
        &format!("sliding window, recomputed ({ctx})"),
        None,
        Some(ctx),
        nll,
        ctx,
    ));
    let dir = o.out.clone().unwrap_or_else(|| {
        run.run_dir
            .join("analysis")
            .join(format!("step_{:08}", run.state.step))
    });
    std::fs::create_dir_all(&dir)?;
    // PPL against position: exp of the mean NLL over buckets of positions.
    let bucket = (n / 32).max(8);
    let series: Vec<crate::plot::Series> = rows
        .iter()
        .map(|r| crate::plot::Series {
            name: r.name.clone(),
            points: r
                .nll
                .chunks(bucket)
                .enumerate()
                .map(|(i, c)| {
                    let mid = (i * bucket + c.len() / 2 + 1) as f64;
                    (mid, (c.iter().sum::<f64>() / c.len() as f64).exp())
                })
                .collect(),
            err: None,
        })
        .collect();
    let png = crate::plot::lines(&crate::plot::LinePlot {
        title: &format!(
            "streaming perplexity ({n} tokens, model.ctx = {ctx}, cache {cache}; buckets of {bucket})"
        ),
        x_label: "position (token index)",
        y_label: "perplexity",
        series: &series,
        log_x: false,
        log_y: true,
        hlines: &[],
        markers: false,
    })?;
    crate::plot::save(&dir.join("stream_ppl.png"), &png)?;
    if o.tensorboard {
        let mut tb = crate::tensorboard::EventWriter::create(&run.run_dir.join("tb"))?;
        let step = run.state.step as i64;
        let tag = |r: &StreamRow| {
            r.name
                .split(" (")
                .next()
                .unwrap_or(&r.name)
                .replace([' ', ','], "_")
                .replace('+', "plus")
        };
        let mut scalars = Vec::new();
        for r in &rows {
            scalars.push((format!("stream/ppl/{}", tag(r)), r.ppl));
            if let Some(p) = r.ppl_past_ctx {
                scalars.push((format!("stream/ppl_past_ctx/{}", tag(r)), p));
            }
        }
        tb.add_scalars(step, &scalars)?;
        let (w, h) = crate::plot::png_size(&png)?;
        tb.add_png("stream/ppl_vs_position", step, w, h, png)?;
        tb.flush()?;
    }
    let value = serde_json::json!({
        "run_dir": run.run_dir,
        "checkpoint": run.checkpoint,
        "step": run.state.step,
        "tokens": n,
        "ctx": ctx,
        "sinks": o.sinks,
        "window": o.window,
        "model_sink_tokens": exp.model.sink_tokens,
        "slot": format!("{:?}", exp.model.attention.slot),
        "rows": rows,
    });
    std::fs::write(
        dir.join("stream.json"),
        serde_json::to_string_pretty(&value)?,
    )?;
    println!(
        "stream-eval: {n} tokens (model.ctx = {ctx}); cache policies keep S + W = {cache} tokens \
         (plus the model's own sink tokens / slots)"
    );
    println!(
        "{:>36} {:>7} {:>10} {:>14}",
        "policy", "scored", "PPL", "PPL past ctx"
    );
    for r in &rows {
        println!(
            "{:>36} {:>7} {:>10.2} {:>14}",
            r.name,
            r.scored,
            r.ppl,
            r.ppl_past_ctx.map_or("-".into(), |p| format!("{p:.2}"))
        );
    }
    println!("results: {}", dir.display());
    Ok(rows)
}
