//! `s2s`: Seq2Seq Lab's command line. Parses arguments and calls the library crates; one
//! file per subcommand.

#[cfg_attr(any(feature = "jemalloc", feature = "mimalloc"), allow(dead_code))]
mod allocator;
mod args;
mod average;
mod bench;
mod course;
mod data;
mod experiment;
mod export;
mod forced;
mod out;
mod quantize;
#[cfg(unix)]
mod runtime_dir;
mod score;
mod signals;
mod slurm;
mod studio;
mod train;
mod translate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Seq2Seq Lab: train, decode, evaluate and compare neural machine-translation models
/// (LSTM encoder-decoder, Bahdanau and Luong attention, Transformer) on CPU (burn flex) or GPU (wgpu).
#[derive(Parser)]
#[command(name = "s2s", version, propagate_version = true)]
struct Cli {
    /// What computes: `fast` (the fused CPU and GPU kernels) or `reference` (every operation
    /// as its equation in plain tensor operations, to check or read the kernels against;
    /// slower). Default: $S2S_KERNELS, else fast.
    #[arg(long, global = true, value_name = "fast|reference")]
    kernels: Option<s2s_kernels::Kernels>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Average a run's last N checkpoints into a new checkpoint (checkpoint averaging).
    Average(average::AverageArgs),
    /// Training and decoding throughput on the reference shapes (compare with torch_ref.py).
    Bench(bench::BenchArgs),
    /// The lecture notes' claims as experiments: list them, run them, judge each.
    #[command(subcommand)]
    Course(course::CourseCommand),
    /// Corpus tools: generate the built-in language pair, describe a corpus.
    #[command(subcommand)]
    Data(data::DataCommand),
    /// Experiments: train and compare several models (reports with tables and plots).
    #[command(subcommand)]
    Experiment(experiment::ExperimentCommand),
    /// Export a run's checkpoint as safetensors or as a CTranslate2 model directory.
    Export(export::ExportArgs),
    /// Write a run's checkpoint with int8 weights into checkpoints/int8/ (about a quarter of the bytes).
    Quantize(quantize::QuantizeArgs),
    /// Regenerate an experiment's report (results.csv/json, report.md, report.html, plots/).
    Report(experiment::ReportArgs),
    /// Score hypotheses against references with sacreBLEU-identical BLEU and chrF.
    Score(score::ScoreArgs),
    /// Open a local web page that compares trained models live (attention, beam search, AER).
    Studio(studio::StudioArgs),
    /// Train one model into a run directory (resumes if the directory has a checkpoint).
    Train(train::TrainArgs),
    /// Translate sentences from stdin with a trained run (greedy or beam search).
    Translate(translate::TranslateArgs),
}

/// The system allocator, large requests on a cache line and the bytes held counted (see [`allocator`]).
#[cfg(not(any(feature = "jemalloc", feature = "mimalloc")))]
#[global_allocator]
static GLOBAL: allocator::Counting = allocator::Counting::new();

/// jemalloc instead, to compare (the `jemalloc` feature; see [`allocator`]).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// mimalloc instead, to compare (the `mimalloc` feature; see [`allocator`]).
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // burn builds some tensors on its default device, which is wgpu when wgpu is compiled in:
    // resuming training loads the optimizer's state there (then moves it to the parameters'
    // device at the next step), so a CPU run started Vulkan — lavapipe on a machine without a
    // GPU, with its warnings — to hold state for a moment. Every tensor of ours names its
    // device, so the CPU is the default unless BURN_DEVICE says otherwise.
    if std::env::var_os("BURN_DEVICE").is_none() {
        // SAFETY: the first statement of `main`: no other thread exists yet to read the
        // environment.
        unsafe { std::env::set_var("BURN_DEVICE", "flex") };
    }
    // Without a usable XDG_RUNTIME_DIR, Mesa's Vulkan drivers print `error: XDG_RUNTIME_DIR is
    // invalid or not set` at every adapter probe, then work: give them a private one first.
    // SAFETY: still before any other thread exists.
    #[cfg(unix)]
    unsafe {
        runtime_dir::ensure()
    };
    #[cfg(not(any(feature = "jemalloc", feature = "mimalloc")))]
    allocator::tune();
    let cli = Cli::parse();
    if let Some(k) = cli.kernels {
        s2s_kernels::mode::set(k);
    } else if let Err(e) = s2s_kernels::mode::check_env() {
        eprintln!("error: S2S_KERNELS: {e}");
        return ExitCode::FAILURE;
    }
    if matches!(cli.command, Command::Train(_) | Command::Experiment(_) | Command::Course(_)) {
        signals::install();
    }
    // The command runs on a worker of the rayon pool that every kernel splits its work over,
    // so a parallel loop shares its work with the thread that reaches it instead of handing it
    // to the pool and sleeping until it is done: greedy decoding +12–16 % on the reference
    // shapes (docs/decisions.md). The stack is the main thread's usual 8 MiB.
    //
    // The pool is never dropped: dropping it lets its threads exit while `main` returns, and
    // a thread that exits while the exit handlers run frees its thread-local data beside
    // libEGL's own teardown (the GPU probe loads it). With both at once glibc aborted with
    // "double free or corruption", or crashed, in about one `s2s translate` in 300–800
    // (cores: the pool's worker in `__nptl_deallocate_tsd`, `main` in
    // `__glDispatchDestroyTable`). Kept, its threads sleep until the process ends.
    let pool = rayon::ThreadPoolBuilder::new().stack_size(8 << 20).build().map(|p| &*Box::leak(Box::new(p)));
    let result = match pool {
        Ok(pool) => pool.install(|| run(cli.command)),
        Err(_) => run(cli.command),
    };
    // What `print!` may have left buffered: its error is one too, not something to drop.
    let result = result.and_then(|()| Ok(out::flush()?));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if args::is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", message(&e));
            ExitCode::FAILURE
        }
    }
}

/// Runs one command.
fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Average(a) => average::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Course(c) => course::run(c),
        Command::Data(c) => data::run(c),
        Command::Experiment(c) => experiment::run(c),
        Command::Export(a) => export::run(a),
        Command::Quantize(a) => quantize::run(a),
        Command::Report(a) => experiment::report(a),
        Command::Score(a) => score::run(a),
        Command::Studio(a) => studio::run(a),
        Command::Train(a) => train::run(a),
        Command::Translate(a) => translate::run(a),
    }
}

/// `e` and its causes joined by `: `, each cause left out when the message so far already
/// says it (the library errors put their I/O cause in their own text, `{path}: {source}`,
/// and also report it as their source).
fn message(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1).map(|c| c.to_string()) {
        if !text.contains(&cause) {
            text = format!("{text}: {cause}");
        }
    }
    text
}
