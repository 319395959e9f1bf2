//! The HTTP side: one page and a JSON API, served by axum on a tokio runtime.
//!
//! - `GET /` — the page (embedded in the binary: no network needed);
//! - `GET /api/info` — the models, the test sentences to pick, the limits;
//! - `POST /api/translate` — a [`Request`] → every asked model's [`ModelResult`].
//!
//! Decoding runs on a bounded pool: at most `workers` requests decode at once (each on a
//! blocking thread), at most `queue` more wait for a worker, and a request beyond that is
//! answered 503 at once. Bad requests get a 4xx and a JSON `{"error": …}` the page shows.
//!
//! What one client can take is bounded too (docs/decisions.md, "Studio"):
//! - every request must name this machine in its `Host` header (`localhost`, an IP address
//!   the server answers on, or a name given with `--allow-host`; 403 otherwise), and a POST
//!   must be `Content-Type: application/json` (415 otherwise): a web page in the user's
//!   browser can neither post a plain-text form to the studio nor reach it through DNS
//!   rebinding;
//! - every limit of a request is checked before it decodes ([`Request::prepare`]);
//! - a request has [`Options::request_timeout`] from its first byte of body to its answer: its
//!   body must arrive within it (408), and its decoding stops when it runs out (504) or when
//!   the client closes the connection, at the next model, at the next step of a model's beam
//!   search, or between the search and its forced passes ([`run_request`]);
//! - a connection has [`Options::read_timeout`] to send a request's headers, idle between
//!   requests included, and at most [`Options::max_connections`] are served at once: a
//!   connection past that closes the one that has waited longest for a request (or for its
//!   request's body), so that idle or half-sent connections cannot keep a client out; only
//!   when every connection is answering a request does a new one wait;
//! - a request must carry exactly one `Host` header (400 otherwise, RFC 9112 §3.2).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request as HttpRequest, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::Serialize;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::{Instant, timeout_at};

use crate::StudioError;
use crate::analyse::{Encoded, Limits, ModelResult, Request, RequestError, Stopped, run_request};
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
    /// Longest a translation request may take, from reading its body to its answer (waiting
    /// for a worker included).
    pub request_timeout: Duration,
    /// Longest a connection may take to send a request's headers, or stay idle between
    /// requests.
    pub read_timeout: Duration,
    /// Connections served at once; past it, a new connection closes the one idle longest (one
    /// answering a request is kept: then the new one waits).
    pub max_connections: usize,
    /// Host names the studio answers to besides `localhost` and IP addresses (the name of
    /// this machine on a network, when bound to one).
    pub allowed_hosts: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 0,
            workers: 2,
            queue: 32,
            limits: Limits::default(),
            request_timeout: Duration::from_secs(60),
            read_timeout: Duration::from_secs(30),
            max_connections: 64,
            allowed_hosts: Vec::new(),
        }
    }
}

/// What the server did since it started (printed when it stops; read by the tests).
#[derive(Debug, Default)]
pub struct Stats {
    /// Translation requests handed to a worker (their limits checked).
    pub started: AtomicU64,
    /// Translation requests answered with results.
    pub answered: AtomicU64,
    /// Translation requests whose client closed the connection before the answer.
    pub abandoned: AtomicU64,
    /// Translation requests answered 504 at their deadline.
    pub timed_out: AtomicU64,
    /// Decoding jobs stopped before their last model (client gone, or the deadline).
    pub stopped: AtomicU64,
    /// Models run, over every request.
    pub models_run: AtomicU64,
}

impl Stats {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{} translations answered, {} abandoned by their client, {} past --request-timeout",
            n(&self.answered),
            n(&self.abandoned),
            n(&self.timed_out)
        )
    }
}

struct App {
    studio: Studio,
    limits: Limits,
    request_timeout: Duration,
    hosts: Hosts,
    info: Vec<u8>,
    /// One permit per worker.
    workers: Arc<Semaphore>,
    /// One permit per request decoding or waiting (`workers + queue`).
    admitted: Arc<Semaphore>,
    stats: Arc<Stats>,
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
    let stats = Arc::new(Stats::default());
    runtime.block_on(async {
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|e| StudioError::Serve(e.to_string()))?;
        let bound = listener.local_addr().map_err(|e| StudioError::Serve(e.to_string()))?;
        ready(bound);
        let app = router(studio, opts, stats.clone());
        serve_on(listener, app, opts, stop_signal()).await
    })?;
    eprintln!("{}", stats.summary());
    Ok(())
}

