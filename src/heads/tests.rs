//! Planted attention, no model: the closed forms of docs/reference.md §11 on [first, R, R].

use super::*;

/// [first, R, R] with R = 1..=n (first = 0): T = 2n + 1.
fn repeat_tokens(n: usize) -> Vec<u32> {
    let r: Vec<u32> = (1..=n as u32).collect();
    std::iter::once(0).chain(r.clone()).chain(r).collect()
}

/// One head (B = H = 1) whose row q puts `on_target` on the first target of `pattern` (on
/// column 0 when q has none) and the rest of the row on a slot.
fn planted(tokens: &[u32], pattern: Pattern, on_target: f32) -> (Array, Array) {
    let t = tokens.len();
    let mut a = vec![0f32; t * t];
    for q in 0..t {
        let j = pattern.targets(tokens, q).first().copied().unwrap_or(0);
        a[q * t + j] = on_target;
    }
    let slot = vec![1.0 - on_target; t];
    (
        Array::new(vec![1, 1, t, t], a),
        Array::new(vec![1, 1, t], slot),
    )
}

#[test]
fn perfect_heads_score_one_and_transformer_lens_gives_its_closed_forms() {
    let n = 50;
    let toks = repeat_tokens(n);
    let t = (2 * n + 1) as f64;
    let tl = |a: &Array, p, m, ex| tl_score(a, &toks, p, m, ex)[0];
    // previous-token head: 1 on the primary measure, (T − 1)/T with TransformerLens's mul
    let (prev, _) = planted(&toks, Pattern::Previous, 1.0);
    assert!((pattern_score(&prev, &toks, Pattern::Previous)[0] - 1.0).abs() < 1e-12);
    let mul = tl(&prev, Pattern::Previous, TlMeasure::Mul, false);
    assert!((mul - (t - 1.0) / t).abs() < 1e-12, "{mul}");
    assert!((tl(&prev, Pattern::Previous, TlMeasure::Mul, true) - 1.0).abs() < 1e-12);
    // abs: only row 0 (all on column 0, no target) differs: 1 − round(1/T, 3) = 0.99
    assert_eq!(
        tl(&prev, Pattern::Previous, TlMeasure::Abs, false),
        1.0 - 0.01
    );
    // induction and duplicate heads: 1 and n/(2n+1); 1 with column 0 excluded
    for p in [Pattern::Induction, Pattern::Duplicate] {
        let (a, _) = planted(&toks, p, 1.0);
        assert!(
            (pattern_score(&a, &toks, p)[0] - 1.0).abs() < 1e-12,
            "{p:?}"
        );
        let mul = tl(&a, p, TlMeasure::Mul, false);
        assert!((mul - n as f64 / t).abs() < 1e-12, "{p:?} {mul}");
        assert!(
            (tl(&a, p, TlMeasure::Mul, true) - 1.0).abs() < 1e-12,
            "{p:?}"
        );
        // the other patterns score low on it
        let other = pattern_score(&a, &toks, Pattern::Previous)[0];
        assert!(other < 0.02, "{p:?} previous {other}");
    }
    // the induction head's target is the token after the earlier occurrence: q − n + 1
    assert_eq!(Pattern::Induction.targets(&toks, n + 1), vec![2]);
    assert_eq!(Pattern::Duplicate.targets(&toks, n + 1), vec![1]);
    assert!(Pattern::Induction.targets(&toks, n).is_empty());
}

#[test]
fn a_head_that_parks_most_of_its_row_on_a_slot_scores_its_share() {
    // 0.9 of each row on a slot, 0.1 on the target: the primary score is the share of the
    // whole row, 0.1; TransformerLens's mul renormalises over the real keys: 1.0 once column 0
    // (where the rows without a target put their 0.1) is excluded.
    let n = 20;
    let toks = repeat_tokens(n);
    for p in Pattern::ALL {
        let (a, slot) = planted(&toks, p, 0.1);
        let primary = pattern_score(&a, &toks, p)[0];
        assert!((primary - 0.1).abs() < 1e-7, "{p:?} {primary}");
        let mul = tl_score(&a, &toks, p, TlMeasure::Mul, true)[0];
        assert!((mul - 1.0).abs() < 1e-12, "{p:?} {mul}");
        assert!((mean_slot_mass(&slot)[0] - 0.9).abs() < 1e-7);
        // row entropy: every row two outcomes 0.1 / 0.9
        let h = -(0.1f64 * 0.1f64.ln() + 0.9 * 0.9f64.ln());
        assert!((row_entropy(&a, Some(&slot))[0] - h).abs() < 1e-6);
    }
}

