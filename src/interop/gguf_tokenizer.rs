//! The tokenizer of a GGUF file rebuilt from its metadata as a Hugging Face `tokenizer.json`
//! (docs/formats.md, "GGUF tokenizers"): `tokenizer.ggml.model = "gpt2"` is byte-level BPE over
//! `tokenizer.ggml.tokens` and `tokenizer.ggml.merges` (rank = index), with the pre-tokenizer
//! llama.cpp associates with `tokenizer.ggml.pre`; control tokens (token type 3) become special
//! added tokens, and the unknown token (`tokenizer.ggml.unknown_token_id`) catches bytes the
//! vocabulary lacks, as Hugging Face's tokenizer does.

use super::gguf::Gguf;
use anyhow::{Result, anyhow, bail};
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};

/// `tokenizer.ggml.pre` values whose pre-tokenizer is "each digit alone, then GPT-2's byte-level
/// split" (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_STARCODER` group).
const DIGITS_THEN_GPT2: [&str; 7] = [
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "minerva-7b",
];

/// The rebuilt tokenizer, its `tokenizer.json` text, and the names of its BOS and EOS tokens.
pub struct Rebuilt {
    pub json: String,
    pub bos: String,
    pub eos: String,
    pub unk: Option<String>,
}

/// Rebuild the tokenizer of `g`.
pub fn rebuild(g: &Gguf) -> Result<Rebuilt> {
    let file = g.path.display().to_string();
    let model = g.get("tokenizer.ggml.model")?.as_str().unwrap_or_default();
    if model != "gpt2" {
        bail!(
            "{file}: tokenizer.ggml.model = {model:?} is not supported; sinklab rebuilds \
             byte-level BPE tokenizers (\"gpt2\")"
        );
    }
    let strings = |key: &str| -> Result<Vec<String>> {
        g.get(key)?
            .as_array()
            .ok_or_else(|| anyhow!("{file}: `{key}` is not an array"))?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| anyhow!("{file}: `{key}` holds a non-string"))
            })
            .collect()
    };
    let tokens = strings("tokenizer.ggml.tokens")?;
    let merges: Vec<(String, String)> = strings("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| anyhow!("{file}: merge {m:?} is not two tokens"))
        })
        .collect::<Result<_>>()?;
    let types: Vec<i64> = match g.metadata.get("tokenizer.ggml.token_type") {
        Some(v) => v
            .as_array()
            .ok_or_else(|| anyhow!("{file}: `tokenizer.ggml.token_type` is not an array"))?
            .iter()
            .map(|x| x.as_u64().map(|u| u as i64).unwrap_or(1))
            .collect(),
        None => vec![1; tokens.len()],
    };
    let id = |key: &str| -> Option<usize> { g.metadata.get(key)?.as_u64().map(|x| x as usize) };
    let name_of = |key: &str| -> Result<Option<String>> {
        match id(key) {
            None => Ok(None),
            Some(i) => tokens
                .get(i)
                .cloned()
                .map(Some)
                .ok_or_else(|| anyhow!("{file}: `{key}` = {i} is not a token id")),
        }
    };
    let bos = name_of("tokenizer.ggml.bos_token_id")?
        .ok_or_else(|| anyhow!("{file}: `tokenizer.ggml.bos_token_id` is missing"))?;
    let eos = name_of("tokenizer.ggml.eos_token_id")?
        .ok_or_else(|| anyhow!("{file}: `tokenizer.ggml.eos_token_id` is missing"))?;
    let unk = name_of("tokenizer.ggml.unknown_token_id")?;
    let pre = g
        .metadata
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.as_str())
        .unwrap_or("default");
    let byte_level = ByteLevel::new(false, true, true);
    let pre_tokenizer: PreTokenizerWrapper = if DIGITS_THEN_GPT2.contains(&pre) {
        PreTokenizerWrapper::Sequence(Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            PreTokenizerWrapper::ByteLevel(byte_level),
        ]))
    } else if pre == "gpt2" || pre == "default" {
        PreTokenizerWrapper::ByteLevel(byte_level)
    } else {
        bail!(
            "{file}: tokenizer.ggml.pre = {pre:?} is not supported; sinklab rebuilds the \
             \"gpt2\"/\"default\" and the digits-then-GPT-2 family ({})",
            DIGITS_THEN_GPT2.join(", ")
        );
    };
    let mut vocab = Vocab::default();
    for (i, t) in tokens.iter().enumerate() {
        vocab.insert(t.clone(), i as u32);
    }
    let mut builder = BPE::builder().vocab_and_merges(vocab, merges);
    if let Some(u) = &unk {
        builder = builder.unk_token(u.clone());
    }
    let bpe = builder
        .build()
        .map_err(|e| anyhow!("{file}: building the BPE model: {e}"))?;
    let mut tok = Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(pre_tokenizer));
    tok.with_decoder(Some(ByteLevel::new(true, true, true)));
    // Control tokens (type 3) are matched whole in text and never split.
    let control: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(_, ty)| **ty == 3)
        .map(|(t, _)| AddedToken::from(t.clone(), true))
        .collect();
    tok.add_special_tokens(control)
        .map_err(|e| anyhow!("{file}: adding control tokens: {e}"))?;
    let json = tok
        .to_string(true)
        .map_err(|e| anyhow!("{file}: serialising the tokenizer: {e}"))?;
    Ok(Rebuilt {
        json,
        bos,
        eos,
        unk,
    })
}