/// Serves `app` on `listener` until `stop` resolves, then stops accepting, lets requests in
/// flight finish (idle connections close), and returns. At most `opts.max_connections`
/// connections are served at once: a connection past that closes the one idle longest (waiting
/// for a request's headers or body; [`Connections`]), and waits only while every one is
/// answering a request. Each has `opts.read_timeout` to send a request's headers.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    app: Router,
    opts: &Options,
    stop: impl Future<Output = ()>,
) -> Result<(), StudioError> {
    let cap = opts.max_connections.clamp(1, 1 << 20);
    let connections = Arc::new(Connections::default());
    let (stopping, stopped) = watch::channel(false);
    let mut stop = pin!(stop);
    'accept: loop {
        let stream = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut stop => break,
        };
        let stream = match stream {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, a connection reset before it was accepted: go on
                // after a pause rather than spin or stop serving.
                eprintln!("warning: accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Room for it: below the cap, or by closing the connection idle longest; while every
        // connection is answering a request, once one ends or turns idle.
        loop {
            let changed = connections.changed.notified();
            let mut changed = pin!(changed);
            changed.as_mut().enable();
            if connections.make_room(cap) {
                break;
            }
            tokio::select! {
                _ = changed => {}
                _ = &mut stop => break 'accept,
            }
        }
        let (conn, close) = connections.open();
        let service = service(app.clone(), Some(conn.clone()));
        let mut stopped = stopped.clone();
        let read_timeout = opts.read_timeout;
        tokio::spawn(async move {
            let _conn = conn;
            let http = http1(read_timeout);
            let mut served = pin!(http.serve_connection(TokioIo::new(stream), service));
            let room = tokio::select! {
                // A connection's errors (a client gone, a timeout) end that connection only.
                _ = served.as_mut() => return,
                _ = close.notify.notified() => true,
                _ = stopped.wait_for(|&s| s) => false,
            };
            served.as_mut().graceful_shutdown();
            if room {
                // Closed to make room: at once when it has not sent a whole request yet, else
                // once the answer it may be writing is out, within CLOSE_GRACE.
                if close.answered.load(Ordering::Relaxed) {
                    let _ = tokio::time::timeout(CLOSE_GRACE, served).await;
                }
                return;
            }
            let _ = served.await;
        });
    }
    let _ = stopping.send(true);
    // Every connection finished.
    loop {
        let changed = connections.changed.notified();
        let mut changed = pin!(changed);
        changed.as_mut().enable();
        if connections.is_empty() {
            break;
        }
        changed.await;
    }
    Ok(())
}

/// How long a connection closed to make room has to finish what it is doing (writing an answer
/// made just before; a body still arriving is cut off).
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// hyper's HTTP/1 settings for one connection: `read_timeout` for each request's headers.
fn http1(read_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(read_timeout);
    http
}

/// The hyper service of one connection: `app`, each request carrying `conn` (when served on a
/// socket) for [`translate`] to mark it busy once its body has arrived; idle again once the
/// response is ready.
fn service(
    app: Router,
    conn: Option<Conn>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<Response, std::convert::Infallible>> + Send,
> + Clone
+ Send {
    let app = TowerToHyperService::new(app);
    hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        if let Some(c) = &conn {
            c.0.close.answered.store(true, Ordering::Relaxed);
            req.extensions_mut().insert(c.clone());
        }
        let answer = hyper::service::Service::call(&app, req);
        let conn = conn.clone();
        async move {
            let res = answer.await;
            if let Some(c) = conn {
                c.idle();
            }
            res
        }
    })
}

