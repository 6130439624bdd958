//! A given text as evaluation and probe windows (`eval --text`, `analyze --text`).

use super::Batch;
use anyhow::{Result, bail};

/// A text as sequences of `len` tokens for evaluation (`eval --text`) and probing
/// (`analyze --text`). `ids` is the tokenised text, a = w·len the start of window w. Without
/// BOS window w reads ids[a .. a+len] and predicts ids[a+1 .. a+len+1] (every token but the
/// first is predicted once); with BOS it reads [BOS] + ids[a .. a+len−1] and predicts
/// ids[a .. a+len] (every token is predicted once, the first from BOS; `bos` is its id). `full_only` keeps only complete windows (probes read every position); the
/// last, partial window of an evaluation is padded with masked positions (causal attention
/// keeps the padding out of the real positions). A text shorter than one window gives one
/// window of its own length.
pub fn text_batch(ids: &[u32], len: usize, bos: Option<u32>, full_only: bool) -> Result<Batch> {
    let prefix: Vec<u32> = bos.into_iter().collect();
    let seq: Vec<u32> = prefix.iter().chain(ids).copied().collect();
    if seq.len() < 2 {
        bail!(
            "the text is {} tokens; at least {} are needed",
            ids.len(),
            2 - prefix.len()
        );
    }
    let len = len.min(seq.len() - 1);
    let mut out = Batch {
        batch: 0,
        len,
        inputs: Vec::new(),
        targets: Vec::new(),
        loss_mask: Vec::new(),
        domains: Vec::new(),
    };
    let mut at = 0; // a
    while at + usize::from(bos.is_none()) < ids.len() {
        let mut win: Vec<u32> = prefix.clone();
        let need = len + 1 - prefix.len(); // text tokens of len inputs and their targets
        win.extend(ids[at..(at + need).min(ids.len())].iter().copied());
        let n = win.len() - 1; // predicted positions in this window
        if full_only && n < len {
            break;
        }
        out.inputs.extend_from_slice(&win[..n]);
        out.targets.extend_from_slice(&win[1..]);
        out.loss_mask.extend(std::iter::repeat_n(1.0, n));
        out.inputs.extend(std::iter::repeat_n(0, len - n));
        out.targets.extend(std::iter::repeat_n(0, len - n));
        out.loss_mask.extend(std::iter::repeat_n(0.0, len - n));
        out.domains.push(0);
        out.batch += 1;
        at += len;
    }
    if out.batch == 0 {
        bail!(
            "the text is {} tokens, shorter than one window of {len}",
            ids.len()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_windows_predict_every_token_once() {
        let ids: Vec<u32> = (10..21).collect(); // 11 tokens
        // Without BOS, len 4: inputs 10..14 | 14..18 | 18,19 + pad; targets 11..=20.
        let b = text_batch(&ids, 4, None, false).unwrap();
        assert_eq!(b.batch, 3);
        assert_eq!(b.inputs, vec![10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 0, 0]);
        assert_eq!(
            b.targets,
            vec![11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 0, 0]
        );
        assert_eq!(b.loss_mask.iter().sum::<f32>(), 10.0);
        // With BOS 1, len 4: [1,10,11,12] | [1,14,15,16] | [1,18,19] + pad; targets 10..=20.
        let b = text_batch(&ids, 4, Some(1), false).unwrap();
        assert_eq!(b.inputs, vec![1, 10, 11, 12, 1, 14, 15, 16, 1, 18, 19, 0]);
        assert_eq!(
            b.targets,
            vec![10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 0]
        );
        assert_eq!(b.loss_mask.iter().sum::<f32>(), 11.0);
        // Probes keep complete windows only; a short text is one window of its length.
        assert_eq!(text_batch(&ids, 4, Some(1), true).unwrap().batch, 2);
        let short = text_batch(&ids[..3], 8, None, true).unwrap();
        assert_eq!((short.batch, short.len), (1, 2));
        assert!(text_batch(&ids[..1], 8, None, true).is_err());
    }
}
