//! Pretrained checkpoints in and out, against independent NumPy references:
//! `scripts/reference_gguf.py` (GGUF reader, dequantisers, tokenizer rebuild and a float64
//! LLaMA forward, written from the format description) for `tests/fixtures/gguf/` and the real
//! SmolLM2-135M; `scripts/reference_hf.py` (Hugging Face layouts of LLaMA, Mistral, Qwen2,
//! GPT-2 and GPT-NeoX, float64 forward) for directories it generates at test time. Python's
//! `tokenizers` checks the rebuilt tokenizers.

use crate::common::{self, read_json};
use burn::tensor::{Int, Tensor, TensorData};
use serde_json::Value;
use sinklab::generate::{self, Sampling};
use sinklab::interop::{self, gguf::Gguf};
use sinklab::model::{CachePolicy, Lm};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Import `src` into `out` on the CPU.
fn import(src: &Path, out: &Path) -> interop::ImportSummary {
    interop::import(src, out, None, None, &common::device(), &mut |_| {})
        .unwrap_or_else(|e| panic!("importing {}: {e:#}", src.display()))
}

/// The model of a run directory (no data preparation).
fn model_of(run_dir: &Path) -> Lm {
    sinklab::run::load_checkpoint(run_dir, &common::device())
        .unwrap()
        .1
}

/// Logits (T × V, row-major) of one sequence.
fn logits(model: &Lm, ids: &[u32]) -> (Vec<f32>, usize) {
    let dev = common::device();
    let x: Vec<i64> = ids.iter().map(|&t| t as i64).collect();
    let x = Tensor::<2, Int>::from_data(TensorData::new(x, [1, ids.len()]), &dev);
    let y = burn::module::Module::valid(model).forward(x);
    let v = y.dims()[2];
    (
        y.into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .unwrap(),
        v,
    )
}

/// A plain JSON array of numbers.
fn plain_floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected an array, got {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn argmax(row: &[f32]) -> u32 {
    row.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
            if v > bv { (i, v) } else { (bi, bv) }
        })
        .0 as u32
}

fn logsumexp(row: &[f32]) -> f64 {
    let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    m + row.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln()
}

/// Mean next-token NLL of `ids` from its logits.
fn mean_nll(l: &[f32], v: usize, ids: &[u32]) -> f64 {
    let t = ids.len();
    (0..t - 1)
        .map(|i| {
            let row = &l[i * v..(i + 1) * v];
            logsumexp(row) - row[ids[i + 1] as usize] as f64
        })
        .sum::<f64>()
        / (t - 1) as f64
}

fn greedy(model: &Lm, prompt: &[u32], n: usize) -> Vec<u32> {
    let s = Sampling {
        temperature: 0.0,
        top_k: 0,
        seed: 0,
    };
    generate::generate(model, prompt, n, &s, CachePolicy::DENSE, &common::device()).unwrap()
}

fn sha256_f32(data: &[f32]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for x in data {
        h.update(x.to_le_bytes());
    }
    sinklab::data::hex(&h.finalize())
}

