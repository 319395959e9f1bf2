//! `s2s bench`: training and decoding throughput on the reference shapes.

use anyhow::{Result, bail};
use clap::Args;
use s2s_train::bench::{BenchConfig, BenchResult, Jobs, StepMode, bench};
use s2s_train::device::{DeviceChoice, select};
use s2s_train::step_rate::lstm_step_rate;

use crate::out::outln;

/// Measure training tokens/s and decoding sentences/s on the shapes of
/// experiments/bench/models.json (the same as ../shared/bench/torch_ref.py's).
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Device: auto, cpu or wgpu.
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// Comma-separated shapes (default: all).
    #[arg(long)]
    models: Option<String>,
    /// Timed training steps (decoding runs max(1, steps/4) passes); with --lstm-step, rounds.
    #[arg(long, default_value_t = 20, value_parser = crate::args::at_least_one)]
    steps: usize,
    /// One JSON object per model (like torch_ref.py) instead of a table.
    #[arg(long)]
    json: bool,
    /// Instead of the models: the LSTM step (one layer of the `lstm` shape over `tgt_len`
    /// steps, gate math and all) beside the machine's best product rate, measured in the same
    /// run (CPU only; docs/benchmarks.md).
    #[arg(long)]
    lstm_step: bool,
    /// Shapes from this file (the format of experiments/bench/models.json) instead of the
    /// reference ones; experiments/bench/launch-bound.json has the same layers, narrow, so
    /// that a step's time is mostly the cost of launching its operations.
    #[arg(long)]
    shapes: Option<std::path::PathBuf>,
    /// Instead of the models: the host cost of one kernel launch, eager against replayed from
    /// a captured graph, on a chain of small dependent kernels (GPU devices; docs/benchmarks.md).
    #[arg(long)]
    launch_probe: bool,
    /// With --launch-probe: dependent launches a pass (even).
    #[arg(long, default_value_t = 200)]
    probe_kernels: usize,
    /// With --launch-probe: f32 elements each launch touches.
    #[arg(long, default_value_t = 64)]
    probe_elems: usize,
    /// Instead of the models: burn's matrix product at the shapes of a training step (the
    /// `transformer` and `lstm` shapes at this batch), in f32 and, where the device has it,
    /// f16, with `--steps` products each (docs/benchmarks.md; scripts/product-probe.py times
    /// PyTorch at the same shapes).
    #[arg(long)]
    product_probe: bool,
    /// Training steps after the warm-up are one captured graph, replayed, and so are greedy
    /// and beam-5 decoding steps after their untimed pass (GPU devices; `on` or `off`).
    #[arg(long, default_value = "off")]
    capture: Capture,
    /// Parts a CPU training step is cut into over the cores (the trainer's `core_split`;
    /// 1: the step whole, every core on each operation).
    #[arg(long, default_value_t = s2s_train::TrainSpec::default().core_split as usize)]
    core_split: usize,
    /// Matrix-product precision: f32, or mixed (f16 products, f32 weights, dynamic loss
    /// scaling; eager GPU steps), compared with PyTorch's autocast (scripts/torch_precision.py).
    #[arg(long, default_value = "f32")]
    precision: s2s_train::precision::Precision,
    /// Weights of the decoding passes' products: none (f32) or int8 (as `s2s translate
    /// --quantize int8`; the CPU only). Training stays f32.
    #[arg(long, default_value = "none", value_name = "none|int8")]
    quantize: s2s_kernels::quantize::Quantize,
    /// Training only: no decoding passes (their figures 0), e.g. to profile the training step.
    #[arg(long, conflicts_with = "no_train")]
    no_decode: bool,
    /// Decoding only, with the freshly initialised model (its training figures 0), e.g. to
    /// profile decoding.
    #[arg(long)]
    no_train: bool,
}

/// `--capture`: replay the training and decoding steps from captured graphs, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Capture {
    On,
    Off,
}

