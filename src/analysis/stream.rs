//! `sinklab stream-eval` (StreamingLLM, docs/reference.md §6): token-by-token perplexity of one
//! long text under cache policies with the same budget L (window only, one sink, S sinks, a
//! sliding window re-computed over the last L tokens) and dense attention over the whole text,
//! with the per-position curve.

use crate::generate::{continue_nll_rows, forward_nll, prefill_nll, recompute_nll};
use crate::model::CachePolicy;
use crate::run::OpenRun;
use anyhow::{Result, bail};
use serde::Serialize;

/// One policy's result.
#[derive(Debug, Clone, Serialize)]
pub struct StreamRow {
    pub name: String,
    /// Initial real tokens kept (None: not an evicting cache).
    pub sinks: Option<usize>,
    /// Recent tokens kept (the re-computation window for the recomputed row).
    pub window: Option<usize>,
    /// Tokens scored.
    pub scored: usize,
    pub mean_nll: f64,
    pub ppl: f64,
    /// Perplexity of the scored tokens past the training context (None if none are).
    pub ppl_past_ctx: Option<f64>,
    /// Perplexity of the scored tokens past the cache budget L, where eviction has begun
    /// (None if none are).
    pub ppl_past_budget: Option<f64>,
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
        budget: usize,
    ) -> Self {
        let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
        let past = |from: usize| (nll.len() > from).then(|| mean(&nll[from..]).exp());
        let m = mean(&nll);
        Self {
            name: name.to_string(),
            sinks,
            window,
            scored: nll.len(),
            mean_nll: m,
            ppl: m.exp(),
            ppl_past_ctx: past(ctx),
            ppl_past_budget: past(budget),
            nll,
        }
    }
}

/// Options of `sinklab stream-eval`.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Initial real tokens kept by the "window + sinks" policy.
    pub sinks: usize,
    /// Recent tokens kept by the "window + sinks" policy. Every policy gets the same budget
    /// L = sinks + window: window only keeps L recent tokens, one sink keeps 1 + (L − 1), the
    /// re-computation reference re-encodes the last L tokens.
    pub window: usize,
    /// The evicting caches to run, as numbers k of initial tokens kept (each keeps k + (L − k)).
    /// None: window only, one sink and `sinks` (0, 1, sinks).
    pub kept: Option<Vec<usize>>,
    /// Run the re-computation reference (L forwards of L tokens per scored token: the slowest
    /// row by far on a large model).
    pub recompute: bool,
    /// Tokens of the evaluation text.
    pub tokens: usize,
    /// A text file to evaluate instead of the validation split.
    pub text: Option<std::path::PathBuf>,
    /// Windows per forward of the re-computation reference.
    pub batch: usize,
    /// Where (`stream.json`, `stream_ppl.png`), and whether to the run's TensorBoard too.
    pub dest: super::Destination,
}

/// The default cache budget L for a model with training context `ctx`: half the context, at
/// most 1024 tokens (StreamingLLM evaluates caches well inside the trained length).
pub fn default_budget(ctx: usize) -> usize {
    (ctx / 2).clamp(2, 1024)
}

/// The default length of the evaluation text: 16 × model.ctx, at most 4096 tokens.
pub fn default_text_tokens(ctx: usize) -> usize {
    (16 * ctx).min(4096)
}

/// Run `sinklab stream-eval` (StreamingLLM's evaluation, docs/reference.md §6): every policy on one
/// long text with the same cache budget L, token by token; writes `stream.json` and
/// `stream_ppl.png` (perplexity against position) and returns the report. A [`plan`] that
/// makes every refusal, a [`compute`] without I/O, a [`render`] that writes.
pub fn stream_eval(
    run: &OpenRun,
    o: &StreamOptions,
    log: &mut dyn FnMut(&str),
) -> Result<StreamReport> {
    let plan = plan(run, o, log)?;
    let report = compute(run, o, &plan, log)?;
    render(run, o, &plan, &report)?;
    Ok(report)
}

/// What a stream evaluation will do, every refusal made: the report's name claimed, the
/// budget checked against the context, the cache policies and the evaluation text.
pub struct Plan {
    pub claim: super::Claim,
    /// The cache budget L = sinks + window.
    pub budget: usize,
    /// (name, initial tokens kept, recent tokens kept) of each evicting cache.
    pub policies: Vec<(String, usize, usize)>,
    /// The text's token ids (the BOS token first where the model was trained with one).
    pub tokens: Vec<u32>,
}