#[test]
fn tl_scores_average_over_sequences_with_the_same_arguments() {
    // two sequences: a perfect previous-token head on both; with exclude_first the mean stays 1
    let n = 5;
    let toks = repeat_tokens(n);
    let (a, _) = planted(&toks, Pattern::Previous, 1.0);
    let two = Array::new(vec![2, 1, 11, 11], [a.data.clone(), a.data].concat());
    let toks2 = [toks.clone(), toks].concat();
    let one = tl_score(&two, &toks2, Pattern::Previous, TlMeasure::Mul, true)[0];
    assert!((one - 1.0).abs() < 1e-12);
    let abs = tl_score(&two, &toks2, Pattern::Previous, TlMeasure::Abs, true)[0];
    assert_eq!(abs, 1.0); // row 0's miss sits in column 0, which is excluded
    assert_eq!(round3(0.0099), 0.01);
    assert_eq!(round3(2.675), 2.675);
    assert_eq!(round3(0.0005), 0.001); // 0.0005 is slightly above the tie in binary
    assert_eq!(round3(0.0015), 0.002); // so is 0.0015 (Python: round(0.0015, 3) = 0.002)
    assert_eq!(round3(0.1235), 0.123); // 0.1235 is slightly below it in binary (Python: 0.123)
}

#[test]
fn dormancy_scores_by_hand() {
    // z (B=1, H=2, T=2, d_h=2): head 0 norms 3 and 5 (mean 4), head 1 norms 1 and 1
    let z = Array::new(
        vec![1, 2, 2, 2],
        vec![3.0, 0.0, 3.0, 4.0, 1.0, 0.0, 0.0, 1.0],
    );
    let a = ahon(&z);
    assert_eq!(a, vec![4.0, 1.0]);
    assert_eq!(ahon_ln(&a), vec![1.6, 0.4]);
    // α₁ of a head with everything on token 0 is 1, of one attending to itself 1/T
    let t = 4;
    let mut data = vec![0f32; 2 * t * t];
    for q in 0..t {
        data[q * t] = 1.0;
        data[t * t + q * t + q] = 1.0;
    }
    let attn = Array::new(vec![1, 2, t, t], data);
    assert_eq!(alpha1(&attn), vec![1.0, 0.25]);
    assert_eq!(row_entropy(&attn, None), vec![0.0, 0.0]);
}

#[test]
fn copying_scores_of_copiers_suppressors_and_rotations() {
    let eye = [1.0, 0.0, 0.0, 1.0];
    assert!((copy_score(&eye, 2).unwrap() - 1.0).abs() < 1e-12);
    let neg = [-2.0, 0.0, 0.0, -0.5];
    assert!((copy_score(&neg, 2).unwrap() + 1.0).abs() < 1e-12);
    let rot = [0.0, -1.0, 1.0, 0.0];
    assert!(copy_score(&rot, 2).unwrap().abs() < 1e-12);
    // eigenvalues 3 and −1: (3 − 1) / (3 + 1)
    let m = [1.0, 2.0, 2.0, 1.0];
    assert!((copy_score(&m, 2).unwrap() - 0.5).abs() < 1e-12);
    assert_eq!(copy_score(&[0.0; 4], 2).unwrap(), 0.0);
}

