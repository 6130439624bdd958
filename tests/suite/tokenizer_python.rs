//! A BPE tokenizer trained by sinklab on the embedded corpus gives identical ids in Python's
//! `tokenizers` (and so does the byte tokenizer).

use crate::common;

use sinklab::config::{DataConfig, TokenizerConfig};
use sinklab::data::Dataset;
use sinklab::tokenizer::Tokenizer;

#[test]
fn saved_tokenizers_give_identical_ids_in_python() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DataConfig {
        tokenizer: TokenizerConfig::Bpe {
            vocab_size: 1000,
            sample_bytes: None,
            sample_documents: None,
        },
        cache_dir: dir.path().join("cache"),
        ..DataConfig::default()
    };
    let data = Dataset::prepare(&cfg, &mut |_| {}).unwrap();
    assert_eq!(
        data.vocab_size(),
        1000,
        "the corpus is large enough for every merge"
    );
    let texts = vec![
        "To be, or not to be, that is the question:".to_string(),
        "Of Man's first disobedience, and the fruit\nOf that forbidden tree".to_string(),
        "  leading spaces, tabs\tand unicode: café, naïve, Ωμέγα, 東京 🙂".to_string(),
        "<|bos|>special tokens inside<|endoftext|>text".to_string(),
        String::new(),
    ];
    let texts_path = dir.path().join("texts.json");
    std::fs::write(&texts_path, serde_json::to_string(&texts).unwrap()).unwrap();
    let byte_path = dir.path().join("byte.json");
    Tokenizer::byte().unwrap().save(&byte_path).unwrap();
    for (name, tok_path) in [
        ("bpe", data.dir.join("tokenizer.json")),
        ("byte", byte_path),
    ] {
        let tok = Tokenizer::load(&tok_path).unwrap();
        let (ok, out) = common::run_python(
            "encode_texts.py",
            &[tok_path.to_str().unwrap(), texts_path.to_str().unwrap()],
        );
        assert!(ok, "{out}");
        let py: Vec<Vec<u32>> = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        for (text, ids) in texts.iter().zip(&py) {
            assert_eq!(&tok.encode(text).unwrap(), ids, "{name}: {text:?}");
            assert_eq!(tok.decode(ids).unwrap(), *text, "{name} decodes back");
        }
        if name == "bpe" {
            // Merges compress English: well under one id per byte.
            let n: usize = py[1].len();
            assert!(
                n * 2 < texts[1].len(),
                "{n} ids for {} bytes",
                texts[1].len()
            );
        }
    }
}