/// Every refusal of `stream-eval` before a model pass: a report of the same name, a budget
/// that does not fit the context, `--kept` values outside the budget, a text that cannot be
/// read or is too short.
pub fn plan(run: &OpenRun, o: &StreamOptions, log: &mut dyn FnMut(&str)) -> Result<Plan> {
    let claim = o.dest.claim(run, "stream")?;
    let exp = &run.exp;
    let ctx = exp.model.ctx;
    let budget = o.sinks + o.window;
    if o.window == 0 || budget > ctx {
        bail!(
            "--sinks {} --window {}: need a window ≥ 1 and a budget sinks + window ≤ model.ctx = {ctx}",
            o.sinks,
            o.window
        );
    }
    let policies = policies(o, budget)?;
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
        None => {
            // the validation streams, one after another, as far as needed
            let val = crate::data::Tokens::concat(
                &run.data.domains.iter().map(|d| &d.val).collect::<Vec<_>>(),
            );
            let n = o.tokens.saturating_sub(tokens.len()).min(val.len());
            val.copy_to(0, n, &mut tokens);
        }
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
    Ok(Plan {
        claim,
        budget,
        policies,
        tokens,
    })
}

/// Every policy's per-token NLL on the plan's text: the report, nothing written.
pub fn compute(
    run: &OpenRun,
    o: &StreamOptions,
    plan: &Plan,
    log: &mut dyn FnMut(&str),
) -> Result<StreamReport> {
    let exp = &run.exp;
    let ctx = exp.model.ctx;
    let (budget, tokens) = (plan.budget, &plan.tokens);
    let n = tokens.len();
    let device = &run.device;
    let mut model = burn::module::Module::valid(&run.model);
    // Dense attention over the whole text, past the training length where positions exist.
    let dense_limit = match model.fixed_length() {
        None => {
            model.extend_positions(n)?;
            n
        }
        Some(why) => {
            log(&format!(
                "dense attention stops at model.ctx = {ctx} tokens: {why}"
            ));
            n.min(ctx + 1)
        }
    };
    // Every cache holds the same tokens until it first has to evict, after L tokens: those are
    // fed once, in one prefill of a dense cache that each evicting stream then continues from
    // (a fork). Dense attention over the whole text is one forward (what a dense cache gives
    // token by token, up to rounding).
    let prefix = budget.min(dense_limit - 1);
    // a bar on a terminal, about 20 plain lines without one
    let bar = crate::progress::Progress::new(
        ((dense_limit - 1)
            + prefix
            + (n - 1 - prefix) * plan.policies.len()
            + if o.recompute { n - 1 } else { 0 }) as u64,
        "stream-eval tokens scored",
    );
    let mut rows = Vec::new();
    let dense_name = if dense_limit == n {
        "dense".to_string()
    } else {
        format!("dense (within model.ctx = {ctx})")
    };
    let dense = forward_nll(&model, &tokens[..dense_limit], device)?;
    bar.inc((dense_limit - 1) as u64);
    let mut shared = model.cache(CachePolicy::DENSE)?;
    let head = prefill_nll(&model, &mut shared, &tokens[..=prefix], device)?;
    bar.inc(prefix as u64);
    // Past the shared prefix the evicting caches, which all hold L tokens, decode together as
    // the rows of one cache: each token reads the weights once for all of them
    // (KvCache::fork_rows), its matrix products split over the cores.
    let windowed: Vec<(String, usize, usize)> = plan
        .policies
        .iter()
        .map(|(name, s, w)| (format!("{name} ({s}+{w})"), *s, *w))
        .collect();
    let rows_policies: Vec<CachePolicy> = windowed
        .iter()
        .map(|&(_, s, w)| CachePolicy {
            sinks: s,
            window: Some(w),
        })
        .collect();
    let mut cache = shared.fork_rows(&rows_policies)?;
    let k = rows_policies.len() as u64;
    let evicting = continue_nll_rows(
        &model,
        &mut cache,
        rows_policies.len(),
        &tokens[prefix..n],
        device,
        &mut |_| bar.inc(k),
    )?;
    let with_head = |rest: Vec<f64>| -> Vec<f64> { head.iter().copied().chain(rest).collect() };
    rows.push(StreamRow::new(&dense_name, None, None, dense, ctx, budget));
    for ((name, s, w), nll) in windowed.into_iter().zip(evicting) {
        rows.push(StreamRow::new(
            &name,
            Some(s),
            Some(w),
            with_head(nll),
            ctx,
            budget,
        ));
    }
    if o.recompute {
        let nll = recompute_nll(&model, tokens, budget, o.batch, device, &mut |k| {
            bar.inc(k as u64)
        })?;
        rows.push(StreamRow::new(
            &format!("sliding window, recomputed ({budget})"),
            None,
            Some(budget),
            nll,
            ctx,
            budget,
        ));
    }
    bar.finish();
    Ok(StreamReport {
        run_dir: run.run_dir.clone(),
        checkpoint: run.checkpoint.clone(),
        step: run.state.step,
        tokens: n,
        ctx,
        budget,
        sinks: o.sinks,
        window: o.window,
        model_sink_tokens: exp.model.sink_tokens,
        slot: format!("{:?}", exp.model.attention.slot),
        rows,
        dir: plan.claim.dir.clone(),
    })
}