/// Runs `s2s bench`.
pub fn run(a: BenchArgs) -> Result<()> {
    let cfg = match &a.shapes {
        Some(path) => BenchConfig::from_file(path)?,
        None => BenchConfig::shipped(),
    };
    let names = shape_names(&a, &cfg)?;
    if a.lstm_step {
        if matches!(a.device, DeviceChoice::Wgpu) {
            bail!("--lstm-step measures the CPU kernels (flex) only: drop --device wgpu");
        }
        return lstm_step(&cfg, &shapes_file(&a), a.steps, a.json);
    }
    let (device, device_name) = select(a.device);
    eprintln!("device: {device_name}");
    let quantize = s2s_train::quantized::choose(Some(a.quantize), false, &device)?;
    if let Some(kernel) = quantize.kernel_name() {
        eprintln!("decoding products: int8 ({kernel})");
    }
    if a.launch_probe {
        return launch_probe(&device, &device_name, &a);
    }
    if a.product_probe {
        return product_probe(&cfg, &device, &device_name, &a);
    }
    if !a.json {
        outln!(
            "| model | params | train tok/s | step ms: forward / backward / clip / adam | host ms/step | greedy sent/s | beam-5 sent/s | peak RSS MiB |"
        )?;
        outln!("|---|---|---|---|---|---|---|---|")?;
    }
    for n in names {
        let spec = cfg.models[&n].spec()?;
        let mut r = s2s_kernels::quantize::with_quantize(quantize, || {
            bench(
                &n,
                &spec,
                cfg.batch,
                a.steps,
                &device,
                &device_name,
                StepMode {
                    settings: cfg.train.settings(),
                    precision: a.precision,
                    capture: a.capture == Capture::On,
                    core_split: a.core_split,
                },
                jobs(&a),
            )
        })?;
        r.quantize = quantize.to_string();
        if a.json {
            outln!("{}", serde_json::to_string(&r)?)?;
        } else {
            print_row(&r)?;
        }
    }
    Ok(())
}

