//! Tokenizers: byte-level (one id per UTF-8 byte), byte-level BPE and a word-level vocabulary
//! for generated tasks (tokens separated by spaces), all expressed as a
//! Hugging Face `tokenizers` pipeline so that the saved `tokenizer.json` loads in Python's
//! `tokenizers` and gives identical ids.
//!
//! Id layout: `<|bos|>` = 0, `<|endoftext|>` = 1, then the model's tokens. For the byte
//! tokenizer byte `b` has id `b + 2` (vocabulary 258); for BPE the 256 byte symbols come next
//! in GPT-2 byte-to-unicode order, then the merges.

use anyhow::{Context, Result, anyhow};
use std::path::Path;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder, Vocab};
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::models::{ModelWrapper, TrainerWrapper};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

pub const BOS: &str = "<|bos|>";
/// Vocabulary of the byte tokenizer: 256 bytes and the two special tokens.
pub const BYTE_VOCAB: usize = 258;
pub const EOT: &str = "<|endoftext|>";

/// GPT-2's reversible map from bytes to printable unicode characters (the `ByteLevel`
/// pre-tokenizer's alphabet).
pub fn bytes_to_unicode() -> Vec<(u8, char)> {
    let mut bs: Vec<u8> = (b'!'..=b'~')
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs: Vec<u32> = bs.iter().map(|&b| b as u32).collect();
    let mut n = 0;
    for b in 0..=255u8 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.into_iter()
        .zip(cs)
        .map(|(b, c)| (b, char::from_u32(c).expect("valid code point")))
        .collect()
}

/// A tokenizer with its begin-of-sequence and end-of-document tokens (sinklab's own
/// `<|bos|>` / `<|endoftext|>`, or a pretrained tokenizer's) and every special token id.
pub struct Tokenizer {
    inner: HfTokenizer,
    pub bos_id: u32,
    pub eot_id: u32,
    /// Ids of the special (added, `special = true`) tokens, sorted.
    pub special_ids: Vec<u32>,
}

fn specials() -> Vec<AddedToken> {
    vec![AddedToken::from(BOS, true), AddedToken::from(EOT, true)]
}

fn byte_level() -> ByteLevel {
    // No prefix space (GPT-2 style), offsets trimmed, GPT-2 split regex.
    ByteLevel::new(false, true, true)
}

fn assemble(model: BPE) -> HfTokenizer {
    let mut tok = HfTokenizer::new(model);
    tok.with_pre_tokenizer(Some(byte_level()));
    tok.with_decoder(Some(byte_level()));
    tok
}

impl Tokenizer {
    fn from_hf(inner: HfTokenizer) -> Result<Self> {
        Self::with_names(inner, BOS, EOT)
    }