/// Perplexity against position (StreamingLLM's figure: exp of the mean NLL over buckets of
/// positions) as `stream_ppl.png`, the rows' perplexities to the run's TensorBoard when asked,
/// and the report as `stream.json` (under the claimed name).
pub fn render(run: &OpenRun, o: &StreamOptions, plan: &Plan, report: &StreamReport) -> Result<()> {
    let (n, budget, ctx) = (report.tokens, report.budget, report.ctx);
    let dir = &report.dir;
    std::fs::create_dir_all(dir)?;
    let bucket = (n / 64).max(8);
    let series: Vec<crate::plot::Series> = report
        .rows
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
            "streaming perplexity, {n} tokens, cache budget L = {budget} (buckets of {bucket})"
        ),
        x_label: "position (token index)",
        y_label: "perplexity",
        series: &series,
        x_scale: crate::plot::Scale::Linear,
        y_scale: crate::plot::Scale::Log,
        hlines: &[],
        vlines: &[
            (format!("L = {budget} (eviction starts)"), budget as f64),
            (format!("model.ctx = {ctx}"), ctx as f64),
        ],
        markers: false,
    })?;
    crate::plot::save(&dir.join("stream_ppl.png"), &png)?;
    if o.dest.tensorboard {
        let mut tb = crate::tensorboard::EventWriter::create(&run.run_dir)?;
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
        for r in &report.rows {
            scalars.push((format!("stream/ppl/{}", tag(r)), r.ppl));
            if let Some(p) = r.ppl_past_ctx {
                scalars.push((format!("stream/ppl_past_ctx/{}", tag(r)), p));
            }
            if let Some(p) = r.ppl_past_budget {
                scalars.push((format!("stream/ppl_past_budget/{}", tag(r)), p));
            }
        }
        tb.add_scalars(step, &scalars)?;
        let (w, h) = crate::plot::png_size(&png)?;
        tb.add_png("stream/ppl_vs_position", step, w, h, png)?;
        tb.flush()?;
    }
    crate::checkpoint::write_atomic(
        &dir.join(plan.claim.report()),
        serde_json::to_string_pretty(report)?.as_bytes(),
    )?;
    Ok(())
}

/// The evicting cache policies (name, initial tokens kept, recent tokens kept) for a budget L:
/// `o.kept` (each k < L, in the order given, repeats dropped) or window only, one sink and
/// `o.sinks` initial tokens.
fn policies(o: &StreamOptions, budget: usize) -> Result<Vec<(String, usize, usize)>> {
    let kept = match &o.kept {
        Some(k) if k.is_empty() => bail!("--kept: give at least one number of kept tokens"),
        Some(k) => k.clone(),
        None => vec![0, 1, o.sinks],
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for k in kept {
        if k >= budget {
            bail!(
                "--kept {k}: every cache keeps k initial tokens and L − k ≥ 1 recent ones of the budget L = {budget}; valid k: 0 to {}",
                budget - 1
            );
        }
        if !seen.insert(k) {
            continue; // e.g. --sinks 1 repeats the one-sink row
        }
        let name = match k {
            0 => "window only".to_string(),
            1 => "window + 1 sink".to_string(),
            _ if o.kept.is_none() => "window + sinks".to_string(), // the S of --sinks
            k => format!("window + {k} sinks"),
        };
        out.push((name, k, budget - k));
    }
    Ok(out)
}

/// What `sinklab stream-eval` measured (`stream.json`).
#[derive(Debug, Clone, Serialize)]
pub struct StreamReport {
    pub run_dir: std::path::PathBuf,
    pub checkpoint: std::path::PathBuf,
    pub step: u64,
    pub tokens: usize,
    pub ctx: usize,
    /// The cache budget L every policy gets.
    pub budget: usize,
    pub sinks: usize,
    pub window: usize,
    pub model_sink_tokens: usize,
    pub slot: String,
    pub rows: Vec<StreamRow>,
    /// Where the report and the plot were written.
    #[serde(skip)]
    pub dir: std::path::PathBuf,
}
