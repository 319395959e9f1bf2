//! Decoding steps captured as graphs and replayed give the eager search's output, for every
//! model kind (wgpu; lavapipe where there is no GPU: the same launches, executed on the CPU):
//! - to the bit — tokens and scores — the same padded search launched eagerly
//!   ([`Run::Eager`]), for batches that record a chain, replay it, and extend it;
//! - the tokens of the plain search ([`greedy`], [`beam_search`]), whose rows leave the batch
//!   as they finish.
//!
//! Without a Vulkan adapter the test fails under `CI=true` and is skipped elsewhere.

use burn::tensor::Device;
use s2s_decode::{BeamConfig, CapturedSearch, Hypothesis, MaxLength, Run, beam_search, greedy};
use s2s_models::{Model, ModelSpec, Source};

fn specs() -> Vec<(&'static str, ModelSpec)> {
    s2s_models::testing::tiny_specs(0.0)
}

const VOCAB: usize = 24;

/// Sentences of lengths `lens` (ids ≥ 4, `</s>` last), padded to the longest, row-major.
fn batch(lens: &[usize], salt: u32) -> (Vec<u32>, usize) {
    let len = lens.iter().copied().max().unwrap_or(0);
    let mut ids = vec![0u32; lens.len() * len];
    for (r, &l) in lens.iter().enumerate() {
        for j in 0..l {
            let x = (r as u32 * 7 + j as u32 * 13 + salt * 5) % (VOCAB as u32 - 4);
            ids[r * len + j] = if j + 1 == l { 3 } else { 4 + x };
        }
    }
    (ids, len)
}

fn tokens(h: &[Hypothesis]) -> Vec<Vec<u32>> {
    h.iter().map(|h| h.tokens.clone()).collect()
}

/// Three batches: one records a chain, one of the same bucket with longer sources replays it
/// and records the links it lacks, one of another bucket records its own.
const BATCHES: [&[usize]; 3] = [&[3, 5, 2], &[6, 4, 6], &[2, 7, 3, 5, 4, 6]];

const LIMIT: MaxLength = MaxLength { a: 1.0, b: 4 };

fn model(spec: &ModelSpec, gpu: &Device) -> Model {
    gpu.seed(5);
    spec.init(VOCAB, VOCAB, gpu).unwrap()
}

#[test]
fn replayed_greedy_search_equals_eager_greedy_search() {
    let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
    for (name, spec) in specs() {
        let model = model(&spec, &gpu);
        let mut replayed = CapturedSearch::new(&model, &gpu, Run::Replay, 4);
        let mut eager = CapturedSearch::new(&model, &gpu, Run::Eager, 4);
        for (i, lens) in BATCHES.iter().enumerate() {
            let (ids, len) = batch(lens, i as u32);
            let r = replayed.greedy(&ids, lens, len, LIMIT);
            let e = eager.greedy(&ids, lens, len, LIMIT);
            assert_eq!(r, e, "{name}, batch {i}: replayed against eager, same padding");
            let plain = greedy(&model, &Source::new(&ids, lens, len, &gpu), LIMIT, false);
            assert_eq!(tokens(&r), tokens(&plain), "{name}, batch {i}: against plain greedy search");
        }
        let s = replayed.stats();
        assert!(s.replays > s.captures, "{name}: later batches replay ({s:?})");
        assert_eq!(s.chains_alive, 2, "{name}: two buckets");
    }
}

#[test]
fn replayed_beam_search_equals_eager_beam_search() {
    let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
    let cfg = BeamConfig { beam: 3, nbest: 2, max_length: LIMIT, ..Default::default() };
    for (name, spec) in specs() {
        let model = model(&spec, &gpu);
        let mut replayed = CapturedSearch::new(&model, &gpu, Run::Replay, 4);
        let mut eager = CapturedSearch::new(&model, &gpu, Run::Eager, 4);
        for (i, lens) in BATCHES.iter().enumerate() {
            let (ids, len) = batch(lens, i as u32);
            let r = replayed.beam(&ids, lens, len, &cfg);
            let e = eager.beam(&ids, lens, len, &cfg);
            assert_eq!(r, e, "{name}, batch {i}: replayed against eager, same padding");
            let plain = beam_search(&model, &Source::new(&ids, lens, len, &gpu), &cfg);
            let t = |h: &[Vec<Hypothesis>]| h.iter().map(|n| tokens(n)).collect::<Vec<_>>();
            assert_eq!(t(&r), t(&plain), "{name}, batch {i}: against plain beam search");
        }
        let s = replayed.stats();
        assert!(s.replays > s.captures, "{name}: later batches replay ({s:?})");
    }
}

/// A link that cannot be recorded (on an H100, cubecl's pools once had no room for it) costs
/// its shape the graphs, not the output: that batch is searched again eagerly, and so is every
/// later batch of the shape, without trying to record again; other shapes still replay.
#[test]
fn a_shape_whose_recording_fails_decodes_eagerly_with_the_same_output() {
    let Some(gpu) = s2s_kernels::testing::wgpu_or_skip() else { return };
    let cfg = BeamConfig { beam: 3, nbest: 2, max_length: LIMIT, ..Default::default() };
    for (name, spec) in specs() {
        let model = model(&spec, &gpu);
        let mut eager = CapturedSearch::new(&model, &gpu, Run::Eager, 4);
        let mut refusing = CapturedSearch::new(&model, &gpu, Run::Replay, 4);
        refusing.refuse_recording_at(1);
        // The first two batches share a shape; the second comes after its shape was refused.
        for (i, lens) in BATCHES[..2].iter().enumerate() {
            let (ids, len) = batch(lens, i as u32);
            assert_eq!(
                refusing.beam(&ids, lens, len, &cfg),
                eager.beam(&ids, lens, len, &cfg),
                "{name}, beam {i}"
            );
            assert_eq!(
                refusing.greedy(&ids, lens, len, LIMIT),
                eager.greedy(&ids, lens, len, LIMIT),
                "{name}, {i}"
            );
        }
        let s = refusing.stats();
        assert_eq!(s.refused, 2, "{name}: the beam shape and the greedy shape, once each ({s:?})");
        // Each refused shape recorded its encoder and its first link, once.
        assert_eq!(s.captures, 4, "{name}: {s:?}");
        assert!(refusing.first_refusal().is_some_and(|w| w.contains("test hook")), "{name}");
    }
}
