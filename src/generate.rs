//! Decoding with a key/value cache (docs/reference.md §6): sampling, and the token-by-token
//! scores StreamingLLM's evaluation compares — a cache under a policy, dense attention in one
//! forward, and a sliding window re-computed from scratch for every token. Streaming
//! perplexity is token-by-token: token i+1 is scored from a cache holding what the policy kept
//! of tokens 0..=i. The model's own sink tokens and slots (sink logit, KV bias) are part of the
//! model and are always attended; a policy's S counts real initial tokens kept on top of them.

use crate::model::{CachePolicy, KvCache, Lm};
use anyhow::{Result, bail};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub fn ids_tensor(ids: &[u32], device: &Device) -> Tensor<2, Int> {
    let v: Vec<i64> = ids.iter().map(|&x| x as i64).collect();
    Tensor::from_data(TensorData::new(v, [1, ids.len()]), device)
}

/// Host copy of logits (B, n, V) as B·n rows of V (batch-major).
fn rows(logits: Tensor<3>) -> Vec<Vec<f32>> {
    let [b, n, v] = logits.dims();
    let flat: Vec<f32> = logits
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 logits");
    debug_assert_eq!(flat.len(), b * n * v);
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

/// Positions whose logits are formed at once by [`forward_nll`] (a block of 256 × 49,152 f32
/// logits is 50 MB).
const NLL_BLOCK: usize = 256;

/// NLL of tokens 1..n with full attention over the whole sequence in one forward, the logits
/// a block of positions at a time: what a dense cache gives token by token (the same maths;
/// the rounding differs), for any length the model's positions reach (extend them first past
/// model.ctx, [`Lm::extend_positions`]).
pub fn forward_nll(model: &Lm, tokens: &[u32], device: &Device) -> Result<Vec<f64>> {
    let n = tokens.len();
    if n < 2 {
        bail!("{n} tokens: scoring needs at least 2");
    }
    let h = model.forward_hidden(ids_tensor(&tokens[..n - 1], device)); // (1, n − 1, d)
    let mut out = Vec::with_capacity(n - 1);
    for from in (0..n - 1).step_by(NLL_BLOCK) {
        let len = NLL_BLOCK.min(n - 1 - from);
        let logits = model.unembed(h.clone().narrow(1, from, len)); // (1, len, V)
        for (r, &t) in rows(logits).iter().zip(&tokens[from + 1..from + 1 + len]) {
            out.push(nll(r, t));
        }
    }
    Ok(out)
}

/// NLL of tokens 1..n with tokens 0..n−1 fed into `cache` in one call (a prefill: every
/// position attends as it would token by token).
pub fn prefill_nll(
    model: &Lm,
    cache: &mut KvCache,
    tokens: &[u32],
    device: &Device,
) -> Result<Vec<f64>> {
    let n = tokens.len();
    if n < 2 {
        return Ok(Vec::new());
    }
    let logits = model.forward_cached(ids_tensor(&tokens[..n - 1], device), cache)?; // (1, n − 1, V)
    Ok(rows(logits)
        .iter()
        .zip(&tokens[1..])
        .map(|(r, &t)| nll(r, t))
        .collect())
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
    continue_nll(model, &mut cache, tokens, device, progress)
}

/// NLL of tokens 1..n, tokens 0..n−1 fed one at a time into `cache`, which may already hold
/// the tokens before them.
pub fn continue_nll(
    model: &Lm,
    cache: &mut KvCache,
    tokens: &[u32],
    device: &Device,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(tokens.len().saturating_sub(1));
    for (i, pair) in tokens.windows(2).enumerate() {
        let logits = model.forward_cached(ids_tensor(&pair[..1], device), cache)?;
        out.push(nll(&rows(logits)[0], pair[1]));
        progress(i + 1);
    }
    Ok(out)
}

/// [`continue_nll`] for a cache of several rows, one per policy ([`KvCache::fork_rows`]):
/// the same tokens fed to every row, each token a (rows, 1) batch, so each forward reads the
/// weights once for all of them. One NLL vector per row, equal to that row's own
/// [`continue_nll`] (tested).
pub fn continue_nll_rows(
    model: &Lm,
    cache: &mut KvCache,
    rows_n: usize,
    tokens: &[u32],
    device: &Device,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<Vec<f64>>> {
    let mut out = vec![Vec::with_capacity(tokens.len().saturating_sub(1)); rows_n];
    for (i, pair) in tokens.windows(2).enumerate() {
        let x = Tensor::from_data(
            TensorData::new(vec![pair[0] as i64; rows_n], [rows_n, 1]),
            device,
        );
        let logits = model.forward_cached(x, cache)?; // (rows, 1, V)
        for (o, row) in out.iter_mut().zip(rows(logits)) {
            o.push(nll(&row, pair[1]));
        }
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

/// NLL of tokens 1..n, token i+1 predicted by a fresh forward over the `window` tokens ending
/// at i (sliding window with re-computation, `window` ≤ model.ctx), `batch` windows per
/// forward.
pub fn recompute_nll(
    model: &Lm,
    tokens: &[u32],
    window: usize,
    batch: usize,
    device: &Device,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<f64>> {
    let n = tokens.len();
    if window == 0 || window > model.cfg.ctx {
        bail!(
            "re-computation window {window}: need 1 ≤ window ≤ model.ctx = {}",
            model.cfg.ctx
        );
    }
    let mut out = vec![f64::NAN; n - 1];
    // Positions 0..min(window, n−1) come from one forward over the first window.
    let head = n.min(window + 1);
    out[..head - 1].copy_from_slice(&dense_nll(model, &tokens[..head], device)?);
    progress(head - 1);
    let rest: Vec<usize> = (window..n - 1).collect(); // predict tokens[i+1] from tokens[i+1−window..=i]
    for chunk in rest.chunks(batch.max(1)) {
        let ids: Vec<i64> = chunk
            .iter()
            .flat_map(|&i| tokens[i + 1 - window..=i].iter().map(|&x| x as i64))
            .collect();
        let x = Tensor::<2, Int>::from_data(TensorData::new(ids, [chunk.len(), window]), device);
        let last = model.forward_last(x); // (b, 1, V)
        let v = last.dims()[2];
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