#[test]
fn gguf_dequantisation_is_bitwise_the_reference() {
    let exp = read_json(&fixtures().join("tiny/expected.json"));
    let mut checked = 0;
    for (file, f) in exp["files"].as_object().unwrap() {
        let g = Gguf::open(&fixtures().join("tiny").join(file)).unwrap();
        assert_eq!(g.version as u64, f["version"].as_u64().unwrap(), "{file}");
        assert_eq!(
            g.data_offset as u64,
            f["data_offset"].as_u64().unwrap(),
            "{file}"
        );
        for (name, t) in f["tensors"].as_object().unwrap() {
            let (shape, data) = g.tensor(name).unwrap();
            let want: Vec<usize> = t["numpy_shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect();
            assert_eq!(shape, want, "{file} {name}");
            assert_eq!(
                sha256_f32(&data),
                t["f32_sha256"].as_str().unwrap(),
                "{file} {name} ({})",
                t["type"]
            );
            checked += 1;
        }
    }
    // 8 files: 6 × 21 tensors (tied ones 20) and the 1-layer K-quant pair
    assert!(checked >= 100, "{checked} tensors");
}

/// A metadata value as the reference writes it.
fn value_json(v: &interop::gguf::Value) -> Value {
    use interop::gguf::Value as V;
    match v {
        V::Array(a) => Value::Array(a.iter().map(value_json).collect()),
        V::Str(s) => Value::String(s.clone()),
        V::Bool(b) => Value::Bool(*b),
        V::F32(x) => serde_json::json!(*x as f64),
        V::F64(x) => serde_json::json!(*x),
        V::I8(x) => serde_json::json!(*x),
        V::I16(x) => serde_json::json!(*x),
        V::I32(x) => serde_json::json!(*x),
        V::I64(x) => serde_json::json!(*x),
        other => serde_json::json!(other.as_u64().unwrap()),
    }
}

#[test]
fn gguf_metadata_of_every_value_type_and_nested_arrays() {
    let exp = read_json(&fixtures().join("tiny/expected.json"));
    let kv = &exp["kv_file"];
    let g = Gguf::open(&fixtures().join("tiny").join(kv["file"].as_str().unwrap())).unwrap();
    let want = kv["metadata"].as_object().unwrap();
    assert_eq!(g.metadata.len(), want.len());
    for (key, w) in want {
        let got = value_json(&g.metadata[key]);
        assert_eq!(got, w["value"], "{key} ({})", w["type"]);
    }
}

#[test]
fn gguf_tiny_models_import_and_match_the_numpy_forward() {
    let exp = read_json(&fixtures().join("tiny/expected.json"));
    let tokens = ids(&exp["tokens"]);
    let dir = tempfile::tempdir().unwrap();
    for (file, f) in exp["files"].as_object().unwrap() {
        let out = dir.path().join(file.trim_end_matches(".gguf"));
        let s = import(&fixtures().join("tiny").join(file), &out);
        assert_eq!(
            s.exp.model.n_kv_heads.unwrap_or(s.exp.model.n_heads),
            f["config"]["n_head_kv"].as_u64().unwrap() as usize,
            "{file}"
        );
        let model = model_of(&out);
        let (l, v) = logits(&model, &tokens);
        let want = &f["logits"];
        assert_eq!(v, want["shape"][1].as_u64().unwrap() as usize);
        for (row, full) in want["full_rows"].as_object().unwrap() {
            let r: usize = row.parse().unwrap();
            common::fixture::assert_close(
                &l[r * v..(r + 1) * v],
                &plain_floats(full),
                1e-4,
                1e-3,
                &format!("{file} logits row {r}"),
            );
        }
        for (t, a) in want["argmax"].as_array().unwrap().iter().enumerate() {
            assert_eq!(
                argmax(&l[t * v..(t + 1) * v]) as u64,
                a.as_u64().unwrap(),
                "{file} argmax {t}"
            );
            let lse = want["logsumexp"][t].as_f64().unwrap();
            assert!(
                (logsumexp(&l[t * v..(t + 1) * v]) - lse).abs() < 1e-3,
                "{file} logsumexp {t}"
            );
        }
        let nll = mean_nll(&l, v, &tokens);
        let want_nll = want["mean_nll"].as_f64().unwrap();
        assert!(
            (nll - want_nll).abs() < 1e-4,
            "{file}: mean NLL {nll} vs {want_nll}"
        );
        let gr = &f["greedy"];
        assert_eq!(
            greedy(&model, &ids(&gr["prompt"]), 8),
            ids(&gr["new_tokens"]),
            "{file}: greedy continuation (KV cache)"
        );
    }
}

#[test]
fn gguf_tokenizer_rebuilt_from_metadata_matches_python_tokenizers() {
    let exp = read_json(&fixtures().join("tiny/expected.json"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q8");
    import(&fixtures().join("tiny/tiny-Q8_0.gguf"), &out);
    let tok_path = out.join("tokenizer.json");
    let tok = sinklab::tokenizer::Tokenizer::load_named(&tok_path, "<|im_start|>", "<|endoftext|>")
        .unwrap();
    let samples = exp["tokenizer"]["samples"].as_array().unwrap();
    let texts: Vec<String> = samples
        .iter()
        .map(|s| s["text"].as_str().unwrap().to_string())
        .collect();
    for (s, text) in samples.iter().zip(&texts) {
        assert_eq!(
            tok.encode(text).unwrap(),
            ids(&s["ids"]),
            "sinklab: {text:?}"
        );
    }
    let texts_path = dir.path().join("texts.json");
    std::fs::write(&texts_path, serde_json::to_string(&texts).unwrap()).unwrap();
    let (ok, py) = common::run_python(
        "encode_texts.py",
        &[tok_path.to_str().unwrap(), texts_path.to_str().unwrap()],
    );
    assert!(ok, "{py}");
    let py: Vec<Vec<u32>> = serde_json::from_str(py.lines().last().unwrap()).unwrap();
    for ((s, text), p) in samples.iter().zip(&texts).zip(&py) {
        assert_eq!(
            p,
            &ids(&s["ids"]),
            "Python tokenizers on the rebuilt file: {text:?}"
        );
    }
}

#[test]
fn import_errors_name_the_file_and_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let fail = |src: &Path, needle: &str| {
        let e = interop::import(
            src,
            &runs.join("x"),
            None,
            None,
            &common::device(),
            &mut |_| {},
        )
        .err()
        .unwrap_or_else(|| panic!("{} imported", src.display()));
        let msg = format!("{e:#}");
        assert!(msg.contains(needle), "{msg}");
        let left: Vec<_> = std::fs::read_dir(&runs)
            .map(|r| r.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{msg}: left {left:?}");
    };
    // a truncated file
    let bytes = std::fs::read(fixtures().join("tiny/tiny-F32.gguf")).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    fail(&cut, "cut.gguf");
    // an unsupported quantisation type: blk.0.attn_q.weight patched from F32 (0) to Q5_0 (6)
    let name = b"blk.0.attn_q.weight";
    let at = bytes
        .windows(name.len())
        .position(|w| w == name)
        .expect("tensor name in the header");
    let n_dims_at = at + name.len();
    let n_dims = u32::from_le_bytes(bytes[n_dims_at..n_dims_at + 4].try_into().unwrap()) as usize;
    let type_at = n_dims_at + 4 + 8 * n_dims;
    let mut q5 = bytes.clone();
    q5[type_at..type_at + 4].copy_from_slice(&6u32.to_le_bytes());
    let q5_path = dir.path().join("q5.gguf");
    std::fs::write(&q5_path, &q5).unwrap();
    fail(&q5_path, "Q5_0");
    // an architecture that is not llama
    let arch = b"llama";
    let mut gpt = bytes.clone();
    let key = b"general.architecture";
    let k = gpt.windows(key.len()).position(|w| w == key).unwrap();
    // value: u32 type (8 = string), u64 length 5, "llama"
    let v = k + key.len() + 4 + 8;
    assert_eq!(&gpt[v..v + 5], arch);
    gpt[v..v + 5].copy_from_slice(b"mamba");
    let gpt_path = dir.path().join("mamba.gguf");
    std::fs::write(&gpt_path, &gpt).unwrap();
    fail(&gpt_path, "mamba");
    // not a model at all, and a directory without config.json
    fail(&dir.path().join("nothing.gguf"), "nothing.gguf");
    let empty = dir.path().join("empty_dir");
    std::fs::create_dir(&empty).unwrap();
    fail(&empty, "empty_dir");
    // an existing run or someone else's files are never overwritten; an empty directory (or
    // the stub of a start that never reached a checkpoint) takes the import
    let tiny = |out: &Path| {
        interop::import(
            &fixtures().join("tiny/tiny-F32.gguf"),
            out,
            None,
            None,
            &common::device(),
            &mut |_| {},
        )
    };
    std::fs::create_dir_all(runs.join("taken")).unwrap();
    tiny(&runs.join("taken")).unwrap();
    let e = tiny(&runs.join("taken")).err().unwrap();
    assert!(format!("{e:#}").contains("already holds a run"), "{e:#}");
    std::fs::create_dir_all(runs.join("notes")).unwrap();
    std::fs::write(runs.join("notes/notes.txt"), "mine").unwrap();
    let e = tiny(&runs.join("notes")).err().unwrap();
    assert!(format!("{e:#}").contains("notes.txt"), "{e:#}");
    let left: Vec<_> = std::fs::read_dir(runs.join("notes"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(
        left.len(),
        1,
        "the refused import wrote into someone else's directory"
    );
}

/// The twelve Hugging Face directories of `reference_hf.py make`, generated at test time.
fn hf_fixtures(dir: &Path) -> Value {
    let (ok, out) = common::run_python("reference_hf.py", &["make", dir.to_str().unwrap()]);
    assert!(ok, "{out}");
    read_json(&dir.join("expected.json"))
}

fn check_case(name: &str, case: &Value, run_dir: &Path) {
    let seq = ids(&case["ids"]);
    let model = model_of(run_dir);
    let (l, v) = logits(&model, &seq);
    let want: Vec<f64> = case["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(plain_floats)
        .collect();
    assert_eq!(l.len(), want.len(), "{name}: logits shape");
    common::fixture::assert_close(&l, &want, 1e-4, 1e-4, &format!("{name}: logits"));
    let nll = mean_nll(&l, v, &seq);
    let want_nll = case["nll_mean"].as_f64().unwrap();
    assert!(
        (nll - want_nll).abs() < 1e-4,
        "{name}: NLL {nll} vs {want_nll}"
    );
    assert_eq!(
        greedy(&model, &seq, 8),
        ids(&case["greedy"]),
        "{name}: greedy"
    );
}

#[test]
fn hugging_face_checkpoints_import_and_match_the_numpy_forward() {
    let dir = tempfile::tempdir().unwrap();
    let hf = dir.path().join("hf");
    let exp = hf_fixtures(&hf);
    let mut imported = 0;
    for (name, case) in exp["cases"].as_object().unwrap() {
        let out = dir.path().join("runs").join(name);
        let r = interop::import(
            &hf.join(name),
            &out,
            None,
            None,
            &common::device(),
            &mut |_| {},
        );
        if name == "mistral_headdim" {
            // head_dim ≠ hidden / heads is refused, by name
            let e = format!("{:#}", r.err().expect("mistral_headdim imports"));
            assert!(e.contains("head_dim = 32"), "{e}");
            assert!(!out.exists());
            continue;
        }
        r.unwrap_or_else(|e| panic!("{name}: {e:#}"));
        check_case(name, case, &out);
        // The model's own tokenizer, with identical ids.
        let tok = sinklab::tokenizer::Tokenizer::load(&out.join("tokenizer.json")).ok();
        let hf_tok =
            tokenizers::Tokenizer::from_file(hf.join(name).join("tokenizer.json")).unwrap();
        for s in case["tokenizer"]["samples"].as_array().unwrap() {
            let text = s["text"].as_str().unwrap();
            let want = ids(&s["ids_no_special"]);
            assert_eq!(
                hf_tok.encode(text, false).unwrap().get_ids(),
                want.as_slice(),
                "{name}"
            );
            if let Some(t) = &tok {
                assert_eq!(t.encode(text).unwrap(), want, "{name}: {text:?}");
            }
        }
        imported += 1;
    }
    assert_eq!(imported, 11);
}

#[test]
fn hugging_face_export_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let hf = dir.path().join("hf");
    let exp = hf_fixtures(&hf);
    for name in ["llama", "llama_tied", "mistral", "llama_sharded", "qwen2"] {
        let run = dir.path().join("runs").join(name);
        import(&hf.join(name), &run);
        let out = dir.path().join("export").join(name);
        let (run_dir, ckpt) = sinklab::run::locate_checkpoint(&run).unwrap();
        interop::hf_export::export(&run_dir, &ckpt, &out).unwrap();
        // The NumPy reference loads the export and reproduces the original's logits.
        let (ok, log) = common::run_python(
            "reference_hf.py",
            &[
                "check-export",
                out.to_str().unwrap(),
                hf.join("expected.json").to_str().unwrap(),
                "--case",
                name,
                "--strict-names",
            ],
        );
        assert!(ok, "{name}: {log}");
        // …and so does sinklab, importing its own export.
        let back = dir.path().join("back").join(name);
        import(&out, &back);
        check_case(name, &exp["cases"][name], &back);
    }
    // Models that are not a LLaMA are refused with the difference named.
    let gpt2 = dir.path().join("runs/gpt2");
    import(&hf.join("gpt2"), &gpt2);
    let (run_dir, ckpt) = sinklab::run::locate_checkpoint(&gpt2).unwrap();
    let e = interop::hf_export::export(&run_dir, &ckpt, &dir.path().join("export/gpt2"))
        .err()
        .unwrap();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("model.norm") && msg.contains("model.positions"),
        "{msg}"
    );
    assert!(!dir.path().join("export/gpt2").exists());
}

#[test]
fn a_sinklab_trained_llama_exports_and_reimports_with_the_same_logits() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::tiny_experiment(
        dir.path(),
        "llama_like",
        &[
            "model.norm = { kind = \"rms_norm\", eps = 1e-5 }",
            "model.ffn = { kind = \"swiglu\" }",
            "model.positions = { kind = \"rope\", base = 10000.0, pairing = \"adjacent\" }",
            "model.n_kv_heads = 2",
            "model.bias = false",
            "train.steps = 4",
        ],
    );
    sinklab::train::train(&exp, &Default::default(), &mut |_| {}).unwrap();
    let run = exp.run_dir();
    let out = dir.path().join("hf_export");
    let (run_dir, ckpt) = sinklab::run::locate_checkpoint(&run).unwrap();
    interop::hf_export::export(&run_dir, &ckpt, &out).unwrap();
    let back = dir.path().join("back");
    import(&out, &back);
    let seq: Vec<u32> = (0..20).map(|i| (i * 7 % 50) as u32).collect();
    let (a, _) = logits(&model_of(&run), &seq);
    let (b, _) = logits(&model_of(&back), &seq);
    let want: Vec<f64> = a.iter().map(|&x| x as f64).collect();
    // adjacent RoPE pairs became halves with Q/K rows permuted: the same function
    common::fixture::assert_close(&b, &want, 1e-5, 1e-5, "trained → HF → imported logits");
    // A variant with a sink slot has no LLaMA form.
    let slot = common::tiny_experiment(
        dir.path(),
        "with_slot",
        &[
            "model.attention.slot = { kind = \"sink_logit\" }",
            "train.steps = 3",
        ],
    );
    sinklab::train::train(&slot, &Default::default(), &mut |_| {}).unwrap();
    let (run_dir, ckpt) = sinklab::run::locate_checkpoint(&slot.run_dir()).unwrap();
    let e = interop::hf_export::export(&run_dir, &ckpt, &dir.path().join("x"))
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("model.attention.slot"), "{e:#}");
}

fn smollm2() -> PathBuf {
    common::smollm2()
}

#[test]
fn smollm2_imports_and_matches_the_numpy_reference() {
    let r = read_json(&fixtures().join("smollm2_reference.json"));
    let src = smollm2();
    assert_eq!(
        interop::file_sha256(&src).unwrap(),
        r["model"]["sha256"].as_str().unwrap()
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("smollm2");
    let s = import(&src, &out);
    assert_eq!(s.params, 134_515_008);
    assert!(!s.exp.data.bos, "SmolLM2's GGUF says add_bos_token = false");
    let sinklab::config::TokenizerConfig::File { bos, eot, .. } = &s.exp.data.tokenizer else {
        panic!("an imported run names its tokenizer file")
    };
    assert_eq!(
        (bos.as_str(), eot.as_str()),
        ("<|im_start|>", "<|endoftext|>")
    );
    let tok =
        sinklab::tokenizer::Tokenizer::load_named(&out.join("tokenizer.json"), bos, eot).unwrap();
    for sample in r["tokenizer_samples"].as_array().unwrap() {
        let text = sample["text"].as_str().unwrap();
        assert_eq!(tok.encode(text).unwrap(), ids(&sample["ids"]), "{text:?}");
    }
    let model = model_of(&out);
    // Perplexity of the 184-token text (no BOS) and every position's argmax.
    let text_ids = ids(&r["text_ids"]);
    assert_eq!(tok.encode(r["text"].as_str().unwrap()).unwrap(), text_ids);
    let (l, v) = logits(&model, &text_ids);
    let nll = mean_nll(&l, v, &text_ids);
    let want = r["mean_nll"].as_f64().unwrap();
    assert!(
        (nll - want).abs() < 2e-4,
        "mean NLL {nll} vs the reference {want}"
    );
    let argmax_want = ids(&r["logits"]["argmax"]);
    for (t, a) in argmax_want.iter().enumerate() {
        assert_eq!(argmax(&l[t * v..(t + 1) * v]), *a, "argmax at {t}");
    }
    // Greedy continuations with the KV cache (GQA, RoPE base 1e5).
    assert_eq!(
        greedy(&model, &ids(&r["prompt_ids"]), 16),
        ids(&r["greedy_ids"])
    );
    let chat = greedy(&model, &ids(&r["chat_prompt_ids"]), 8);
    assert_eq!(chat, ids(&r["chat_greedy_ids"]));
    assert_eq!(
        tok.decode(&chat[..7]).unwrap(),
        "The capital of France is Paris."
    );
    // First-token importance α₁[layer][head] on the first 64 text tokens.
    let (_, probes) =
        burn::module::Module::valid(&model).forward_probe(Tensor::<2, Int>::from_data(
            TensorData::new(
                text_ids[..64].iter().map(|&t| t as i64).collect::<Vec<_>>(),
                [1, 64],
            ),
            &common::device(),
        ));
    for (layer, (p, want)) in probes
        .iter()
        .zip(r["alpha1"].as_array().unwrap())
        .enumerate()
    {
        let a = p.attn.clone().unwrap(); // (1, H, 64, 64)
        let h = a.dims()[1];
        let a = a.into_data().try_into_vec::<f32>().unwrap();
        for head in 0..h {
            let got: f64 = (0..64).map(|q| a[(head * 64 + q) * 64] as f64).sum::<f64>() / 64.0;
            let w = want[head].as_f64().unwrap();
            assert!(
                (got - w).abs() < 2e-3,
                "α₁ layer {layer} head {head}: {got} vs {w}"
            );
        }
    }
}

#[test]
fn train_trainable_freezes_every_other_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let base = common::tiny_experiment(dir.path(), "base", &["train.steps = 4"]);
    sinklab::train::train(&base, &Default::default(), &mut |_| {}).unwrap();
    let from = base.run_dir();
    // A pretrained model given a learned sink logit, which alone trains (at a learning rate
    // that moves it visibly in 6 steps); everything loaded stays bit for bit.
    let init = format!("train.init_from = {:?}", from.display().to_string());
    let variant = common::tiny_experiment(
        dir.path(),
        "sinkonly",
        &[
            "model.attention.slot = { kind = \"sink_logit\", init = 0.25 }",
            "optim.lr = 0.05",
            "optim.weight_decay = 0.1",
            "train.steps = 6",
            "train.trainable = [\"blocks.*.attn.sink_logit\"]",
            &init,
        ],
    );
    let mut lines = Vec::new();
    sinklab::train::train(&variant, &Default::default(), &mut |m| {
        lines.push(m.to_string())
    })
    .unwrap();
    // 2 layers × 4 heads trainable; the rest of the model frozen.
    let note = lines
        .iter()
        .find(|l| l.starts_with("trainable:"))
        .unwrap_or_else(|| panic!("no trainable line in {lines:?}"));
    assert!(note.starts_with("trainable: 8 parameters"), "{note}");
    let (_, ckpt) = sinklab::run::locate_checkpoint(&variant.run_dir()).unwrap();
    let b = sinklab::checkpoint::load_safetensors(&ckpt.join("model.safetensors")).unwrap();
    let (_, ckpt_a) = sinklab::run::locate_checkpoint(&from).unwrap();
    let a = sinklab::checkpoint::load_safetensors(&ckpt_a.join("model.safetensors")).unwrap();
    let mut moved = 0;
    for (name, t) in &b {
        match a.get(name) {
            Some(s) => assert_eq!(s, t, "{name}: frozen, must equal the loaded value"),
            None => {
                assert!(name.ends_with("sink_logit"), "{name}");
                // Each logit moved off its init, by at most lr per step (AdamW's bound) ×
                // 6 steps plus decay.
                for &x in &t.data {
                    let d = (x - 0.25).abs();
                    assert!(d > 1e-4 && d < 0.35, "{name}: {:?}", t.data);
                }
                moved += 1;
            }
        }
    }
    assert_eq!(moved, 2);
    // Optimizer state only for the trainable parameters.
    let opt = sinklab::checkpoint::load_safetensors(&ckpt.join("optim.safetensors")).unwrap();
    let mut keys: Vec<&String> = opt.keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "m.blocks.0.attn.sink_logit",
            "m.blocks.1.attn.sink_logit",
            "v.blocks.0.attn.sink_logit",
            "v.blocks.1.attn.sink_logit"
        ]
    );
    // A pattern that matches nothing is an error naming it and the model's names.
    let bad = common::tiny_experiment(
        dir.path(),
        "bad",
        &["train.trainable = [\"blocks.*.attn.sink\"]", &init],
    );
    let e = sinklab::train::train(&bad, &Default::default(), &mut |_| {})
        .err()
        .unwrap();
    let e = format!("{e:#}");
    assert!(
        e.contains("train.trainable: pattern \"blocks.*.attn.sink\" matches no parameter")
            && e.contains("blocks.0.attn."),
        "{e}"
    );
}

