use super::*;

/// One tag of every shape, as the writers spell them.
fn every_shape() -> Vec<(Tag, &'static str)> {
    vec![
        (Tag::Run(Scalar::ValLoss), "val/loss"),
        (Tag::Run(Scalar::Kurtosis), "act/kurtosis"),
        (Tag::sink_rate("0.3", 1), "sink/rate_eps0.3/pos01"),
        (Tag::sink_rate("0.05", 12), "sink/rate_eps0.05/pos12"),
        (Tag::slot_rate("0.3"), "sink/slot_rate_eps0.3"),
        (
            Tag::LayerRate {
                eps: "0.3".into(),
                layer: 7,
            },
            "sink/layer_rate_eps0.3/layer07",
        ),
        (Tag::Layer(LayerMetric::Top2, 3), "act/top2/layer03"),
        (
            Tag::Layer(LayerMetric::SecondaryCount, 0),
            "sink/secondary_count/layer00",
        ),
        (
            Tag::Head(HeadMetric::ImportanceFirst, 1, 10),
            "sink/importance_first/layer01_head10",
        ),
        (
            Tag::Head(HeadMetric::BbAttnFirst(Group::Trigger(2)), 0, 3),
            "bb/attn_first_trigger2/layer00_head03",
        ),
        (
            Tag::Head(HeadMetric::BbAttnFirst(Group::Dormant), 2, 0),
            "bb/attn_first_dormant/layer02_head00",
        ),
        (
            Tag::Head(HeadMetric::Score("ahon_ln".into()), 29, 8),
            "heads/ahon_ln/layer29_head08",
        ),
        (
            Tag::Gain {
                param: "blocks.1.attn.alpha".into(),
                head: None,
            },
            "gains/blocks.1.attn.alpha",
        ),
        (
            Tag::Gain {
                param: "blocks.0.attn.sink_logit".into(),
                head: Some(3),
            },
            "gains/blocks.0.attn.sink_logit/h3",
        ),
    ]
}

#[test]
fn every_tag_is_written_as_documented_and_read_back() {
    for (tag, text) in every_shape() {
        assert_eq!(tag.to_string(), text);
        assert_eq!(text.parse::<Tag>().unwrap(), tag, "{text}");
    }
    for s in Scalar::ALL {
        assert_eq!(s.name().parse::<Tag>().unwrap(), Tag::Run(s));
    }
    for m in LayerMetric::ALL {
        let t = Tag::Layer(m, 11);
        assert_eq!(t.to_string().parse::<Tag>().unwrap(), t);
    }
}

#[test]
fn a_tag_that_is_not_one_is_refused_with_the_shapes() {
    for bad in [
        "val/los",
        "sink/rate_eps0.3",
        "sink/rate_epsx/pos01",
        "act/norm_ratio/layer",
        "act/norm_ratio/layer1a",
        "heads/Induction/layer00_head00",
        "nope/layer00_head00",
        "gains/",
        "gains/a/b",
        "",
    ] {
        let e = bad.parse::<Tag>().unwrap_err().to_string();
        assert!(
            e.contains(&format!("`{bad}`")) && e.contains("val/loss"),
            "{e}"
        );
    }
}

#[test]
fn a_family_regex_selects_its_own_tags_only() {
    let fam = Tag::Layer(LayerMetric::NormRatio, 4).family();
    assert_eq!(fam, "act/norm_ratio");
    assert_eq!(Tag::family_regex(&fam), r"act/norm_ratio(/.*)?$");
    assert_eq!(
        Tag::family_regex(&Tag::sink_rate("0.3", 2).family()),
        r"sink/rate_eps0\.3(/.*)?$"
    );
}

#[test]
fn records_round_trip_with_nan_as_null() {
    let r = Record {
        step: 40,
        time: 1.5,
        scalars: [
            (Tag::Run(Scalar::TrainLoss), f64::NAN),
            (Tag::sink1("0.3"), 87.5),
            (Tag::Layer(LayerMetric::NormRatio, 0), 2.25),
        ]
        .into_iter()
        .collect(),
    };
    let line = serde_json::to_string(&r).unwrap();
    assert_eq!(
        line,
        r#"{"step":40,"time":1.5,"scalars":{"act/norm_ratio/layer00":2.25,"sink/rate_eps0.3/pos01":87.5,"train/loss":null}}"#
    );
    let back: Record = serde_json::from_str(&line).unwrap();
    assert_eq!(back.step, 40);
    assert!(back.get(&Tag::Run(Scalar::TrainLoss)).unwrap().is_nan());
    assert_eq!(back.get(&Tag::sink1("0.3")), Some(87.5));
    assert_eq!(back.get(&Tag::Run(Scalar::ValLoss)), None);
}

#[test]
fn reading_names_a_bad_line_and_leaves_out_an_unfinished_last_one() {
    let dir = std::env::temp_dir().join(format!("sinklab-tags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("metrics.jsonl");
    let good = r#"{"step":1,"time":0.5,"scalars":{"train/loss":3.0}}"#;
    std::fs::write(&path, format!("{good}\n{}", &good[..20])).unwrap();
    let rs = read(&path).unwrap();
    assert_eq!(rs.len(), 1);
    assert_eq!(rs[0].get(&Tag::Run(Scalar::TrainLoss)), Some(3.0));

    std::fs::write(&path, format!("{good}\n{{\"step\":2}}\n{good}\n")).unwrap();
    let e = read(&path).unwrap_err().to_string();
    assert!(e.contains("metrics.jsonl:2: not a metrics record"), "{e}");

    std::fs::write(
        &path,
        r#"{"step":1,"time":0.5,"scalars":{"train/los":3.0}}"#.to_string() + "\n",
    )
    .unwrap();
    let e = read(&path).unwrap_err().to_string();
    assert!(
        e.contains(":1:") && e.contains("unknown metric tag `train/los`"),
        "{e}"
    );
    assert!(read_if_present(&dir.join("none.jsonl")).unwrap().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_dashboard_regexes_select_what_their_tags_write() {
    let re = |r: &str| regex::Regex::new(r).unwrap();
    let sink1 = re(&sink_rate_every_eps_regex(1));
    assert!(sink1.is_match(&Tag::sink1("0.3").to_string()));
    assert!(sink1.is_match(&Tag::sink1("0.05").to_string()));
    assert!(!sink1.is_match(&Tag::sink_rate("0.3", 2).to_string()));
    let bb = re(&bb_attn_first_regex());
    for g in [Group::Dormant, Group::Trigger(0), Group::Trigger(11)] {
        assert!(bb.is_match(&Tag::Head(HeadMetric::BbAttnFirst(g), 1, 2).to_string()));
    }
    assert!(!bb.is_match("bb/loss_copy"));
    let drain = re(&Tag::family_regex(
        &Tag::Head(HeadMetric::ValueDrain, 0, 0).family(),
    ));
    assert!(drain.is_match("kv/value_drain/layer03_head01"));
    assert!(!drain.is_match("kv/value_norm_first/layer03"));
    let val = re(&Tag::family_regex(&Tag::Run(Scalar::ValLoss).family()));
    assert!(val.is_match("val/loss") && !val.is_match("val/loss_unchanged"));
}