/// Answers `raw` — the bytes a client sends on one connection before it stops sending and
/// waits for the answers — as the server does on a socket (hyper's HTTP/1 with the server's
/// settings, then `app`), and returns the bytes written back: a pure function over bytes, for
/// fuzzing the way from a request's bytes through hyper's parser to the studio's own checks
/// (`s2s-fuzz`'s `studio` target). No socket, no clock but the requests' own deadlines.
pub fn answer_bytes(app: &Router, raw: &[u8]) -> Vec<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime starts");
    let written = Arc::new(std::sync::Mutex::new(Vec::new()));
    let io = Memory { input: raw.to_vec(), read: 0, written: written.clone() };
    let mut http = http1(Options::default().read_timeout);
    // The client has stopped sending, not left: answer what it sent, then close.
    http.half_close(true);
    let served = http.serve_connection(io, service(app.clone(), None));
    let _ = runtime.block_on(served);
    std::mem::take(&mut *written.lock().unwrap_or_else(|p| p.into_inner()))
}

/// A connection in memory: reads `input`, then end of stream; keeps what is written.
struct Memory {
    input: Vec<u8>,
    read: usize,
    written: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl hyper::rt::Read for Memory {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = buf.remaining().min(self.input.len() - self.read);
        let from = self.read;
        buf.put_slice(&self.input[from..from + n]);
        self.read += n;
        std::task::Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for Memory {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.written.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// The connections being served, each idle (waiting for a request's headers or body) since
/// some instant or busy answering one: what [`serve_on`] closes to make room for a new one.
#[derive(Default)]
struct Connections {
    open: std::sync::Mutex<Registry>,
    /// Woken when a connection closes or turns idle: room may be made now.
    changed: Notify,
}

#[derive(Default)]
struct Registry {
    next: u64,
    open: std::collections::HashMap<u64, Slot>,
}

struct Slot {
    /// Since when the connection has waited for a request (or its body); `None` while it
    /// answers one.
    idle_since: Option<Instant>,
    /// Told to close, to make room.
    close: Arc<Close>,
    /// Told already (it is closing, and no longer counts against the cap).
    closing: bool,
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new connection, idle from now: its handle and what tells it to close.
    fn open(self: &Arc<Self>) -> (Conn, Arc<Close>) {
        let close = Arc::new(Close::default());
        let mut r = self.lock();
        let id = r.next;
        r.next += 1;
        r.open.insert(id, Slot { idle_since: Some(Instant::now()), close: close.clone(), closing: false });
        let conn = Conn(Arc::new(ConnInner { id, close: close.clone(), connections: self.clone() }));
        (conn, close)
    }

    /// True when fewer than `cap` connections are open (those closing not counted), after
    /// telling the one idle longest to close if need be; false when every one is busy: wait for
    /// [`Self::changed`].
    fn make_room(&self, cap: usize) -> bool {
        let mut r = self.lock();
        let live = r.open.values().filter(|s| !s.closing).count();
        if live < cap {
            return true;
        }
        let oldest =
            r.open.values_mut().filter(|s| !s.closing && s.idle_since.is_some()).min_by_key(|s| s.idle_since);
        match oldest {
            Some(s) => {
                s.closing = true;
                s.close.notify.notify_one();
                live - 1 < cap
            }
            None => false,
        }
    }

    fn is_empty(&self) -> bool {
        self.lock().open.is_empty()
    }

    fn set_idle(&self, id: u64, idle: bool) {
        if let Some(s) = self.lock().open.get_mut(&id) {
            s.idle_since = idle.then(Instant::now);
        }
        if idle {
            self.changed.notify_waiters();
        }
    }
}

/// One served connection's entry in [`Connections`], removed when the last clone is dropped
/// (the connection ended). Requests carry a clone, for [`translate`].
#[derive(Clone)]
struct Conn(Arc<ConnInner>);

struct ConnInner {
    id: u64,
    close: Arc<Close>,
    connections: Arc<Connections>,
}

/// What tells a connection to close to make room, and whether it has had a request whose
/// answer it may still be writing.
#[derive(Default)]
struct Close {
    notify: Notify,
    /// A whole request head has arrived on it (hyper called the service).
    answered: AtomicBool,
}

impl Conn {
    /// Answering a request: not to be closed for room.
    fn busy(&self) {
        self.0.connections.set_idle(self.0.id, false);
    }

    /// Waiting for the next request.
    fn idle(&self) {
        self.0.connections.set_idle(self.0.id, true);
    }
}

impl Drop for ConnInner {
    fn drop(&mut self) {
        self.connections.lock().open.remove(&self.id);
        self.connections.changed.notify_waiters();
    }
}

/// The routes over `studio`; `stats` counts what they do.
pub fn router(studio: Studio, opts: &Options, stats: Arc<Stats>) -> Router {
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
        request_timeout: opts.request_timeout,
        hosts: Hosts::new(&opts.host, &opts.allowed_hosts),
        info,
        workers: Arc::new(Semaphore::new(workers)),
        admitted: Arc::new(Semaphore::new(workers + opts.queue)),
        stats,
    });
    Router::new()
        .route("/", get(page))
        .route("/api/info", get(info_json))
        .route("/api/translate", post(translate))
        .fallback(not_found)
        .layer(from_fn_with_state(app.clone(), guard))
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

/// The host names and addresses the studio answers to.
struct Hosts {
    /// The address bound, when it is one (an unspecified one, 0.0.0.0 or ::, accepts every
    /// IP address).
    bound: Option<IpAddr>,
    /// `localhost`, the bound name when it is a name, and `--allow-host` names; lower case.
    names: Vec<String>,
}

impl Hosts {
    fn new(bound: &str, allowed: &[String]) -> Self {
        let bound_ip = bound.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok();
        let mut names = vec!["localhost".to_string()];
        let bound_name = bound_ip.is_none().then_some(bound);
        for n in bound_name.into_iter().chain(allowed.iter().map(String::as_str)) {
            let n = n.trim_end_matches('.').to_ascii_lowercase();
            if !n.is_empty() && !names.contains(&n) {
                names.push(n);
            }
        }
        Self { bound: bound_ip, names }
    }

    /// Whether a request with this `Host` header (a name or an address, with or without a
    /// port) may be answered. Any port is fine (an SSH tunnel changes it); a name must be
    /// known, because a page that rebinds its own name to this machine's address sends that
    /// name; an address is fine when it is a loopback one, the one bound, or any with an
    /// unspecified bind (a rebinding page cannot send an address: it has no origin of its own
    /// under one).
    fn allow(&self, host: &str) -> bool {
        let name = match host.strip_prefix('[') {
            // [v6] or [v6]:port
            Some(rest) => match rest.split_once(']') {
                Some((ip, port)) if port.is_empty() || port.strip_prefix(':').is_some_and(is_port) => ip,
                _ => return false,
            },
            None => match host.rsplit_once(':') {
                Some((name, port)) if is_port(port) => name,
                Some(_) => return false,
                None => host,
            },
        };
        if let Ok(ip) = name.parse::<IpAddr>() {
            return ip.is_loopback()
                || self.bound.is_some_and(|b| b.is_unspecified() || b == ip)
                || self.names.iter().any(|n| n.parse::<IpAddr>() == Ok(ip));
        }
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        !name.is_empty() && self.names.contains(&name)
    }

    /// What the 403 says the studio answers to.
    fn described(&self) -> String {
        let mut what = self.names.clone();
        what.push("127.0.0.1".into());
        match self.bound {
            Some(ip) if ip.is_unspecified() => what.push("any IP address".into()),
            Some(ip) if !ip.is_loopback() => what.push(ip.to_string()),
            _ => {}
        }
        what.join(", ")
    }
}

fn is_port(s: &str) -> bool {
    s.parse::<u16>().is_ok()
}

/// Refuses, before any route runs, a request with two or more `Host` headers (400: RFC 9112
/// §3.2 — which one a proxy in front would have checked is anyone's guess), one whose `Host`
/// the studio does not answer to (403) and a POST whose body is not declared JSON (415).
async fn guard(State(app): State<Arc<App>>, req: HttpRequest, next: Next) -> Response {
    let hosts = req.headers().get_all(header::HOST).iter().count();
    if hosts > 1 {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "the request has {hosts} Host headers; HTTP/1.1 allows exactly one (RFC 9112 §3.2): \
                 send the request once, with one Host"
            ),
        );
    }
    // The name the request is for: the target's authority when the target is in absolute form
    // (`GET http://name/ HTTP/1.1`: RFC 9112 §3.2.2 says to ignore Host then), else Host.
    let host = match (req.uri().authority(), req.headers().get(header::HOST)) {
        (Some(a), _) => Ok(a.as_str()),
        (None, Some(h)) => h.to_str().map_err(|_| "(not visible ASCII)"),
        (None, None) => Err("(none)"),
    };
    match host {
        Ok(h) if app.hosts.allow(h) => {}
        _ => {
            return error(
                StatusCode::FORBIDDEN,
                format!(
                    "the studio answers requests for {} only, not for host `{}` (so that no web \
                     page can reach it by rebinding its own name to this machine); to open it \
                     under that name, start it with --allow-host NAME",
                    app.hosts.described(),
                    host.unwrap_or_else(|what| what)
                ),
            );
        }
    }
    if req.method() == Method::POST && !is_json(req.headers()) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the request as JSON with `Content-Type: application/json` (a form or text/plain \
             post, which any web page could make, is refused)"
                .into(),
        );
    }
    next.run(req).await
}

