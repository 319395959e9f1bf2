//! The HTTP side: one page and a JSON API, served by axum on a tokio runtime.
//!
//! - `GET /` — the page (embedded in the binary: no network needed);
//! - `GET /api/info` — the models, the test sentences to pick, the limits;
//! - `POST /api/translate` — a [`Request`] → every asked model's [`ModelResult`].
//!
//! Decoding runs on a bounded pool: at most `workers` requests decode at once (each on a
//! blocking thread), at most `queue` more wait for a worker, and a request beyond that is
//! answered 503 at once. Bad requests get a 4xx and a JSON `{"error": …}` the page shows.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::StudioError;
use crate::analyse::{Limits, ModelResult, Request, RequestError, run_model};
use crate::load::{Example, Studio};

/// The page: HTML, CSS and JavaScript in one file.
pub const PAGE: &str = include_str!("page.html");

/// Largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to bind (127.0.0.1: this machine only).
    pub host: String,
    /// Port (0: any free one).
    pub port: u16,
    /// Requests decoded at once.
    pub workers: usize,
    /// Requests waiting for a worker at most.
    pub queue: usize,
    /// Per-request limits.
    pub limits: Limits,
}

struct App {
    studio: Studio,
    limits: Limits,
    info: Vec<u8>,
    /// One permit per worker.
    workers: Arc<Semaphore>,
    /// One permit per request decoding or waiting (`workers + queue`).
    admitted: Arc<Semaphore>,
}

#[derive(Serialize)]
struct Info<'a> {
    models: Vec<ModelInfo<'a>>,
    examples: &'a [Example],
    gold: bool,
    device: &'a str,
    max_chars: usize,
    max_src_tokens: usize,
    max_beam: usize,
}

#[derive(Serialize)]
struct ModelInfo<'a> {
    name: &'a str,
    kind: &'a str,
    params: usize,
    run: String,
    aer: Option<f64>,
}

#[derive(Serialize)]
struct Answer {
    results: Vec<ModelResult>,
}

/// Binds `opts.host:opts.port` (before the models load, so that a taken port fails at once).
pub fn bind(opts: &Options) -> Result<std::net::TcpListener, StudioError> {
    let addr = format!("{}:{}", opts.host, opts.port);
    let listener = std::net::TcpListener::bind(&addr).map_err(|e| {
        StudioError::Serve(format!(
            "cannot listen on {addr}: {e} (choose another --port, or --port 0 for any free one)"
        ))
    })?;
    listener.set_nonblocking(true).map_err(|e| StudioError::Serve(format!("{addr}: {e}")))?;
    Ok(listener)
}

/// Serves `studio` on `listener` ([`bind`]) until Ctrl-C (SIGINT) or SIGTERM, then stops
/// accepting, lets requests in flight finish, and returns. `ready` is called with the bound
/// address before the first request is accepted.
pub fn serve(
    studio: Studio,
    listener: std::net::TcpListener,
    opts: &Options,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), StudioError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(opts.workers.max(1) + 2)
        .enable_all()
        .build()
        .map_err(|e| StudioError::Serve(format!("starting the server's runtime: {e}")))?;
    runtime.block_on(async {
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|e| StudioError::Serve(e.to_string()))?;
        let bound = listener.local_addr().map_err(|e| StudioError::Serve(e.to_string()))?;
        ready(bound);
        axum::serve(listener, router(studio, opts))
            .with_graceful_shutdown(stop_signal())
            .await
            .map_err(|e| StudioError::Serve(format!("serving on {bound}: {e}")))
    })
}

/// The routes over `studio`.
pub fn router(studio: Studio, opts: &Options) -> Router {
    let info = Info {
        models: studio
            .models
            .iter()
            .map(|m| ModelInfo {
                name: &m.name,
                kind: m.kind,
                params: m.params,
                run: m.run.display().to_string(),
                aer: m.aer,
            })
            .collect(),
        examples: &studio.examples,
        gold: !studio.gold.is_empty(),
        device: &studio.device_name,
        max_chars: opts.limits.max_chars,
        max_src_tokens: opts.limits.max_src_tokens,
        max_beam: opts.limits.max_beam,
    };
    let info = serde_json::to_vec(&info).expect("the info serialises");
    let workers = opts.workers.max(1);
    let app = Arc::new(App {
        studio,
        limits: opts.limits,
        info,
        workers: Arc::new(Semaphore::new(workers)),
        admitted: Arc::new(Semaphore::new(workers + opts.queue)),
    });
    Router::new()
        .route("/", get(page))
        .route("/api/info", get(info_json))
        .route("/api/translate", post(translate))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(app)
}

async fn page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response()
}

async fn info_json(State(app): State<Arc<App>>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], app.info.clone()).into_response()
}

async fn not_found(uri: Uri) -> Response {
    error(StatusCode::NOT_FOUND, format!("no such page: {uri} (the studio serves / and /api/…)"))
}

fn error(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::json!({ "error": message }).to_string(),
    )
        .into_response()
}

fn request_error(e: RequestError) -> Response {
    error(StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST), e.message)
}

async fn translate(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let text = match std::str::from_utf8(&body) {
        Ok(t) => t,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the request is not valid UTF-8 (byte {}): send the text as UTF-8", e.valid_up_to()),
            );
        }
    };
    let req: Request = match serde_json::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "the request is not a translation request ({e}): send JSON like {{\"text\": \"…\", \"beam\": 5}}"
                ),
            );
        }
    };
    let which = match req.check(&app.studio, &app.limits) {
        Ok(w) => w,
        Err(e) => return request_error(e),
    };
    let Ok(admitted) = app.admitted.clone().try_acquire_owned() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the studio is busy (every worker decoding and the queue full): try again in a moment".into(),
        );
    };
    let Ok(worker) = app.workers.clone().acquire_owned().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the studio is stopping".into());
    };
    let job = app.clone();
    let done = tokio::task::spawn_blocking(move || {
        let _held = (admitted, worker);
        which
            .into_iter()
            .map(|i| run_model(&job.studio, &job.studio.models[i], &req, &job.limits))
            .collect::<Result<Vec<_>, _>>()
    })
    .await;
    match done {
        Ok(Ok(results)) => axum::Json(Answer { results }).into_response(),
        Ok(Err(e)) => request_error(e),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "decoding failed ({e}); the studio keeps serving — this is a bug, please report it with the sentence"
            ),
        ),
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn stop_signal() {
    let int = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(t) => t,
            Err(_) => {
                let _ = int.await;
                return;
            }
        };
        tokio::select! {
            _ = int => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = int.await;
    eprintln!("stopping: finishing the requests in flight");
}
