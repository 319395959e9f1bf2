//! The course runs end to end on a small budget: each claim writes its statement, figures and
//! a verdict; the switch an experiment needs changes what it says and nothing else.

use s2s_course::{Budget, Knobs, claims, run};

#[test]
fn a_quick_course_writes_claims_figures_and_verdicts() {
    let out = std::env::temp_dir().join(format!("s2s-course-{}", std::process::id()));
    let names = ["scaling-factor", "permutation"].map(String::from);
    let (done, page) =
        run(&names, Budget::Quick, &Knobs::defaults(Budget::Quick), &out, &|_| {}).expect("the course runs");
    assert_eq!(done.len(), 2);
    // Each trains its pair of small models too (300 steps, one seed): their verdicts depend on
    // that, so only their form is checked here; the exact parts are checked below.
    for (_, f) in &done {
        assert!(!f.because.is_empty() && !f.table.rows.is_empty() && !f.more.is_empty(), "{f:?}");
        // Judged by the one rule, seed by seed: quick mode's one seed.
        assert_eq!(
            f.seeds.as_ref().map(|s| s.iter().map(|m| m.0).collect::<Vec<_>>()),
            Some(vec![1]),
            "{f:?}"
        );
    }
    let md = std::fs::read_to_string(&page).unwrap();
    assert!(
        md.contains(s2s_course::RULE) && md.contains("seeds 1; d_k 64"),
        "the page states its rule and knobs"
    );
    for (c, f) in &done {
        assert!(
            md.contains(c.statement) && md.contains(c.criterion) && md.contains(&f.because),
            "{}",
            c.name
        );
        for fig in &f.figures {
            let svg = std::fs::read_to_string(out.join("plots").join(&fig.file)).unwrap();
            assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{}", fig.file);
        }
    }
    assert!(std::fs::read_to_string(out.join("course.html")).unwrap().contains("<svg"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("findings.json")).unwrap()).unwrap();
    assert!(["holds", "does-not-hold"].contains(&json[0]["finding"]["verdict"].as_str().unwrap()));
    // The exact part of the permutation claim: without positions, equivariant to 1e-5.
    assert!(s2s_course::claims::permutation::gap(false, 4, 1).0 <= 1e-5);
    assert!(s2s_course::claims::permutation::gap(true, 4, 1).0 >= 0.01);
    let err =
        run(&["no-such-claim".to_string()], Budget::Quick, &Knobs::defaults(Budget::Quick), &out, &|_| {})
            .unwrap_err();
    assert!(err.to_string().contains("s2s course list"));
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(
        claims().iter().map(|c| c.name).collect::<std::collections::HashSet<_>>().len(),
        claims().len()
    );
}

/// `positions` at its default (also when a configuration omits it) builds today's model; off,
/// it changes the encoder's output and nothing else (the same parameters).
#[test]
fn the_positions_switch_changes_only_the_positions() {
    use burn::module::Module;
    use burn::tensor::Device;
    use s2s_models::{Model, ModelSpec, Source, TransformerSpec};
    let parsed: TransformerSpec = toml::from_str("d_model = 16\nheads = 2").unwrap();
    assert!(parsed.positions, "omitted, positions are on");
    let d = Device::flex();
    let memory = |positions: bool| {
        d.seed(3);
        let spec = ModelSpec::Transformer(TransformerSpec {
            d_model: 16,
            heads: 2,
            ffn: 32,
            dropout: 0.0,
            attention_dropout: 0.0,
            positions,
            ..Default::default()
        });
        let Model::Transformer(t) = spec.init(40, 40, &d).unwrap() else { unreachable!() };
        let src = Source::new(&[5, 6, 7, 8, 9, 10], &[3, 3], 3, &d);
        (t.num_params(), t.memory(&src).0.into_data().convert::<f32>().try_to_vec::<f32>().unwrap())
    };
    let (on, off) = (memory(true), memory(false));
    assert_eq!(on.0, off.0, "the same parameters");
    assert_ne!(on.1, off.1);
    // With positions the encoder sees order: the permutation check fails; without, it holds.
    let (with, _) = s2s_course::claims::permutation::gap(true, 2, 1);
    let (without, _) = s2s_course::claims::permutation::gap(false, 2, 1);
    assert!(with > 1e-2 && without <= 1e-5, "{with} {without}");
}