/// Whether the `Content-Type` is `application/json` (any parameters, any case).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The stop flag of one request's decoding, shared with its blocking job: set when the
/// request's future is dropped (its client closed the connection) unless it finished.
struct Cancel {
    flag: Arc<AtomicBool>,
    finished: bool,
    stats: Arc<Stats>,
}

impl Cancel {
    fn new(stats: Arc<Stats>) -> Self {
        Self { flag: Arc::new(AtomicBool::new(false)), finished: false, stats }
    }

    /// What the job asks before each step: [`Stopped::Gone`] once the flag is set,
    /// [`Stopped::Deadline`] past `deadline`.
    fn stop(&self, deadline: std::time::Instant) -> impl Fn() -> Option<Stopped> + Send + use<> {
        let flag = self.flag.clone();
        move || {
            if flag.load(Ordering::Relaxed) {
                Some(Stopped::Gone)
            } else if std::time::Instant::now() >= deadline {
                Some(Stopped::Deadline)
            } else {
                None
            }
        }
    }

    /// The request was answered (or answered 504): dropping it now is no client gone.
    fn finish(mut self) {
        self.finished = true;
        self.flag.store(true, Ordering::Relaxed);
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if !self.finished {
            self.flag.store(true, Ordering::Relaxed);
            Stats::add(&self.stats.abandoned);
        }
    }
}

