//! The course runs end to end on a small budget: each claim writes its statement, figures and
//! a verdict; the switch an experiment needs changes what it says and nothing else.

use s2s_course::{Budget, Verdict, claims, run};

#[test]
fn a_quick_course_writes_claims_figures_and_verdicts() {
    let out = std::env::temp_dir().join(format!("s2s-course-{}", std::process::id()));
    let names = ["scaling-factor", "permutation"].map(String::from);
    let (done, page) = run(&names, Budget::Quick, &out, &|_| {}).expect("the course runs");
    assert_eq!(done.len(), 2);
    // Both are exact properties of random vectors and of attention: they hold.
    assert!(
        done.iter().all(|(_, f)| f.verdict == Verdict::Holds),
        "{:?}",
        done.iter().map(|d| &d.1.because).collect::<Vec<_>>()
    );
    let md = std::fs::read_to_string(&page).unwrap();
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
    assert_eq!(json[0]["finding"]["verdict"], "holds");
    let err = run(&["no-such-claim".to_string()], Budget::Quick, &out, &|_| {}).unwrap_err();
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
    let (with, _) = s2s_course::claims::permutation::gap(true, 2);
    let (without, _) = s2s_course::claims::permutation::gap(false, 2);
    assert!(with > 1e-2 && without <= 1e-5, "{with} {without}");
}