/// `causal` at its default (also when omitted) masks the future; off, a teacher-forced pass
/// reads it — position 0's logits change with the token at position 1 — and the parameters
/// stay the same. The pipeline warns about either ablation.
#[test]
fn the_causal_switch_changes_only_the_mask() {
    use burn::module::Module;
    use burn::tensor::{Device, Int, Tensor, TensorData};
    use s2s_models::{ModelSpec, Source, TransformerSpec};
    let parsed: TransformerSpec = toml::from_str("d_model = 16\nheads = 2").unwrap();
    assert!(parsed.causal, "omitted, the mask is on");
    let d = Device::flex();
    // One model each way, read twice with a different second token: no random draw between
    // the two reads (tests running beside this one share the device's random stream).
    let first_logits = |causal: bool| {
        let spec = ModelSpec::Transformer(TransformerSpec {
            d_model: 16,
            heads: 2,
            ffn: 32,
            dropout: 0.0,
            attention_dropout: 0.0,
            causal,
            ..Default::default()
        });
        let m = spec.init(40, 40, &d).unwrap();
        let src = Source::new(&[5, 6, 7], &[3], 3, &d);
        let read = |second: i64| {
            let tgt = Tensor::<2, Int>::from_data(TensorData::new(vec![2i64, second, 9], [1, 3]), &d);
            m.forward(&src, tgt)
                .logits
                .narrow(1, 0, 1)
                .into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .unwrap()
        };
        (m.num_params(), read(10), read(11), spec.ablations().len())
    };
    let on = first_logits(true);
    assert_eq!(on.1, on.2, "masked: position 0 cannot see position 1");
    let off = first_logits(false);
    assert_ne!(off.1, off.2, "unmasked: it reads the future");
    assert_eq!((on.0, on.3, off.3), (off.0, 0, 1));
}

/// `scaled` at its default (also when omitted) divides by √d_k; `scaled = false` builds the
/// same parameters with every attention unscaled, which gives other logits from the same
/// weights (the equation is checked in `transformer::mha`), and the pipeline warns.
#[test]
fn the_scaled_switch_changes_only_the_scaling() {
    use burn::module::Module;
    use burn::tensor::{Device, Int, Tensor, TensorData};
    use s2s_models::{Model, ModelSpec, Source, TransformerSpec};
    let parsed: TransformerSpec = toml::from_str("d_model = 16\nheads = 2").unwrap();
    assert!(parsed.scaled, "omitted, scores are scaled");
    let d = Device::flex();
    let spec = |scaled: bool| {
        ModelSpec::Transformer(TransformerSpec {
            d_model: 16,
            heads: 2,
            ffn: 32,
            dropout: 0.0,
            attention_dropout: 0.0,
            scaled,
            ..Default::default()
        })
    };
    let (on, off) = (spec(true), spec(false));
    let Model::Transformer(built_off) = off.init(40, 40, &d).unwrap() else { unreachable!() };
    let attentions = |t: &s2s_models::transformer::Transformer| {
        let mut v: Vec<bool> = t.encoder.iter().map(|l| l.self_attention.scaled).collect();
        v.extend(t.decoder.iter().flat_map(|l| [l.self_attention.scaled, l.cross_attention.scaled]));
        v
    };
    assert!(attentions(&built_off).iter().all(|s| !s), "every attention unscaled");
    let Model::Transformer(scaled) = on.init(40, 40, &d).unwrap() else { unreachable!() };
    assert!(attentions(&scaled).iter().all(|s| *s), "every attention scaled");
    assert_eq!(
        (scaled.num_params(), on.ablations().len(), off.ablations().len()),
        (built_off.num_params(), 0, 1)
    );
    // The same weights, every attention unscaled.
    let mut unscaled = scaled.clone();
    for l in &mut unscaled.encoder {
        l.self_attention.scaled = false;
    }
    for l in &mut unscaled.decoder {
        l.self_attention.scaled = false;
        l.cross_attention.scaled = false;
    }
    let logits = |m: s2s_models::transformer::Transformer| {
        let src = Source::new(&[5, 6, 7], &[3], 3, &d);
        let tgt = Tensor::<2, Int>::from_data(TensorData::new(vec![2i64, 10, 9], [1, 3]), &d);
        Model::Transformer(m)
            .forward(&src, tgt)
            .logits
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap()
    };
    assert_ne!(logits(scaled), logits(unscaled), "unscaled scores give other logits");
}