    fn with_names(inner: HfTokenizer, bos: &str, eot: &str) -> Result<Self> {
        let bos_id = inner
            .token_to_id(bos)
            .ok_or_else(|| anyhow!("tokenizer lacks the begin-of-sequence token {bos:?}"))?;
        let eot_id = inner
            .token_to_id(eot)
            .ok_or_else(|| anyhow!("tokenizer lacks the end-of-document token {eot:?}"))?;
        let mut special_ids: Vec<u32> = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| id)
            .collect();
        special_ids.extend([bos_id, eot_id]);
        special_ids.sort_unstable();
        special_ids.dedup();
        Ok(Self {
            inner,
            bos_id,
            eot_id,
            special_ids,
        })
    }

    /// A `tokenizer.json` whose begin-of-sequence and end-of-document tokens are `bos` and
    /// `eot` (a pretrained model's tokenizer).
    pub fn load_named(path: &Path, bos: &str, eot: &str) -> Result<Self> {
        let inner = HfTokenizer::from_file(path)
            .map_err(|e| anyhow!("loading tokenizer {}: {e}", path.display()))?;
        Self::with_names(inner, bos, eot).map_err(|e| anyhow!("{}: {e}", path.display()))
    }

    /// Whether `id` is a special token (never drawn as a random probe token).
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.binary_search(&id).is_ok()
    }

    /// The ids random tokens are drawn from: every non-special id below `vocab`. When the
    /// specials are exactly the first ids (sinklab's own tokenizers: 0 and 1), this is a range.
    pub fn regular_ids(&self, vocab: u32) -> RegularIds {
        let k = self.special_ids.len() as u32;
        let prefix = self
            .special_ids
            .iter()
            .enumerate()
            .all(|(i, &s)| s == i as u32);
        if prefix {
            RegularIds::Range(k, vocab.max(k + 1))
        } else {
            RegularIds::List((0..vocab).filter(|&t| !self.is_special(t)).collect())
        }
    }

    /// Byte-level tokenizer: ids 0, 1 for the specials, byte b ↦ b + 2.
    pub fn byte() -> Result<Self> {
        let mut vocab = Vocab::default();
        vocab.insert(BOS.into(), 0);
        vocab.insert(EOT.into(), 1);
        for (b, c) in bytes_to_unicode() {
            vocab.insert(c.to_string(), b as u32 + 2);
        }
        let model = BPE::builder()
            .vocab_and_merges(vocab, vec![])
            .build()
            .map_err(|e| anyhow!("building byte tokenizer: {e}"))?;
        let mut tok = assemble(model);
        tok.add_special_tokens(specials())
            .map_err(|e| anyhow!("{e}"))?;
        Self::from_hf(tok)
    }

    /// A word-level tokenizer: ids 0, 1 for the specials, `words[i]` ↦ i + 2; text is the
    /// words separated by spaces (a generated task's vocabulary).
    pub fn word_level(words: &[String]) -> Result<Self> {
        let mut vocab = Vocab::default();
        vocab.insert(BOS.into(), 0);
        vocab.insert(EOT.into(), 1);
        for (i, w) in words.iter().enumerate() {
            vocab.insert(w.clone(), i as u32 + 2);
        }
        let model = WordLevel::builder()
            .vocab(vocab)
            .unk_token(EOT.into())
            .build()
            .map_err(|e| anyhow!("building word-level tokenizer: {e}"))?;
        let mut tok = HfTokenizer::new(model);
        tok.with_pre_tokenizer(Some(WhitespaceSplit));
        tok.add_special_tokens(specials())
            .map_err(|e| anyhow!("{e}"))?;
        Self::from_hf(tok)
    }

    /// Train a byte-level BPE of `vocab_size` ids (specials included) on `texts`.
    pub fn train_bpe<S: AsRef<str> + Send>(
        vocab_size: usize,
        texts: impl Iterator<Item = S> + Send,
    ) -> Result<Self> {
        let mut tok = assemble(BPE::default());
        let trainer = BpeTrainerBuilder::new()
            .vocab_size(vocab_size)
            .min_frequency(2)
            .show_progress(false)
            .special_tokens(specials())
            .initial_alphabet(bytes_to_unicode().into_iter().map(|(_, c)| c).collect())
            .build();
        let mut trainer = TrainerWrapper::BpeTrainer(trainer);
        tok.train(&mut trainer, texts)
            .map_err(|e| anyhow!("training BPE: {e}"))?;
        if !matches!(tok.get_model(), ModelWrapper::BPE(_)) {
            return Err(anyhow!("BPE training produced another model type"));
        }
        Self::from_hf(tok)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let inner = HfTokenizer::from_file(path)
            .map_err(|e| anyhow!("loading tokenizer {}: {e}", path.display()))?;
        Self::from_hf(inner)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        self.inner
            .save(path, true)
            .map_err(|e| anyhow!("saving tokenizer {}: {e}", path.display()))
    }

    /// The string of token `id` (as the vocabulary spells it).
    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Ids of `text` (no special tokens added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| anyhow!("encoding: {e}"))
            .context("tokenizing text")?;
        Ok(enc.get_ids().to_vec())
    }

    /// Ids of `text` (no special tokens added) and how many of them stand for text the
    /// vocabulary cannot represent ([`Unrepresented`]).
    pub fn encode_counted(&self, text: &str) -> Result<(Vec<u32>, Unrepresented)> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow!("encoding: {e}"))
            .context("tokenizing text")?;
        let (unk, bytes) = self.fallback_tokens();
        let mut n = Unrepresented::default();
        for ((&id, tok), &(a, b)) in enc
            .get_ids()
            .iter()
            .zip(enc.get_tokens())
            .zip(enc.get_offsets())
        {
            // a text that literally spells the token (`<unk>`, `<0x41>`) is represented
            let literal = text.get(a..b) == Some(tok.as_str());
            if literal {
                continue;
            }
            if unk == Some(id) {
                n.unknown += 1;
            } else if bytes.binary_search(&id).is_ok() {
                n.byte_fallback += 1;
            }
        }
        Ok((enc.get_ids().to_vec(), n))
    }

    /// The model's unknown-token id (if it has one) and its byte-fallback ids (`<0x00>` …
    /// `<0xFF>`, sorted; empty unless the model falls back to bytes).
    fn fallback_tokens(&self) -> (Option<u32>, Vec<u32>) {
        let (unk, byte_fallback) = match self.inner.get_model() {
            ModelWrapper::BPE(m) => (m.unk_token.clone(), m.byte_fallback),
            ModelWrapper::WordPiece(m) => (Some(m.unk_token.clone()), false),
            ModelWrapper::WordLevel(m) => (Some(m.unk_token.clone()), false),
            ModelWrapper::Unigram(m) => {
                // the unknown id is private to the model; its serialised form names it
                let id = serde_json::to_value(m)
                    .ok()
                    .and_then(|v| v.get("unk_id")?.as_u64());
                let unk = id.and_then(|i| self.inner.id_to_token(i as u32));
                (unk, m.byte_fallback())
            }
        };
        let unk = unk.and_then(|u| self.inner.token_to_id(&u));
        let mut bytes: Vec<u32> = if byte_fallback {
            (0..=255u8)
                .filter_map(|b| self.inner.token_to_id(&format!("<{b:#04X}>")))
                .collect()
        } else {
            Vec::new()
        };
        bytes.sort_unstable();
        (unk, bytes)
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| anyhow!("decoding: {e}"))
    }
}

