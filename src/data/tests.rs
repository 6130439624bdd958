//! Unit tests of the data pipeline: documents, sampler, mixture, token changes, validation.

use super::*;
use crate::config::FixedToken;

fn toy_dataset() -> Dataset {
    let tokenizer = Tokenizer::byte().unwrap();
    let domains = vec![
        Domain {
            name: "a".into(),
            train: (0..1000)
                .map(|i| 10 + (i % 50))
                .collect::<Vec<u32>>()
                .into(),
            val: (0..300)
                .map(|i| 100 + (i % 20))
                .collect::<Vec<u32>>()
                .into(),
            record: None,
        },
        Domain {
            name: "b".into(),
            train: (0..4000)
                .map(|i| 200 + (i % 40))
                .collect::<Vec<u32>>()
                .into(),
            val: (0..300)
                .map(|i| 150 + (i % 20))
                .collect::<Vec<u32>>()
                .into(),
            record: None,
        },
    ];
    Dataset {
        tokenizer,
        domains,
        dir: PathBuf::new(),
    }
}

#[test]
fn documents_split_on_separator_lines() {
    let f = source::SourceFile::embedded("t", "one\ntwo\n<|doc|>\nthree\n<|doc|>\n\n");
    let mut docs = Vec::new();
    let read = f
        .read("", crate::config::BadInput::Error, &|_| {}, &mut |d| {
            docs.push(d);
            Ok(())
        })
        .unwrap();
    assert_eq!(docs, vec!["one\ntwo\n".to_string(), "three\n".to_string()]);
    assert_eq!((read.documents, read.text_bytes), (2, 14));
}

#[test]
fn sampler_is_deterministic_and_shifted() {
    let data = toy_dataset();
    let cfg = DataConfig::default();
    let s = Sampler::new(&data, &cfg, 16, 7).unwrap();
    let a = s.batch(&data, 5, 1, 4);
    let b = s.batch(&data, 5, 1, 4);
    assert_eq!(a, b);
    assert_ne!(a, s.batch(&data, 6, 1, 4));
    assert_ne!(a, s.batch(&data, 5, 0, 4));
    for r in 0..4 {
        let x = &a.inputs[r * 16..(r + 1) * 16];
        let y = &a.targets[r * 16..(r + 1) * 16];
        assert_eq!(&x[1..], &y[..15], "targets are inputs shifted by one");
    }
}

#[test]
fn mixture_weights_are_applied() {
    let data = toy_dataset();
    let mut cfg = DataConfig {
        mixture: Some([("a".to_string(), 3.0), ("b".to_string(), 1.0)].into()),
        ..DataConfig::default()
    };
    let s = Sampler::new(&data, &cfg, 8, 0).unwrap();
    assert_eq!(s.domain_probabilities(), vec![0.75, 0.25]);
    let mut counts = [0usize; 2];
    for step in 0..200 {
        for d in s.batch(&data, step, 0, 20).domains {
            counts[d] += 1;
        }
    }
    let frac = counts[0] as f64 / 4000.0;
    assert!((frac - 0.75).abs() < 0.03, "fraction from a: {frac}");
    // Without a mixture, weights follow domain sizes (1000 : 4000).
    let s = Sampler::new(&data, &DataConfig::default(), 8, 0).unwrap();
    let p = s.domain_probabilities();
    assert!(
        (p[0] - 0.2).abs() < 1e-12 && (p[1] - 0.8).abs() < 1e-12,
        "{p:?}"
    );
    cfg.mixture = Some([("c".to_string(), 1.0)].into());
    let err = Sampler::new(&data, &cfg, 8, 0).err().unwrap().to_string();
    assert!(
        err.contains("data.mixture.c") && err.contains("a, b"),
        "{err}"
    );
}

