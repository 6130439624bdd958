//! The probe kinds of `analyze` (Gu et al. Table 1): natural validation windows, uniformly
//! random tokens, and one repeated token.

use crate::data::{Batch, Dataset};
use anyhow::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A batch of probe sequences (inputs only: probes compute no loss).
pub fn batch_of(seqs: Vec<Vec<u32>>) -> Batch {
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
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let token = |rng: &mut ChaCha8Rng| loop {
        let t = rng.gen_range(0..v);
        if !data.tokenizer.is_special(t) {
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

/// A token as readable text (its decoded string, quoted), for tables and JSON.
pub fn token_text(data: &Dataset, t: u32) -> String {
    data.tokenizer
        .decode(&[t])
        .map(|s| format!("{s:?}"))
        .unwrap_or_else(|_| format!("#{t}"))
}

/// A token as a plot label: its text with each space shown as `␣` (the plot makes control
/// characters visible and cuts long labels), `∅` for an empty one, `#id` if it does not
/// decode.
pub fn token_label(data: &Dataset, t: u32) -> String {
    match data.tokenizer.decode(&[t]) {
        Ok(s) if s.is_empty() => "∅".into(),
        Ok(s) => s.replace(' ', "␣"),
        Err(_) => format!("#{t}"),
    }
}