#[test]
fn classes_follow_the_documented_order() {
    let row = |x: f64| vec![x];
    let base = LayerHeads {
        previous: row(0.1),
        duplicate: row(0.0),
        induction: row(0.0),
        alpha1: row(0.1),
        slot_mass: row(0.0),
        entropy: row(1.0),
        value_drain: row(1.0),
        ahon: row(1.0),
        ahon_ln: row(1.0),
    };
    let th = Thresholds::default();
    assert_eq!(classify(&base, 0, None, &th), Class::Other);
    let mut l = base.clone();
    l.previous = row(0.5);
    l.induction = row(0.7);
    assert_eq!(classify(&l, 0, None, &th), Class::Induction);
    let mut l = base.clone();
    l.alpha1 = row(0.5);
    l.slot_mass = row(0.35);
    // parked on the sink but writing (AHON-LN 1.0): not dormant, under the one definition
    // `ablate` uses too
    assert_eq!(classify(&l, 0, Some(-0.9), &th), Class::CopySuppression);
    l.ahon_ln = row(0.4);
    assert_eq!(classify(&l, 0, Some(-0.9), &th), Class::Dormant);
    assert!(th.dormant(0.85, 0.4) && !th.dormant(0.85, 0.6) && !th.dormant(0.7, 0.1));
    assert_eq!(classify(&base, 0, Some(-0.6), &th), Class::CopySuppression);
    let mut l = base.clone();
    l.ahon_ln = row(0.3);
    assert_eq!(classify(&l, 0, Some(0.2), &th), Class::LowOutput);
    assert_eq!(
        Score::Induction.tag(3, 10).to_string(),
        "heads/induction/layer03_head10"
    );
}

#[test]
fn the_trigger_copy_score_reads_each_triggers_copy_source() {
    // One sequence, BOS at 0, task tokens from 1; triggers 0, 1, 2 with offsets 1, 2, 3.
    // Queries (groups): 2 → trigger 1 (q − 2 = 0 is BOS: nothing to copy, not counted),
    // 3 and 6 → trigger 0, 5 → trigger 1; trigger 2 never occurs.
    let t = 8;
    let groups = [0, 0, 2, 1, 0, 2, 1, 0];
    let offsets = [1, 2, 3];
    let mut a = vec![0f32; 2 * t * t];
    let mut put = |h: usize, q: usize, j: usize, w: f32| {
        a[(h * t + q) * t + j] += w;
        a[(h * t + q) * t] += 1.0 - w; // the rest of the row on column 0
    };
    for (q, &g) in groups.iter().enumerate() {
        match (g, q) {
            (2, 2) => {
                put(0, q, 0, 1.0); // on q − 2 = BOS: would count 1.0 if the query were kept
                put(1, q, 1, 1.0);
            }
            (1, _) => {
                put(0, q, q - 1, 0.8);
                put(1, q, 0, 1.0);
            }
            (2, _) => {
                put(0, q, q - 2, 0.3);
                put(1, q, q - 2, 1.0);
            }
            _ => {
                put(0, q, 0, 1.0);
                put(1, q, 0, 1.0);
            }
        }
    }
    let attn = Array::new(vec![1, 2, t, t], a);
    let (score, counts) = trigger_copy_score(&attn, &groups, &offsets, 1);
    assert_eq!(counts, vec![2, 1, 0]);
    assert!(
        (score[0][0] - 0.8).abs() < 1e-7 && score[0][1] == 0.0,
        "{score:?}"
    );
    assert!(
        (score[1][0] - 0.3).abs() < 1e-7 && score[1][1] == 1.0,
        "{score:?}"
    );
    assert!(score[2].iter().all(|s| s.is_nan()), "{score:?}");
    // without BOS (first = 0) the query at 2 copies position 0 and counts
    let (score, counts) = trigger_copy_score(&attn, &groups, &offsets, 0);
    assert_eq!(counts, vec![2, 2, 0]);
    assert!((score[1][0] - 0.65).abs() < 1e-7, "{score:?}");
    assert!((score[1][1] - 0.5).abs() < 1e-7, "{score:?}");
    assert_eq!(
        TriggerCopy(3).tag(0, 2).to_string(),
        "heads/copy_trigger3/layer00_head02"
    );
}
