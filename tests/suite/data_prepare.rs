//! Corpora on disk streamed into token shards (`sinklab data prepare`): every format gives the
//! ids Python's `tokenizers` gives (read back with numpy), bad input is an error naming the file
//! and line or a counted skip recorded in the manifest, an interrupted preparation resumes to
//! the same shards, a vocabulary above 65 536 gets u32 shards, and training reads the shards.

use crate::common::{self, read_json, sinklab_output};
use std::io::Write;
use std::path::Path;

/// Documents of varied length and script (≈ 14 KB).
fn documents(n: usize, salt: &str) -> Vec<String> {
    let words = [
        "sink",
        "attention",
        "the",
        "of",
        "café",
        "naïve",
        "Ωμέγα",
        "東京",
        "token",
        "softmax",
        "🙂",
        "value",
        "query",
        "key",
        "first",
        "position",
    ];
    (0..n)
        .map(|i| {
            let len = 20 + (i * 37) % 90;
            let body: Vec<&str> = (0..len)
                .map(|j| words[(i * 7 + j * j) % words.len()])
                .collect();
            format!(
                "{salt} document {i}: {}.\nSecond line {i}.\n",
                body.join(" ")
            )
        })
        .collect()
}

fn jsonl(docs: &[String], field: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        let rec = serde_json::json!({ field: d, "id": i, "meta": {"n": i} });
        writeln!(out, "{rec}").unwrap();
    }
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn zst(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

fn write_docs_json(path: &Path, docs: &[String]) {
    std::fs::write(path, serde_json::to_string(docs).unwrap()).unwrap();
}

fn parquet(dir: &Path, name: &str, column: &str, docs: &[String], null_at: Option<usize>) {
    let docs_path = dir.join(format!("{name}.docs.json"));
    write_docs_json(&docs_path, docs);
    let out = dir.join(name);
    let mut args = vec![
        "parquet".to_string(),
        out.display().to_string(),
        column.into(),
        docs_path.display().to_string(),
    ];
    if let Some(i) = null_at {
        args.extend(["--null-at".into(), i.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, text) = common::run_python("data_reference.py", &args);
    assert!(ok, "{text}");
}

/// An experiment whose [data] is `data` (TOML lines), in `dir`.
fn experiment(dir: &Path, data: &str) -> String {
    let p = dir.join("exp.toml");
    std::fs::write(
        &p,
        format!(
            "[run]\nname = \"d\"\nout_dir = \"{}\"\n\n[model]\nd_model = 32\nn_layers = 1\n\
             n_heads = 2\nd_ff = 64\nctx = 16\n\n[train]\nsteps = 4\nmicro_batch = 4\n\
             batch_tokens = 64\neval_every = 4\neval_sequences = 4\n\n[optim]\nschedule = {{ kind = \"constant\", warmup = 1 }}\n\n[metrics]\nevery = 4\n\
             probe_sequences = 4\nprobe_len = 16\n\n[data]\ncache_dir = \"{}\"\n{data}\n",
            dir.join("runs").display(),
            dir.join("cache").display()
        ),
    )
    .unwrap();
    p.display().to_string()
}

fn prepared_dir(cache: &Path) -> std::path::PathBuf {
    let dirs: Vec<_> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

fn check_in_python(prepared: &Path, domain: &str, docs: &[String]) {
    let docs_path = prepared.with_extension(format!("{domain}.docs.json"));
    write_docs_json(&docs_path, docs);
    let (ok, text) = common::run_python(
        "data_reference.py",
        &[
            "check",
            &prepared.display().to_string(),
            domain,
            &docs_path.display().to_string(),
        ],
    );
    assert!(ok && text.starts_with("ok "), "{domain}: {text}");
}

#[test]
fn every_format_prepares_to_the_ids_python_tokenizers_gives() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (a, b, c, e, f) = (
        documents(30, "txt"),
        documents(25, "jsonl"),
        documents(20, "gz"),
        documents(22, "zst"),
        documents(18, "parquet"),
    );
    // text: two files, documents separated by <|doc|> lines
    let txt = |docs: &[String]| docs.join("<|doc|>\n");
    std::fs::create_dir_all(d.join("txt")).unwrap();
    std::fs::write(d.join("txt/1.txt"), txt(&a[..12])).unwrap();
    std::fs::write(d.join("txt/2.txt"), txt(&a[12..])).unwrap();
    std::fs::write(d.join("b.jsonl"), jsonl(&b, "content")).unwrap();
    std::fs::write(d.join("c.jsonl.gz"), gzip(&jsonl(&c, "text"))).unwrap();
    std::fs::write(d.join("e.jsonl.zst"), zst(&jsonl(&e, "text"))).unwrap();
    parquet(d, "f.parquet", "text", &f, None);
    let exp = experiment(
        d,
        &format!(
            "tokenizer = {{ kind = \"bpe\", vocab_size = 360, sample_bytes = 20000 }}\n\
             [data.sources.txt]\nfiles = [\"{0}/txt\"]\n\
             [data.sources.jsonl]\nfiles = [\"{0}/b.jsonl\"]\ntext_field = \"content\"\n\
             [data.sources.gz]\nfiles = [\"{0}/c.jsonl.gz\"]\n\
             [data.sources.zst]\nfiles = [\"{0}/*.zst\"]\n\
             [data.sources.pq]\nfiles = [\"{0}/f.parquet\"]\n",
            d.display()
        ),
    );
    let (code, out) = sinklab_output(None, &["data", "prepare", &exp]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("vocabulary 360") && out.contains("u16 ids"),
        "{out}"
    );
    let prepared = prepared_dir(&d.join("cache"));
    let m = read_json(&prepared.join("manifest.json"));
    assert_eq!(m["width"], "u16");
    for (name, docs) in [
        ("txt", &a),
        ("jsonl", &b),
        ("gz", &c),
        ("zst", &e),
        ("pq", &f),
    ] {
        check_in_python(&prepared, name, docs);
        let dm = m["domains"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap();
        assert_eq!(dm["documents"], docs.len() as u64, "{name}");
        assert_eq!(
            dm["text_bytes"],
            docs.iter().map(|s| s.len() as u64).sum::<u64>(),
            "{name}"
        );
    }
    assert_eq!(m["domains"][3]["name"], "txt"); // domains in name order
    assert_eq!(m["domains"][3]["shards"].as_array().unwrap().len(), 2); // two files
    // a second prepare opens the shards without tokenizing
    let (code, out) = sinklab_output(None, &["data", "prepare", &exp]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("using prepared shards"), "{out}");
    // training reads them: a mixture over three domains and a token budget
    let (code, out) = sinklab_output(
        None,
        &[
            "train",
            &exp,
            "--set",
            "data.mixture={ gz = 1.0, pq = 2.0, zst = 1.0 }",
            "--set",
            "data.token_budget=2000",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let summary = read_json(&d.join("runs/d/summary.json"));
    let loss = summary["last_val_loss"].as_f64().unwrap();
    assert!(loss.is_finite() && loss > 1.0 && loss < 7.0, "{summary}");
    // The run records its prepared corpus, so the analysis commands open the shards without
    // the sources (here deleted), from any directory.
    let r = read_json(&d.join("runs/d/data.json"));
    assert_eq!(
        r["prepared"].as_str().unwrap(),
        prepared.display().to_string()
    );
    for f in ["b.jsonl", "c.jsonl.gz", "e.jsonl.zst", "f.parquet"] {
        std::fs::remove_file(d.join(f)).unwrap();
    }
    let run = d.join("runs/d").display().to_string();
    let (code, out) = sinklab_output(Some(d), &["eval", &run]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("{:.4}", loss)), "{out}");
}

#[test]
fn bad_input_is_an_error_naming_the_file_or_a_counted_skip() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = documents(10, "good");
    let mut lines = jsonl(&good, "text");
    lines.extend_from_slice(b"{\"text\": \"unterminated\n"); // line 11: malformed
    lines.extend_from_slice(b"{\"body\": \"no text field\"}\n"); // line 12: missing field
    lines.extend_from_slice(b"{\"text\": \"bad \xff byte\"}\n"); // line 13: invalid UTF-8
    lines.extend_from_slice(&jsonl(&good[..2], "text")); // lines 14, 15
    std::fs::write(d.join("mixed.jsonl"), &lines).unwrap();
    std::fs::write(d.join("empty.jsonl"), b"").unwrap();
    let gz = gzip(&jsonl(&documents(200, "gz"), "text"));
    std::fs::write(d.join("cut.jsonl.gz"), &gz[..gz.len() * 2 / 3]).unwrap();
    // zstd decodes whole blocks (128 KB): enough documents for several
    let z = zst(&jsonl(&documents(2000, "zst"), "text"));
    std::fs::write(d.join("cut.jsonl.zst"), &z[..z.len() * 2 / 3]).unwrap();
    parquet(d, "nocol.parquet", "body", &good, None);
    parquet(d, "null.parquet", "text", &good, Some(3));
    let mut invalid_txt = b"fine line\n".to_vec();
    invalid_txt.extend_from_slice(b"bad \xc3\x28 line\n<|doc|>\nsecond document\n");
    std::fs::write(d.join("bad.txt"), &invalid_txt).unwrap();
    let one = |file: &str, policy: &str| -> (i32, String) {
        let sub = d.join(format!("{file}-{policy}"));
        std::fs::create_dir_all(&sub).unwrap();
        let exp = experiment(
            &sub,
            &format!(
                "tokenizer = {{ kind = \"byte\" }}\nbad_input = \"{policy}\"\n\
                 [data.sources.x]\nfiles = [\"{}\"]\n",
                d.join(file).display()
            ),
        );
        sinklab_output(None, &["data", "prepare", &exp])
    };
    // strict (default): the first bad thing stops preparation, naming the file and line
    for (file, want) in [
        ("mixed.jsonl", "mixed.jsonl: line 11 is not a JSON object"),
        ("empty.jsonl", "empty.jsonl: empty (no document)"),
        (
            "cut.jsonl.gz",
            "cut.jsonl.gz: truncated or corrupt after line",
        ),
        (
            "cut.jsonl.zst",
            "cut.jsonl.zst: truncated or corrupt after line",
        ),
        (
            "nocol.parquet",
            "nocol.parquet: no column \"text\" (columns: id, body)",
        ),
        (
            "null.parquet",
            "row group 0, row 3: column \"text\" is null",
        ),
        (
            "bad.txt",
            "bad.txt: line 2 is not valid UTF-8 (byte 4 of the line)",
        ),
    ] {
        let (code, out) = one(file, "error");
        assert_eq!(code, 1, "{file}: {out}");
        assert!(out.contains(want), "{file}: want {want:?} in {out}");
        assert!(out.contains("set data.bad_input = \"skip\""), "{out}");
    }
    // a failed preparation removes what it created (its directory, lock file and shards),
    // so the next attempt starts over cleanly
    for file in ["mixed.jsonl", "empty.jsonl", "cut.jsonl.gz", "bad.txt"] {
        let cache = d.join(format!("{file}-error/cache"));
        let left: Vec<_> = cache
            .read_dir()
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "{file}: {left:?}");
    }
    // skip: counted, reported, recorded
    for (file, kind, n, docs) in [
        ("mixed.jsonl", "malformed_json", 1, 12),
        ("mixed.jsonl", "missing_field", 1, 12),
        ("mixed.jsonl", "invalid_utf8", 1, 12),
        ("empty.jsonl", "empty_file", 1, 0),
        ("nocol.parquet", "missing_column", 1, 0),
        ("null.parquet", "missing_field", 1, 9),
        ("bad.txt", "invalid_utf8", 1, 2),
    ] {
        let (code, out) = one(file, "skip");
        assert_eq!(code, 0, "{file}: {out}");
        assert!(out.contains(&format!("{n} {kind}")), "{file}: {out}");
        let m =
            read_json(&prepared_dir(&d.join(format!("{file}-skip/cache"))).join("manifest.json"));
        assert_eq!(m["domains"][0]["skipped"][kind], n, "{file}");
        assert_eq!(m["domains"][0]["documents"], docs, "{file}");
        assert_eq!(m["domains"][0]["shards"][0]["skipped"][kind], n, "{file}");
    }
    for (file, total) in [("cut.jsonl.gz", 200), ("cut.jsonl.zst", 2000)] {
        let (code, out) = one(file, "skip");
        assert_eq!(code, 0, "{file}: {out}");
        let m =
            read_json(&prepared_dir(&d.join(format!("{file}-skip/cache"))).join("manifest.json"));
        assert_eq!(m["domains"][0]["skipped"]["truncated"], 1, "{file}");
        let docs = m["domains"][0]["documents"].as_u64().unwrap();
        assert!(
            docs > total / 4 && docs < total,
            "{file}: {docs} complete documents before the cut"
        );
    }
}

#[test]
fn an_interrupted_preparation_resumes_to_the_same_shards() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for i in 0..3 {
        std::fs::write(
            d.join(format!("part-{i}.jsonl.zst")),
            zst(&jsonl(&documents(40, &format!("part{i}")), "text")),
        )
        .unwrap();
    }
    let exp = experiment(
        d,
        &format!(
            "tokenizer = {{ kind = \"bpe\", vocab_size = 300, sample_bytes = 8000 }}\n\
             [data.sources.web]\nfiles = [\"{}/part-*.jsonl.zst\"]\n",
            d.display()
        ),
    );
    let (code, out) = sinklab_output(None, &["data", "prepare", &exp]);
    assert_eq!(code, 0, "{out}");
    let p = prepared_dir(&d.join("cache"));
    let read = |f: &str| std::fs::read(p.join(f)).unwrap();
    let before: Vec<Vec<u8>> = (0..3).map(|i| read(&format!("web/{i:05}.u16"))).collect();
    let manifest = read_json(&p.join("manifest.json"));
    // What a kill leaves: no manifest, the last shard without its index entry, a half-written
    // temporary file.
    std::fs::remove_file(p.join("manifest.json")).unwrap();
    std::fs::remove_file(p.join("web/00002.json")).unwrap();
    std::fs::write(p.join("web/00002.u16"), &before[2][..100]).unwrap();
    std::fs::write(p.join("web/.00002.u16.tmp4242"), b"partial").unwrap();
    let (code, out) = sinklab_output(None, &["data", "prepare", &exp]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("resuming an interrupted preparation"), "{out}");
    for (i, b) in before.iter().enumerate() {
        assert_eq!(&read(&format!("web/{i:05}.u16")), b, "shard {i}");
    }
    assert!(!p.join("web/.00002.u16.tmp4242").exists());
    let again = read_json(&p.join("manifest.json"));
    assert_eq!(again["domains"], manifest["domains"]);
    assert_eq!(
        (
            manifest["resumed_shards"].as_u64(),
            again["resumed_shards"].as_u64()
        ),
        (Some(0), Some(2))
    );
}

#[test]
fn a_vocabulary_above_65536_gets_u32_shards() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let words: Vec<String> = (0..70_000).map(|i| format!("w{i}")).collect();
    let tok = sinklab::tokenizer::Tokenizer::word_level(&words).unwrap();
    tok.save(&d.join("tokenizer.json")).unwrap();
    let docs: Vec<String> = (0..50)
        .map(|i| {
            (0..30)
                .map(|j| format!("w{}", (i * 1409 + j * 2311) % 70_000))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    std::fs::write(d.join("w.jsonl"), jsonl(&docs, "text")).unwrap();
    let exp = experiment(
        d,
        &format!(
            "tokenizer = {{ kind = \"file\", path = \"{0}/tokenizer.json\", bos = \"<|bos|>\", \
             eot = \"<|endoftext|>\" }}\n[data.sources.w]\nfiles = [\"{0}/w.jsonl\"]\n",
            d.display()
        ),
    );
    let (code, out) = sinklab_output(None, &["data", "prepare", &exp]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("u32 ids, vocabulary 70002"), "{out}");
    let p = prepared_dir(&d.join("cache"));
    check_in_python(&p, "w", &docs);
    assert!(p.join("w/00000.u32").exists());
}

#[test]
fn source_configuration_errors_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("a.jsonl"), jsonl(&documents(40, "a"), "text")).unwrap();
    let cases = [
        (
            format!(
                "corpus = \"x\"\n[data.sources.a]\nfiles = [\"{}/a.jsonl\"]\n",
                d.display()
            ),
            "data.sources",
            "data.corpus = \"x\" and data.sources both name a corpus",
        ),
        (
            format!(
                "[data.sources.a]\nfiles = [\"{}/*.parquet\"]\n",
                d.display()
            ),
            "data.sources.a.files[0]",
            "matches no file",
        ),
        (
            format!(
                "[data.sources.a]\nfiles = [\"{}/a.jsonl\"]\nformat = \"csv\"\n",
                d.display()
            ),
            "format",
            "auto",
        ),
        (
            format!(
                "tokenizer = {{ kind = \"bpe\", vocab_size = 300, sample_bytes = 1000000 }}\n\
                 [data.sources.a]\nfiles = [\"{}/a.jsonl\"]\n",
                d.display()
            ),
            "data.tokenizer.sample_bytes = 1000000",
            "reaches past its training split",
        ),
        (
            format!(
                "tokenizer = {{ kind = \"bpe\", vocab_size = 300, sample_documents = 40 }}\n\
                 [data.sources.a]\nfiles = [\"{}/a.jsonl\"]\n",
                d.display()
            ),
            "data.tokenizer.sample_documents = 40",
            "reaches past its training split",
        ),
        (
            format!(
                "tokenizer = {{ kind = \"bpe\", vocab_size = 300, sample_bytes = 10, \
                 sample_documents = 4 }}\n[data.sources.a]\nfiles = [\"{}/a.jsonl\"]\n",
                d.display()
            ),
            "data.tokenizer.sample_documents",
            "given with sample_bytes",
        ),
    ];
    for (data, key, want) in cases {
        let exp = experiment(d, &data);
        let (code, out) = sinklab_output(None, &["data", "prepare", &exp]);
        assert_eq!(code, 1, "{data}: {out}");
        assert!(
            out.contains(key) && out.contains(want),
            "{data}: want {key} / {want} in {out}"
        );
    }
    // a sample of documents from the training split
    let exp = experiment(
        d,
        &format!(
            "tokenizer = {{ kind = \"bpe\", vocab_size = 300, sample_documents = 20 }}\n\
             [data.sources.a]\nfiles = [\"{}/a.jsonl\"]\n",
            d.display()
        ),
    );
    let (code, out) = sinklab_output(None, &["data", "prepare", &exp]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("on a sample of 20 documents"), "{out}");
}

/// Every path under `dir` (relative), with each file's bytes.
fn tree(dir: &Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap() {
            let q = e.unwrap().path();
            let rel = q.strip_prefix(dir).unwrap().to_path_buf();
            if q.is_dir() {
                stack.push(q);
                out.insert(rel, Vec::new());
            } else {
                out.insert(rel, std::fs::read(&q).unwrap());
            }
        }
    }
    out
}