/// Returns the shapes named by --models (all of the configuration's by default), each checked to exist.
fn shape_names(a: &BenchArgs, cfg: &BenchConfig) -> Result<Vec<String>> {
    let names: Vec<String> = match &a.models {
        Some(m) => m.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        None => cfg.models.keys().cloned().collect(),
    };
    for n in &names {
        if !cfg.models.contains_key(n) {
            bail!(
                "unknown shape `{n}`: choose from {}",
                cfg.models.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    Ok(names)
}

/// The shapes file read: `--shapes`, else the shipped one.
fn shapes_file(a: &BenchArgs) -> String {
    a.shapes.as_ref().map_or("experiments/bench/models.json".to_string(), |p| p.display().to_string())
}

/// Returns what to measure: training only (--no-decode), decoding only (--no-train), or both.
fn jobs(a: &BenchArgs) -> Jobs {
    match (a.no_decode, a.no_train) {
        (true, _) => Jobs::Train,
        (_, true) => Jobs::Decode,
        _ => Jobs::Both,
    }
}

/// Prints one model's figures as a row of the markdown table.
fn print_row(r: &BenchResult) -> std::io::Result<()> {
    let ms = |p: &str| r.train_phase_ms.get(p).copied().unwrap_or(0.0);
    outln!(
        "| {} | {} | {:.0} | {:.0} / {:.0} / {:.0} / {:.0} | {} | {:.1} | {:.1} | {:.0} |",
        r.model,
        r.params,
        r.train_tokens_per_s,
        ms("forward"),
        ms("backward"),
        ms("clip"),
        ms("adam"),
        r.train_host_ms.map_or("–".to_string(), |h| format!("{h:.1}")),
        r.decode_sentences_per_s,
        r.beam5_sentences_per_s,
        r.peak_rss_mib
    )
}

/// `--launch-probe` launches our own cubecl kernel, which burn's fusion (`gpu-tuned`) does not take.
#[cfg(feature = "gpu-tuned")]
fn launch_probe(_: &burn::tensor::Device, _: &str, _: &BenchArgs) -> Result<()> {
    bail!("--launch-probe needs the default build (without --features gpu-tuned)")
}

/// `s2s bench --launch-probe`: host µs a launch, eager and replayed, with `--steps` rounds.
#[cfg(not(feature = "gpu-tuned"))]
fn launch_probe(device: &burn::tensor::Device, device_name: &str, a: &BenchArgs) -> Result<()> {
    use s2s_kernels::bench::{ProbeConfig, launch_probe};
    let cfg = ProbeConfig { kernels: a.probe_kernels, elems: a.probe_elems, rounds: a.steps.max(1) };
    let r = launch_probe(device, cfg)?;
    if a.json {
        let mut v = serde_json::to_value(&r)?;
        v["device"] = device_name.into();
        outln!("{v}")?;
        return Ok(());
    }
    if !r.host_measured {
        eprintln!("note: per-thread CPU clocks are not readable here (Linux only): host figures are 0");
    }
    outln!(
        "{} dependent launches of {} elements, {} rounds a path (host: calling thread + cubecl's device-service threads)",
        r.kernels,
        r.elems,
        r.rounds
    )?;
    outln!("| path | host µs/launch | calling thread | device service | other threads | wall µs/launch |")?;
    outln!("|---|---|---|---|---|---|")?;
    for (name, c) in [("eager", r.eager), ("replayed", r.replay)] {
        outln!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            c.host_us,
            c.caller_us,
            c.device_service_us,
            c.other_us,
            c.wall_us
        )?;
    }
    outln!("host time eager / replayed: {:.2}×; capture took {:.1} ms", r.host_ratio, r.capture_ms)?;
    Ok(())
}

/// `s2s bench --product-probe`: one JSON object a shape and element type (with --json), else a
/// table.
fn product_probe(
    cfg: &BenchConfig,
    device: &burn::tensor::Device,
    device_name: &str,
    a: &BenchArgs,
) -> Result<()> {
    use s2s_kernels::bench::{product_probe, step_shapes, table_entries};
    let widths = cfg.models.get("transformer").and_then(|s| s.transformer_widths());
    let hidden = cfg.models.get("lstm").and_then(|s| s.hidden());
    let (Some((d, ffn)), Some(hidden)) = (widths, hidden) else {
        bail!(
            "{} lacks a `transformer` shape with d_model and ffn or an `lstm` shape with hidden, which --product-probe takes its products from: add them, or use experiments/bench/models.json",
            shapes_file(a)
        );
    };
    let b = cfg.batch;
    let shapes = step_shapes(b.sentences * b.tgt_len, d, ffn, b.tgt_vocab, b.sentences, hidden);
    let rates = product_probe(device, &shapes, a.steps.max(1));
    if !a.json {
        outln!("| product | m × k × n | dtype | kernel | ms | TFLOP/s | rel. error vs f32 |")?;
        outln!("|---|---|---|---|---|---|---|")?;
    }
    for r in &rates {
        if a.json {
            let mut v = serde_json::to_value(r)?;
            v["device"] = device_name.into();
            outln!("{v}")?;
        } else {
            let s = &r.shape;
            let err = r.rel_err.map_or("–".to_string(), |e| format!("{e:.1e}"));
            outln!(
                "| {} | {} × {} × {} | {} | {} | {:.3} | {:.2} | {err} |",
                s.name,
                s.m,
                s.k,
                s.n,
                r.dtype,
                r.kernel.unwrap_or("burn"),
                r.ms,
                r.tflops
            )?;
        }
    }
    // The rows the table (s2s-kernels `gemm::table`) would take from this run: on stderr, as
    // S2S_GPU_PRODUCTS entries, so --json's stdout stays one object a line.
    let measured = s2s_kernels::bench::products::MEASURED_ON;
    eprintln!(
        "the product table in use: {}",
        if measured.is_empty() {
            "empty (no GPU has measured it; burn's kernel for every shape)"
        } else {
            measured
        }
    );
    let entries = table_entries(&rates, 1.1);
    if !entries.is_empty() {
        eprintln!("kernels that beat burn's by 10 % (S2S_GPU_PRODUCTS={})", entries.join(","));
    }
    Ok(())
}

/// `s2s bench --lstm-step`: the `lstm` shape's layer (hidden units, batch, `tgt_len` steps;
/// the output product over `tgt_vocab`), each figure the best of `rounds` interleaved rounds.
fn lstm_step(cfg: &BenchConfig, file: &str, rounds: usize, json: bool) -> Result<()> {
    let Some(hidden) = cfg.models.get("lstm").and_then(|s| s.hidden()) else {
        bail!("{file} has no `lstm` shape with `hidden`: add one, or leave out --shapes");
    };
    let b = cfg.batch;
    eprintln!("device: cpu (flex), {} threads", rayon::current_num_threads());
    let r = lstm_step_rate(b.sentences, hidden, b.tgt_len, b.tgt_vocab, rounds.max(1));
    if json {
        outln!("{}", serde_json::to_string(&r)?)?;
        return Ok(());
    }
    outln!("| product (best of {} rounds) | GFLOP/s |", rounds.max(1))?;
    outln!("|---|---|")?;
    for p in &r.products {
        outln!("| {} | {:.1} |", p.product, p.gflops)?;
    }
    outln!()?;
    outln!(
        "| LSTM layer `[{}, {}]`, {} steps | GFLOP/s | of the best product rate ({:.1}) |",
        r.batch,
        r.hidden,
        r.time,
        r.best_product_gflops
    )?;
    outln!("|---|---|---|")?;
    outln!("| forward, decoding | {:.1} | **{:.2}** |", r.decode_layer_gflops, r.decode_ratio)?;
    outln!(
        "| forward, training (saves for backward) | {:.1} | **{:.2}** |",
        r.train_forward_gflops,
        r.train_forward_ratio
    )?;
    outln!("| backward, training | {:.1} | {:.2} |", r.train_backward_gflops, r.train_backward_ratio)?;
    outln!(
        "| training step (forward + backward of one round) | {:.1} | **{:.2}** |",
        r.train_step_gflops,
        r.train_step_ratio
    )?;
    Ok(())
}