async fn translate(State(app): State<Arc<App>>, req: HttpRequest) -> Response {
    let deadline = Instant::now() + app.request_timeout;
    let secs = app.request_timeout.as_secs_f64();
    let (head, body) = req.into_parts();
    // A body declared too large is refused before any of it is read.
    if axum::body::HttpBody::size_hint(&body).lower() > MAX_BODY as u64 {
        return body_error_too_large();
    }
    let body = match timeout_at(deadline, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return body_error(e),
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request's body did not arrive within {secs} s (--request-timeout)"),
            );
        }
    };
    // The body is in: from here until its answer the connection is busy, not to be closed to
    // make room for another (a client still sending its body may be).
    if let Some(conn) = head.extensions.get::<Conn>() {
        conn.busy();
    }
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
    // Every limit, the token limits included, before a worker is taken.
    let encoded: Vec<Encoded> = match req.prepare(&app.studio, &app.limits) {
        Ok(e) => e,
        Err(e) => return request_error(e),
    };
    let Ok(admitted) = app.admitted.clone().try_acquire_owned() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the studio is busy (every worker decoding and the queue full): try again in a moment".into(),
        );
    };
    let worker = match timeout_at(deadline, app.workers.clone().acquire_owned()).await {
        Ok(Ok(w)) => w,
        Ok(Err(_)) => return error(StatusCode::SERVICE_UNAVAILABLE, "the studio is stopping".into()),
        Err(_) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the studio is busy: no worker was free within {secs} s (--request-timeout); try again in a moment"
                ),
            );
        }
    };
    // From here, the request's future owns `cancel`: dropped with it (the client gone), it
    // tells the job to stop.
    let cancel = Cancel::new(app.stats.clone());
    let stop = cancel.stop(deadline.into_std());
    let job = app.clone();
    let work = tokio::task::spawn_blocking(move || {
        let held = (admitted, worker);
        let stats = &job.stats;
        let done = run_request(&job.studio, &encoded, &req, stop, |_| Stats::add(&stats.models_run));
        // The worker is free before the counters say the job ended.
        drop(held);
        if done.is_err() {
            Stats::add(&stats.stopped);
        }
        done
    });
    Stats::add(&app.stats.started);
    let done = timeout_at(deadline, work).await;
    cancel.finish();
    match done {
        Ok(Ok(Ok(results))) => {
            Stats::add(&app.stats.answered);
            axum::Json(Answer { results }).into_response()
        }
        Ok(Ok(Err(_))) | Err(_) => {
            Stats::add(&app.stats.timed_out);
            error(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "the translation took longer than {secs} s (--request-timeout) and was stopped: ask \
                     fewer models, a smaller beam or a shorter sentence"
                ),
            )
        }
        Ok(Err(e)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "decoding failed ({e}); the studio keeps serving — this is a bug, please report it with the sentence"
            ),
        ),
    }
}