/// Replace a file's bytes keeping its size and modification time (so the cache key is
/// unchanged).
fn rewrite_in_place(p: &Path, bytes: &[u8]) {
    let mtime = std::fs::metadata(p).unwrap().modified().unwrap();
    assert_eq!(std::fs::metadata(p).unwrap().len(), bytes.len() as u64);
    std::fs::write(p, bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
}

#[test]
fn a_failed_preparation_removes_only_what_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for i in 0..3 {
        std::fs::write(
            d.join(format!("part-{i}.jsonl")),
            jsonl(&documents(40, &format!("part{i}")), "text"),
        )
        .unwrap();
    }
    let exp = experiment(
        d,
        &format!(
            "tokenizer = {{ kind = \"bpe\", vocab_size = 300, sample_bytes = 8000 }}\n\
             [data.sources.web]\nfiles = [\"{}/part-*.jsonl\"]\n",
            d.display()
        ),
    );
    let (code, out) = sinklab_output(None, &["data", "prepare", &exp]);
    assert_eq!(code, 0, "{out}");
    let p = prepared_dir(&d.join("cache"));
    // what a kill during the last shard leaves, plus a file of the user's
    std::fs::remove_file(p.join("manifest.json")).unwrap();
    std::fs::remove_file(p.join("web/00002.json")).unwrap();
    std::fs::write(p.join("notes.txt"), b"mine").unwrap();
    // the last part turns bad (same size and time: same cache key)
    let good = std::fs::read(d.join("part-2.jsonl")).unwrap();
    let mut bad = good.clone();
    let line5 = bad
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(3)
        .unwrap()
        .0
        + 1;
    bad[line5] = b'X';
    rewrite_in_place(&d.join("part-2.jsonl"), &bad);
    let before = tree(&p);
    let (code, out) = sinklab_output(None, &["data", "prepare", &exp]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("part-2.jsonl: line 5 is not a JSON object"),
        "{out}"
    );
    // the directory is as it was: the earlier shards, the user's file and the lock file stay
    assert_eq!(tree(&p), before);
    assert!(p.join(".lock").exists() && p.join("notes.txt").exists());
    // and the next attempt resumes from the shards the interrupted one finished
    rewrite_in_place(&d.join("part-2.jsonl"), &good);
    let (code, out) = sinklab_output(None, &["data", "prepare", &exp]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("resuming an interrupted preparation"), "{out}");
    assert_eq!(read_json(&p.join("manifest.json"))["resumed_shards"], 2);
}

#[test]
fn concurrent_failed_preparations_each_fail_cleanly_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // a tokenizer to train and a big good file before the bad one, so that the preparations
    // overlap: the others wait on the lock of the one that fails and removes it
    std::fs::write(d.join("a.jsonl"), jsonl(&documents(3000, "a"), "text")).unwrap();
    let mut bad = jsonl(&documents(10, "b"), "text");
    bad.extend_from_slice(b"{\"text\": \"unterminated\n");
    std::fs::write(d.join("b.jsonl"), bad).unwrap();
    let exp = experiment(
        d,
        &format!(
            "tokenizer = {{ kind = \"bpe\", vocab_size = 400 }}\n[data.sources.web]\n\
             files = [\"{0}/a.jsonl\", \"{0}/b.jsonl\"]\n",
            d.display()
        ),
    );
    let children: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_sinklab"))
                .args(["data", "prepare", &exp])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("b.jsonl: line 11 is not a JSON object"),
            "{err}"
        );
    }
    let left: Vec<_> = d.join("cache").read_dir().unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}