/// Tokens of an encoded text that stand for text the vocabulary cannot represent: the model's
/// unknown token (a word-level vocabulary's, e.g. a synthetic task's, on any other text; a BPE
/// without the bytes it meets) and byte-fallback tokens (`<0xE2>`, SentencePiece-style
/// vocabularies spelling a character byte by byte). Byte-level tokenizers (sinklab's byte and
/// BPE tokenizers, GPT-2-style pretrained ones) represent every text and count 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Unrepresented {
    pub unknown: usize,
    pub byte_fallback: usize,
}

impl Unrepresented {
    pub fn total(&self) -> usize {
        self.unknown + self.byte_fallback
    }
}

/// The non-special ids random tokens are drawn from.
#[derive(Debug, Clone, PartialEq)]
pub enum RegularIds {
    /// `lo..hi`.
    Range(u32, u32),
    List(Vec<u32>),
}

impl RegularIds {
    /// One id, uniformly.
    pub fn draw<R: rand::Rng>(&self, rng: &mut R) -> u32 {
        match self {
            RegularIds::Range(lo, hi) => rng.gen_range(*lo..*hi),
            RegularIds::List(ids) => ids[rng.gen_range(0..ids.len())],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokenizer_ids_are_bytes_plus_two() {
        let t = Tokenizer::byte().unwrap();
        assert_eq!(t.vocab_size(), 258);
        assert_eq!((t.bos_id, t.eot_id), (0, 1));
        let text = "Hé <|bos|>!\n";
        let ids = t.encode(text).unwrap();
        let mut want: Vec<u32> = Vec::new();
        for part in ["Hé ".as_bytes(), &[], "!\n".as_bytes()] {
            want.extend(part.iter().map(|&b| b as u32 + 2));
        }
        want.insert(4, 0); // the special token in the middle ("H", "é" = 2 bytes, " ")
        assert_eq!(ids, want);
        assert_eq!(t.decode(&ids).unwrap(), text);
    }

    #[test]
    fn unknown_and_byte_fallback_tokens_are_counted_where_the_text_lacks_them() {
        let words: Vec<String> = ["a", "b", "c"].iter().map(|w| w.to_string()).collect();
        let t = Tokenizer::word_level(&words).unwrap();
        // "zzz" and "é" are unknown; the literal end-of-text token is not
        let (ids, n) = t.encode_counted("a zzz b <|endoftext|> é c").unwrap();
        assert_eq!(ids, [2, 1, 3, 1, 1, 4]);
        assert_eq!(
            n,
            Unrepresented {
                unknown: 2,
                byte_fallback: 0
            }
        );
        assert_eq!(ids, t.encode("a zzz b <|endoftext|> é c").unwrap());
        // byte-level tokenizers represent everything
        let (_, n) = Tokenizer::byte()
            .unwrap()
            .encode_counted("zzz é 東京 🙂")
            .unwrap();
        assert_eq!(n.total(), 0);
        // a SentencePiece-style BPE: "é" falls back to its two bytes, "東" (no byte tokens for
        // 0xE6) to the unknown token, a literal "<0x41>" is text
        let mut vocab = Vocab::default();
        let toks = [
            "<unk>", "a", "<", ">", "0", "x", "4", "1", "<0xC3>", "<0xA9>", "<0x41>", "<0", "<0x",
            "<0x4", "<0x41",
        ];
        for (i, tok) in toks.iter().enumerate() {
            vocab.insert(tok.to_string(), i as u32);
        }
        let merges = vec![
            ("<".to_string(), "0".to_string()),
            ("<0".to_string(), "x".to_string()),
            ("<0x".to_string(), "4".to_string()),
            ("<0x4".to_string(), "1".to_string()),
            ("<0x41".to_string(), ">".to_string()),
        ];
        let model = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .unk_token("<unk>".into())
            .byte_fallback(true)
            .build()
            .unwrap();
        let t = Tokenizer {
            inner: HfTokenizer::new(model),
            bos_id: 0,
            eot_id: 0,
            special_ids: vec![],
        };
        let (ids, n) = t.encode_counted("aé<0x41>東").unwrap();
        assert_eq!(&ids[..3], [1, 8, 9], "{ids:?}");
        assert_eq!(
            ids[3], 10,
            "the literal <0x41> merges to its token: {ids:?}"
        );
        assert_eq!(
            n,
            Unrepresented {
                unknown: 1,
                byte_fallback: 2
            },
            "{ids:?}"
        );
    }

    #[test]
    fn bpe_trains_to_the_requested_size_and_roundtrips() {
        let text = "the cat sat on the mat. the cat ate the rat. ".repeat(50);
        let t = Tokenizer::train_bpe(300, [text.as_str()].into_iter()).unwrap();
        assert!(
            t.vocab_size() <= 300 && t.vocab_size() > 258,
            "{}",
            t.vocab_size()
        );
        let ids = t.encode("the cat sat").unwrap();
        assert!(
            ids.len() < "the cat sat".len(),
            "merges shorten the sequence: {ids:?}"
        );
        assert_eq!(t.decode(&ids).unwrap(), "the cat sat");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokenizer.json");
        t.save(&p).unwrap();
        let back = Tokenizer::load(&p).unwrap();
        assert_eq!(
            back.encode("the rat sat").unwrap(),
            t.encode("the rat sat").unwrap()
        );
    }
}