/// A claim that cannot measure says what failed and where: a run directory without a trained
/// model is a typed error naming the directory and the part that is missing.
#[test]
fn a_missing_run_is_an_error_naming_its_directory() {
    use burn::tensor::Device;
    use s2s_course::MeasureError;
    let dir = std::env::temp_dir().join(format!("s2s-course-no-run-{}", std::process::id()));
    let spec = s2s_models::ModelSpec::Transformer(claims::trained::transformer());
    let err = claims::trained::load_final(&dir, &spec, &Device::flex()).err().expect("no run there");
    assert!(matches!(err, MeasureError::Tokenizers { .. }), "{err:?}");
    let said = err.to_string();
    assert!(
        said.starts_with("loading the tokenizers of ") && said.contains(&dir.display().to_string()),
        "{said}"
    );
    let finding = s2s_course::Finding::not_run("a trained model did not load", err);
    assert_eq!(
        (finding.because.as_str(), finding.not_measured.as_str()),
        ("a trained model did not load", &*said)
    );
}

/// The knobs reach the claims: seeds chosen on the command line are the seeds each claim is
/// judged on, and the page says them; knobs that cannot run are refused before anything runs.
#[test]
fn knobs_set_the_seeds_and_bad_knobs_are_refused() {
    let out = std::env::temp_dir().join(format!("s2s-course-knobs-{}", std::process::id()));
    let knobs = Knobs { seeds: vec![4, 7], ..Knobs::defaults(Budget::Quick) };
    let names = ["scale-invariance", "bleu-word-order"].map(String::from);
    let (done, page) = run(&names, Budget::Quick, &knobs, &out, &|_| {}).expect("the course runs");
    for (c, f) in &done {
        let seeds: Vec<u64> = f.seeds.as_ref().expect("judged seed by seed").iter().map(|s| s.0).collect();
        assert_eq!(seeds, [4, 7], "{}", c.name);
        // Neither claim holds, for either seed: "met for 0 of 2 seeds".
        assert!(std::fs::read_to_string(&page).unwrap().contains("(met for 0 of 2 seeds)"));
    }
    let md = std::fs::read_to_string(&page).unwrap();
    assert!(md.contains("seeds 4, 7; d_k 64") && md.contains("`s2s course run --quick --seeds 4,7`"), "{md}");
    for (bad, says) in [
        (Knobs { heads: vec![1, 3], ..knobs.clone() }, "--heads"),
        (Knobs { heads: vec![1, 2], ..knobs.clone() }, "include 4"),
        (Knobs { seeds: vec![], ..knobs.clone() }, "--seeds"),
        (Knobs { seeds: vec![2, 2], ..knobs.clone() }, "twice"),
        (Knobs { rate: f64::NAN, ..knobs.clone() }, "--rate"),
        (Knobs { clip: 0.0, ..knobs.clone() }, "--clip"),
        (Knobs { beam: 1, ..knobs.clone() }, "--beam"),
        (Knobs { alpha: -1.0, ..knobs.clone() }, "--alpha"),
        (Knobs { d_k: 0, ..knobs.clone() }, "--d-k"),
    ] {
        let err = run(&names, Budget::Quick, &bad, &out, &|_| {}).unwrap_err().to_string();
        assert!(err.contains(says), "{err}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// The one rule: a claim holds only when every seed meets its criterion, and not on no seed.
#[test]
fn a_claim_holds_only_when_every_seed_meets_its_criterion() {
    use s2s_course::{Verdict, by_seed};
    assert_eq!(by_seed(vec![(1, true), (2, true), (3, true)]).0, Verdict::Holds);
    assert_eq!(by_seed(vec![(1, true), (2, false), (3, true)]).0, Verdict::DoesNotHold);
    assert_eq!(by_seed(vec![]).0, Verdict::DoesNotHold);
    assert_eq!(by_seed(vec![(5, false)]).1, Some(vec![(5, false)]));
}
