//! `s2s studio`: serve a local page that compares trained models live.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use s2s_studio::{Limits, Options};
use s2s_train::device::{DeviceChoice, select};

use crate::out::outln;

/// Open a local web page that compares trained models live: translations with token
/// probabilities, attention heatmaps, beam search step by step, forced-decoding scores, AER.
#[derive(Args, Debug)]
pub struct StudioArgs {
    /// An experiment directory (runs/NAME: every model in it) or run directories.
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0 exposes the studio to the network).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0: any free one).
    #[arg(long, default_value_t = 8340)]
    port: u16,
    /// Which checkpoint of each run: best, last, or a name under RUN/checkpoints.
    #[arg(long, default_value = "best")]
    checkpoint: String,
    /// Requests decoded at once.
    #[arg(long, default_value_t = 2, value_parser = crate::args::at_least_one)]
    workers: usize,
    /// Requests waiting for a worker at most; more are refused with 503 until one finishes.
    #[arg(long, default_value_t = 32)]
    queue: usize,
    /// Longest text accepted, in characters.
    #[arg(long, default_value_t = Limits::default().max_chars)]
    max_chars: usize,
    /// Longest source (and reference) accepted, in the model's tokens.
    #[arg(long, default_value_t = Limits::default().max_src_tokens, value_parser = crate::args::at_least_one)]
    max_src_tokens: usize,
    /// Largest beam the page may ask for. Refused at start when a search at this beam, over the
    /// longest source, could exceed its share of the memory limit (half of this machine's
    /// memory, shared by the workers; S2S_SEARCH_MEMORY sets another, e.g. 8G).
    #[arg(long, default_value_t = Limits::default().max_beam, value_parser = crate::args::at_least_one)]
    max_beam: usize,
    /// Longest a translation request may take, in seconds, from its body to its answer (waiting
    /// for a worker included): past it, decoding stops and the page gets 504.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout: u64,
    /// Longest a connection may take to send a request's headers, or stay idle between requests,
    /// in seconds; then it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    read_timeout: u64,
    /// Connections served at once; past it, a new connection closes the one idle longest (one
    /// answering a request is kept: then the new one waits).
    #[arg(long, default_value_t = Options::default().max_connections, value_parser = crate::args::at_least_one)]
    max_connections: usize,
    /// A host name the page may be opened under besides localhost and IP addresses (this
    /// machine's name on a network, with --host 0.0.0.0); may be given several times. Requests
    /// for other names are refused (403), so that no web page can reach the studio by
    /// rebinding its own name to this machine.
    #[arg(long = "allow-host", value_name = "NAME")]
    allowed_hosts: Vec<String>,
    /// Device: cpu (default: one sentence at a time decodes fastest there), wgpu or auto.
    #[arg(long, default_value = "cpu")]
    device: DeviceChoice,
    /// Weights of the decoding products: none (f32) or int8 (as `s2s translate --quantize`;
    /// the CPU only). Default: int8 with `--checkpoint int8` (`s2s quantize`), else none.
    #[arg(long, value_name = "none|int8")]
    quantize: Option<s2s_kernels::quantize::Quantize>,
}

/// Loads the models and serves until Ctrl-C.
pub fn run(a: StudioArgs) -> Result<()> {
    let opts = Options {
        host: a.host,
        port: a.port,
        workers: a.workers,
        queue: a.queue,
        limits: Limits { max_chars: a.max_chars, max_src_tokens: a.max_src_tokens, max_beam: a.max_beam },
        request_timeout: Duration::from_secs(a.request_timeout),
        read_timeout: Duration::from_secs(a.read_timeout),
        max_connections: a.max_connections,
        allowed_hosts: a.allowed_hosts,
    };
    // Bound before the models load, so that a taken port fails at once.
    let listener = s2s_studio::bind(&opts)?;
    let (device, name) = select(a.device);
    eprintln!("device: {name}");
    let int8_checkpoint = a.checkpoint == s2s_train::quantized::NAME;
    let quantize = s2s_train::quantized::choose(a.quantize, int8_checkpoint, &device)?;
    if let Some(kernel) = quantize.kernel_name() {
        eprintln!("products: int8 ({kernel})");
    }
    s2s_kernels::quantize::set_quantize(quantize);
    let studio = s2s_studio::open(&a.paths, &a.checkpoint, device, name, |m| eprintln!("{m}"))?;
    opts.limits.check_memory(&studio, opts.workers, s2s_decode::MemoryLimit::from_env()?)?;
    s2s_studio::serve(studio, listener, &opts, |addr| {
        // stdout, one line, flushed: scripts and tests read the address from it. A stdout that
        // cannot be written does not stop the server (stderr says where it is too).
        if let Err(e) = outln!("studio: http://{addr}/  (Ctrl-C stops it)") {
            eprintln!("studio: http://{addr}/ ({e})");
        }
    })?;
    eprintln!("stopped");
    Ok(())
}