/// The answer to a body that could not be read: too large (413), or broken off (400).
fn body_error(e: axum::Error) -> Response {
    let too_large = std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
    if too_large {
        body_error_too_large()
    } else {
        error(StatusCode::BAD_REQUEST, format!("the request's body could not be read: {e}"))
    }
}

/// The answer to a body over [`MAX_BODY`] (413).
fn body_error_too_large() -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request is larger than {} KiB: send a shorter text", MAX_BODY / 1024),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_localhost_loopback_the_bound_address_and_allowed_names() {
        let local = Hosts::new("127.0.0.1", &[]);
        for ok in [
            "localhost",
            "LOCALHOST:8340",
            "localhost.",
            "127.0.0.1",
            "127.0.0.1:9000",
            "[::1]:8340",
            "[::1]",
        ] {
            assert!(local.allow(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8340",
            "localhost.evil.example",
            "10.0.0.5:8340",
            "",
            ":8340",
            "[::1",
            "localhost:port",
            "127.0.0.1:99999",
            "[::1]8340",
        ] {
            assert!(!local.allow(bad), "{bad}");
        }
        let named = Hosts::new("127.0.0.1", &["studio.lan".into()]);
        assert!(named.allow("Studio.LAN:8340") && !named.allow("other.lan"));
        let lan = Hosts::new("192.168.1.5", &[]);
        assert!(lan.allow("192.168.1.5:8340") && !lan.allow("192.168.1.6:8340"));
        let all = Hosts::new("0.0.0.0", &[]);
        assert!(all.allow("192.168.1.6:8340") && all.allow("[fe80::1]:8340"));
        assert!(!all.allow("evil.example:8340"), "a name is checked whatever the bind");
        assert!(Hosts::new("localhost", &[]).allow("localhost:1"));
    }

    #[test]
    fn json_content_types() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            is_json(&h)
        };
        assert!(with("application/json") && with("Application/JSON; charset=utf-8"));
        assert!(!with("text/plain") && !with("application/x-www-form-urlencoded"));
        assert!(!with("multipart/form-data; boundary=x") && !with("application/jsonx"));
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn a_dropped_request_sets_its_flag_and_a_finished_one_counts_no_client_gone() {
        let stats = Arc::new(Stats::default());
        let far = std::time::Instant::now() + Duration::from_secs(3600);
        let cancel = Cancel::new(stats.clone());
        let stop = cancel.stop(far);
        assert_eq!(stop(), None);
        drop(cancel);
        assert_eq!(stop(), Some(Stopped::Gone));
        assert_eq!(stats.abandoned.load(Ordering::Relaxed), 1);
        let cancel = Cancel::new(stats.clone());
        let stop = cancel.stop(far);
        cancel.finish();
        assert_eq!(stop(), Some(Stopped::Gone), "a job outliving its answer stops too");
        assert_eq!(stats.abandoned.load(Ordering::Relaxed), 1);
        let past = Cancel::new(stats.clone());
        assert_eq!(past.stop(std::time::Instant::now())(), Some(Stopped::Deadline));
        past.finish();
    }
}