#[test]
fn train_init_from_loads_matching_parameters_and_names_the_fresh_ones() {
    let dir = tempfile::tempdir().unwrap();
    let base = common::tiny_experiment(dir.path(), "base", &["train.steps = 4"]);
    sinklab::train::train(&base, &Default::default(), &mut |_| {}).unwrap();
    let from = base.run_dir();
    // A variant with a learned sink logit, started from `base` with LR 1e-30: the shared
    // parameters stay exactly the loaded ones, the sink logit its fresh init.
    let variant = common::tiny_experiment(
        dir.path(),
        "variant",
        &[
            "model.attention.slot = { kind = \"sink_logit\", init = 0.25 }",
            "optim.lr = 1e-30", // a step far below every weight's f32 ulp
            "train.steps = 3",
            &format!("train.init_from = {:?}", from.display().to_string()),
        ],
    );
    let mut lines = Vec::new();
    sinklab::train::train(&variant, &Default::default(), &mut |m| {
        lines.push(m.to_string())
    })
    .unwrap();
    let note = lines
        .iter()
        .find(|l| l.starts_with("init_from"))
        .unwrap_or_else(|| panic!("no init_from line in {lines:?}"));
    assert!(
        note.contains("blocks.0.attn.sink_logit") && note.contains("blocks.1.attn.sink_logit"),
        "{note}"
    );
    let load = |run: &Path| {
        let (_, ckpt) = sinklab::run::locate_checkpoint(run).unwrap();
        sinklab::checkpoint::load_safetensors(&ckpt.join("model.safetensors")).unwrap()
    };
    let (a, b) = (load(&from), load(&variant.run_dir()));
    for (name, t) in &b {
        match a.get(name) {
            Some(s) => assert_eq!(s, t, "{name} loaded unchanged"),
            None => {
                assert!(name.ends_with("sink_logit"), "{name}");
                assert!(t.data.iter().all(|&x| x == 0.25), "{name}: {:?}", t.data);
            }
        }
    }
    // Another shape is an error that names the parameter.
    let wide = common::tiny_experiment(
        dir.path(),
        "wide",
        &[
            "model.d_ff = 96",
            &format!("train.init_from = {:?}", from.display().to_string()),
        ],
    );
    let e = sinklab::train::train(&wide, &Default::default(), &mut |_| {})
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("mlp.w_up.weight"), "{e:#}");
}