#[test]
fn bos_fixed_and_random_tokens() {
    let data = toy_dataset();
    let mut cfg = DataConfig {
        bos: true,
        random_tokens: vec![2],
        fixed_token: Some(FixedToken {
            position: 4,
            token: 77,
        }),
        ..DataConfig::default()
    };
    let s = Sampler::new(&data, &cfg, 8, 1).unwrap();
    let b = s.batch(&data, 0, 0, 50);
    let mut random_seen = std::collections::HashSet::new();
    for r in 0..50 {
        let x = &b.inputs[r * 8..(r + 1) * 8];
        let m = &b.loss_mask[r * 8..(r + 1) * 8];
        assert_eq!(x[0], data.tokenizer.bos_id);
        assert_eq!(x[3], 77);
        random_seen.insert(x[1]);
        // targets at index p-2 predict position p: ignored for p = 2 and p = 4.
        assert_eq!(m, &[0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    }
    assert!(
        random_seen.len() > 40,
        "random tokens vary: {}",
        random_seen.len()
    );
    // Token budget: only the first tokens of each domain are used.
    cfg.token_budget = Some(100);
    cfg.random_tokens.clear();
    cfg.fixed_token = None;
    cfg.mixture = Some([("a".to_string(), 1.0)].into());
    let s = Sampler::new(&data, &cfg, 8, 1).unwrap();
    for step in 0..50 {
        let b = s.batch(&data, step, 0, 4);
        assert!(b.domains.iter().all(|&d| d == 0));
        // domain a's first 100 tokens are 10..59, 10..59: every token < 60
        assert!(
            b.inputs
                .iter()
                .skip(1)
                .all(|&t| t < 60 || t == data.tokenizer.bos_id)
        );
    }
    // A budget the domain cannot fill is refused with the counts, never silently smaller.
    cfg.token_budget = Some(1001);
    let err = Sampler::new(&data, &cfg, 8, 1).err().unwrap().to_string();
    assert!(
        err.contains("asks domain a for 1001 training tokens; it has 1000"),
        "{err}"
    );
}

#[test]
fn probe_batches_get_the_training_token_changes() {
    let data = toy_dataset();
    let cfg = DataConfig {
        bos: false,
        random_tokens: vec![1],
        fixed_token: Some(FixedToken {
            position: 3,
            token: 77,
        }),
        ..DataConfig::default()
    };
    let s = Sampler::new(&data, &cfg, 10, 5).unwrap();
    let natural = validation_batch(&data, 6, 10, false).unwrap();
    let mut a = natural.clone();
    s.apply_token_changes(&mut a);
    let mut firsts = std::collections::HashSet::new();
    for r in 0..6 {
        let (x, y) = (&a.inputs[r * 10..][..10], &a.targets[r * 10..][..10]);
        let (nx, ny) = (
            &natural.inputs[r * 10..][..10],
            &natural.targets[r * 10..][..10],
        );
        assert_eq!(x[2], 77);
        assert_eq!(y[1], 77, "the target before position 3 is the fixed token");
        let m = &a.loss_mask[r * 10..][..10];
        assert_eq!(m[1], 0.0, "predicting the fixed token is not scored");
        assert!(m.iter().enumerate().all(|(i, &w)| i == 1 || w == 1.0));
        assert_eq!(&x[3..], &nx[3..]);
        assert_eq!(&y[2..], &ny[2..]);
        assert_eq!(x[1], nx[1]);
        assert!(x[0] >= 2 && (x[0] as usize) < data.vocab_size());
        firsts.insert(x[0]);
    }
    assert!(firsts.len() > 1, "random first tokens vary over rows");
    // The same probe set every time, whatever the run's seed.
    let mut b = natural.clone();
    Sampler::new(&data, &cfg, 10, 99)
        .unwrap()
        .apply_token_changes(&mut b);
    assert_eq!(a.inputs, b.inputs);
    // No token changes configured: untouched.
    let plain = Sampler::new(&data, &DataConfig::default(), 10, 5).unwrap();
    let mut c = natural.clone();
    plain.apply_token_changes(&mut c);
    assert_eq!(c.inputs, natural.inputs);
}

#[test]
fn validation_batch_is_fixed_and_spans_the_split() {
    let data = toy_dataset();
    let v = validation_batch(&data, 4, 10, false).unwrap();
    assert_eq!(v.inputs.len(), 40);
    assert_eq!(v.inputs[0], 100);
    // last window ends at the end of the concatenated validation stream
    assert_eq!(*v.targets.last().unwrap(), 150 + (299 % 20));
}
