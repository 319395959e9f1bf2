//! The host's CPU time, thread by thread: what a GPU step costs the machine that drives it.
//!
//! A GPU step launched through burn + wgpu costs host time in two places: the thread that
//! builds the step (tensor operations, autodiff, kernel arguments) and cubecl's device-service
//! threads (`DS…`), which resolve, encode and submit each launch. On lavapipe (Mesa's software
//! Vulkan) the dispatches themselves also run on the host, so wall time there measures
//! lavapipe; the CPU time of our own threads measures us, the same on a GPU. [`Snapshot`]
//! reads every thread's CPU time from Linux's `/proc/self/task/*/schedstat`
//! (nanoseconds; `stat`'s clock ticks where that is missing) and [`Snapshot::since`] splits the
//! difference into the calling thread, the device-service threads and the rest.
//!
//! Off Linux every figure is zero: [`HostTime::measured`] says so.
//!
//! On lavapipe each dispatch runs inline on the device-service thread that submits it, so that
//! thread's time includes lavapipe's work: `scripts/capture-host-time.sh --perf` samples it
//! with perf and takes lavapipe's share out. On a GPU the plain figure is ours.

use std::collections::BTreeMap;

/// One thread's name and CPU time so far.
#[derive(Debug, Clone)]
struct ThreadCpu {
    name: String,
    ns: u64,
}

/// The CPU time of every thread of this process at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    caller: Option<u64>,
    threads: BTreeMap<u64, ThreadCpu>,
}

/// CPU time between two [`Snapshot`]s, split by whose thread spent it.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct HostTime {
    /// The thread that took both snapshots (the one that records and submits the work).
    pub caller_s: f64,
    /// cubecl's device-service threads (`DS…`): resolving, encoding and submitting launches.
    pub device_service_s: f64,
    /// Every other thread: rayon's pool, the Vulkan driver's (lavapipe's execution), …
    pub other_s: f64,
    /// Whether the figures were read (Linux); all zero otherwise.
    pub measured: bool,
}

impl HostTime {
    /// The host time of launching: the calling thread and cubecl's device-service threads.
    pub fn launch_s(&self) -> f64 {
        self.caller_s + self.device_service_s
    }
}

/// The name cubecl gives its device-service threads: `DS` + stage + device (`DSU-2-0`).
pub fn is_device_service(name: &str) -> bool {
    name.starts_with("DS") && name.contains('-')
}

fn read_u64s(path: &std::path::Path) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.split_whitespace().filter_map(|w| w.parse().ok()).collect())
}

/// CPU nanoseconds of `/proc/self/task/<tid>`: `schedstat`'s first field, else `stat`'s
/// user + system clock ticks (at the usual 100 Hz).
fn thread_ns(dir: &std::path::Path) -> Option<u64> {
    if let Some(v) = read_u64s(&dir.join("schedstat")) {
        return v.first().copied();
    }
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000_000)
}

impl Snapshot {
    /// Every thread's CPU time now.
    pub fn now() -> Self {
        let caller =
            std::fs::read_link("/proc/thread-self").ok().and_then(|p| p.file_name()?.to_str()?.parse().ok());
        let mut threads = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
            for entry in dir.flatten() {
                let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) else {
                    continue;
                };
                let path = entry.path();
                let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_string();
                if let Some(ns) = thread_ns(&path) {
                    threads.insert(tid, ThreadCpu { name, ns });
                }
            }
        }
        Self { caller, threads }
    }

    /// The CPU time spent from `earlier` to this snapshot (threads born since count from zero;
    /// threads that ended since are lost, as their time is).
    pub fn since(&self, earlier: &Snapshot) -> HostTime {
        let mut t =
            HostTime { measured: self.caller.is_some() && !self.threads.is_empty(), ..Default::default() };
        for (tid, now) in &self.threads {
            let before = earlier.threads.get(tid).filter(|b| b.ns <= now.ns).map_or(0, |b| b.ns);
            let s = (now.ns - before) as f64 * 1e-9;
            if Some(*tid) == self.caller {
                t.caller_s += s;
            } else if is_device_service(&now.name) {
                t.device_service_s += s;
            } else {
                t.other_s += s;
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's time on a CPU, in ns (the first field of its schedstat).
    fn thread_cpu_ns() -> u64 {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux schedstat");
        s.split_whitespace().next().and_then(|f| f.parse().ok()).expect("a number of ns")
    }

    /// Spinning on the calling thread shows up as the caller's time, and a named spinning
    /// thread as the device service's or the others' by its name; sleeping costs nothing.
    #[test]
    fn time_lands_on_the_thread_that_spent_it() {
        // Spins until the thread has run `ms` on a CPU (not `ms` of wall time: on a busy
        // machine a thread spinning 60 ms of wall time may run for half of it).
        let spin = |ms: u64| {
            let t0 = thread_cpu_ns();
            let mut x = 0u64;
            while thread_cpu_ns() - t0 < ms * 1_000_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        };
        let a = Snapshot::now();
        spin(60);
        // The workers spin, then stay alive (an ended thread's time is lost) until the
        // snapshot is taken.
        let (spun, snapped) = (
            std::sync::Arc::new(std::sync::Barrier::new(3)),
            std::sync::Arc::new(std::sync::Barrier::new(3)),
        );
        let worker = |name: &str| {
            let (spun, snapped) = (spun.clone(), snapped.clone());
            std::thread::Builder::new().name(name.into()).spawn(move || {
                spin(60);
                spun.wait();
                snapped.wait();
            })
        };
        let (ds, other) = (worker("DSU-2-0").unwrap(), worker("lavapipe").unwrap());
        spun.wait();
        let b = Snapshot::now();
        snapped.wait();
        let t = b.since(&a);
        ds.join().unwrap();
        other.join().unwrap();
        assert!(t.measured, "Linux exposes /proc/self/task");
        // The 60 ms spun (schedstat's ns, as the clock reads them), not the sleeps. Other
        // tests of this process run beside this one (cubecl's threads among them), so the
        // device-service and other buckets may hold more than our threads spent; the calling
        // thread is ours alone.
        assert!((0.06..0.2).contains(&t.caller_s), "{t:?}");
        assert!(t.device_service_s >= 0.06, "{t:?}");
        assert!(t.other_s >= 0.06, "{t:?}");
        assert_eq!(t.launch_s(), t.caller_s + t.device_service_s);
        assert!(is_device_service("DSD-2-0") && !is_device_service("DSP") && !is_device_service("rayon-1"));
    }
}
