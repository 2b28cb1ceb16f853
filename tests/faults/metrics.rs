//! Prometheus metrics (`GPUSHIM_METRICS`): the collector serves `/metrics` while the program
//! runs, on PORT + LOCAL_RANK or a free port, and names its address in a service-discovery
//! file of the output directory; a real Prometheus server finds it there and scrapes it
//! (tests/programs/hostile.c: `metrics`, which holds its allocations until its stdin ends).
//!
//! Waits are on conditions against `DEADLINE`: the program's "ready" line, the SD file's
//! appearance, a scrape or query showing the expected counter.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::*;

const KIB: u64 = 1024;

/// The hostile `metrics` scenario's device live bytes for LOCAL_RANK `local`: its weights,
/// eight nested sites of 64 KiB × depth, ten 256 KiB steps.
fn live_of(local: u64) -> u64 {
    (local + 1) * MIB + 36 * 64 * KIB + 10 * 256 * KIB
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` from `addr` over HTTP/1.0 with `accept`; the status line, headers and body.
fn http_get(addr: &str, path: &str, accept: &str) -> std::io::Result<(String, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok((head.to_string(), body.to_string()))
}

/// `s` percent-encoded for a URL's query (every byte but letters, digits and `-._~`).
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The value of the sample line of `text` that starts with `series` (name and labels as
/// written), if any.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Polls `f` until it gives a value or `DEADLINE` passes (then fails with `what`).
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The one `*.sd.json` file in `dir` once it is there: its name and content.
fn sd_file(dir: &Path) -> (String, Value) {
    wait_for("the service-discovery file", || {
        let name = names_in(dir).into_iter().find(|n| n.ends_with(".sd.json"))?;
        let v: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(&name)).ok()?).ok()?;
        Some((name, v))
    })
}

/// Scrapes `addr` until `done` holds for the text; returns the text.
fn scrape_until(addr: &str, accept: &str, done: impl Fn(&str) -> bool) -> (String, String) {
    wait_for(&format!("a scrape of {addr} showing the whole run"), || {
        let (head, body) = http_get(addr, "/metrics", accept).ok()?;
        done(&body).then_some((head, body))
    })
}

#[test]
fn the_collector_serves_the_live_set_with_rank_labels_on_port_plus_local_rank() {
    // Five of the ten sites shown, on base + 1 for LOCAL_RANK 1.
    let port = free_port();
    let t = Target::new("hostile", "metrics-ranks")
        .args(&["metrics"])
        .env("GPUSHIM_METRICS", format!("127.0.0.1:{}", port - 1))
        .env("GPUSHIM_METRICS_TOP", "5")
        // Its memory is on the stand-in's device 1 (of 2).
        .env("STANDIN_DEVICES", "2")
        .env("RANK", "5")
        .env("LOCAL_RANK", "1")
        .env("WORLD_SIZE", "8")
        .env("TORCHELASTIC_RUN_ID", "jobm");
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let pid = live.pid;

    // The service-discovery file: this process's address and labels.
    let (name, sd) = sd_file(t.dir.path());
    assert_eq!(name, format!("gpushim-rank00005-{pid}.sd.json"));
    let addr = format!("127.0.0.1:{port}");
    assert_eq!(sd[0]["targets"], serde_json::json!([addr]), "{sd}");
    assert_eq!(sd[0]["labels"]["__meta_gpushim_rank"], "5", "{sd}");
    assert_eq!(sd[0]["labels"]["__meta_gpushim_job_id"], "jobm", "{sd}");

    let l = format!("pid=\"{pid}\",rank=\"5\",local_rank=\"1\",world_size=\"8\",job_id=\"jobm\"");
    let all = format!("gpushim_allocations_total{{{l}}}");
    let suspects = format!("gpushim_suspects{{{l}}}");
    let (head, text) =
        scrape_until(&addr, "*/*", |b| sample(b, &all) == Some(29.0) && sample(b, &suspects).is_some_and(|n| n >= 1.0));
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let want = live_of(1) as f64;
    assert_eq!(sample(&text, &format!("gpushim_live_bytes{{{l},kind=\"device\"}}")), Some(want), "{text}");
    assert_eq!(sample(&text, &format!("gpushim_peak_live_bytes{{{l},kind=\"device\"}}")), Some(want), "{text}");
    assert_eq!(sample(&text, &format!("gpushim_live_bytes{{{l},kind=\"managed\"}}")), Some(0.0), "{text}");
    assert_eq!(sample(&text, &format!("gpushim_process_live_bytes{{{l}}}")), Some(want), "{text}");
    // Ordinal 1: the stand-in driver's GPU a1.
    let gpu = "GPU-a1010203-0405-0607-0809-0a0b0c0d0e0f";
    assert_eq!(sample(&text, &format!("gpushim_gpu_live_bytes{{{l},ordinal=\"1\",gpu=\"{gpu}\"}}")), Some(want));
    assert_eq!(sample(&text, &format!("gpushim_frees_total{{{l}}}")), Some(10.0), "{text}");
    assert_eq!(sample(&text, &format!("gpushim_allocation_failures_total{{{l}}}")), Some(1.0), "{text}");
    assert_eq!(
        sample(&text, &format!("gpushim_allocated_bytes_total{{{l}}}")),
        Some((live_of(1) + 10 * 64 * KIB) as f64),
        "{text}"
    );
    // The top five sites, most first, each named by its first user frame; the other five summed.
    let sites: Vec<(String, f64)> = text
        .lines()
        .filter_map(|s| s.strip_prefix(&format!("gpushim_site_live_bytes{{{l},site=\"")))
        .map(|s| {
            let (labels, v) = s.rsplit_once(' ').unwrap();
            let at = labels.split_once("at=\"").unwrap().1;
            (at.split(" (").next().unwrap().to_string(), v.parse().unwrap())
        })
        .collect();
    let mib = MIB as f64;
    let kib = KIB as f64;
    assert_eq!(
        sites,
        [
            ("metrics_step".to_string(), 2.5 * mib),
            ("metrics_weights".to_string(), 2.0 * mib),
            ("metrics_nest".to_string(), 512.0 * kib),
            ("metrics_nest".to_string(), 448.0 * kib),
            ("metrics_nest".to_string(), 384.0 * kib),
        ],
        "{text}"
    );
    assert_eq!(sample(&text, &format!("gpushim_other_sites_live_bytes{{{l}}}")), Some(960.0 * kib), "{text}");
    assert_eq!(sample(&text, &format!("gpushim_sites_live{{{l}}}")), Some(10.0), "{text}");
    let growth = text
        .lines()
        .find(|s| s.starts_with(&format!("gpushim_top_suspect_growth_bytes_per_second{{{l},site=\"")))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(growth.contains(",at=\"metrics_step ("), "{growth}");
    assert!(sample(growth, growth.rsplit_once(' ').unwrap().0).unwrap() > 0.0, "{growth}");

    // OpenMetrics when asked for.
    let (head, om) = http_get(&addr, "/metrics", "application/openmetrics-text;version=1.0.0").unwrap();
    assert!(head.contains("application/openmetrics-text; version=1.0.0"), "{head}");
    assert!(om.ends_with("# EOF\n") && om.contains("# TYPE gpushim_allocations counter\n"), "{om}");
    assert_eq!(sample(&om, &all), Some(29.0), "{om}");

    // At the end the SD file is gone; the report stays.
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    let files = names_in(t.dir.path());
    assert!(!files.iter().any(|n| n.contains(".sd.json")), "{files:?}");
    assert!(files.contains(&format!("gpushim-rank00005-{pid}.json")), "{files:?}");
    assert!(!d.stderr.contains("gpushim: metrics") && !d.stderr.contains("GPUSHIM_METRICS"), "{d}");
}

#[test]
fn a_port_in_use_gives_way_to_a_free_one_and_bad_settings_leave_tracing_on() {
    // Someone else holds the port: the collector takes a free one, says so, and lists it.
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let t =
        Target::new("hostile", "metrics-taken").args(&["metrics"]).env("GPUSHIM_METRICS", format!("127.0.0.1:{port}"));
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let (_, sd) = sd_file(t.dir.path());
    let addr: SocketAddr = sd[0]["targets"][0].as_str().unwrap().parse().unwrap();
    assert_ne!(addr.port(), port);
    let pid = live.pid;
    let (_, text) = scrape_until(&addr.to_string(), "*/*", |b| {
        sample(b, &format!("gpushim_allocations_total{{pid=\"{pid}\"}}")) == Some(29.0)
    });
    assert_eq!(sample(&text, &format!("gpushim_process_live_bytes{{pid=\"{pid}\"}}")), Some(live_of(0) as f64));
    let d = live.finish();
    let line = format!("gpushim: metrics: port {port} is in use; serving on http://{addr}/metrics");
    assert_eq!(
        d.stderr.lines().filter(|l| l.starts_with("gpushim: metrics")).collect::<Vec<_>>(),
        [line.as_str()],
        "{d}"
    );
    drop(held);

    // Not an address, and an address not of this host: one line each, the report as ever.
    for (value, says) in [
        ("nine-four-six-four", "gpushim: GPUSHIM_METRICS=nine-four-six-four is not HOST:PORT (like 127.0.0.1:9464); tracing goes on without metrics"),
        ("192.0.2.1:9464", "gpushim: GPUSHIM_METRICS=192.0.2.1:9464: cannot listen on 192.0.2.1:9464: "),
    ] {
        let out = Target::new("hostile", "metrics-bad").args(&["rank"]).env("GPUSHIM_METRICS", value).run();
        out.success();
        let lines: Vec<&str> = out.stderr.lines().filter(|l| l.contains("GPUSHIM_METRICS")).collect();
        assert_eq!(lines.len(), 1, "{out}");
        assert!(lines[0].starts_with(says), "{out}");
        assert!(lines[0].ends_with("; tracing goes on without metrics"), "{out}");
        assert_eq!(total(&out.report(), "live_bytes"), MIB + 10 * 256 * KIB, "{out}");
        assert!(!out.files().iter().any(|n| n.contains(".sd.json")), "{out}");
    }
}

/// Kills and reaps a child of the test when dropped (a failed assertion included).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `prometheus` on PATH or where Debian's package puts it.
fn prometheus_binary() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([std::path::PathBuf::from("/usr/bin")])
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file())
}

#[test]
fn a_real_prometheus_finds_every_rank_through_the_sd_files_and_scrapes_them() {
    let Some(prom) = prometheus_binary() else {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(!ci, "prometheus is not installed, and CI is set: .ci/run installs Debian's prometheus package");
        eprintln!("SKIPPED: prometheus is not installed (apt-get install prometheus); CI would fail here");
        return;
    };
    // Two ranks of one job, each on a free port (GPUSHIM_METRICS=…:0), in one directory.
    let dir = TempDir::new("metrics-prometheus");
    let mut ranks = Vec::new();
    for r in 0..2 {
        let t = Target::new("hostile", "metrics-prometheus")
            .args(&["metrics"])
            .env("GPUSHIM_OUTPUT", dir.path().display())
            .env("GPUSHIM_METRICS", "127.0.0.1:0")
            .env("STANDIN_DEVICES", "2")
            .env("RANK", r)
            .env("LOCAL_RANK", r)
            .env("WORLD_SIZE", 2)
            .env("TORCHELASTIC_RUN_ID", "promjob");
        let mut live = Live::start(&t);
        assert_eq!(live.line(), "ready");
        ranks.push(live);
    }
    wait_for("two SD files", || {
        (names_in(dir.path()).iter().filter(|n| n.ends_with(".sd.json")).count() == 2).then_some(())
    });

    // Prometheus of its own, on 127.0.0.1 only, scraping every second what the SD files name.
    let work = TempDir::new("metrics-prometheus-server");
    let config = work.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: gpushim\n    \
             file_sd_configs:\n      - files: ['{}/gpushim-*.sd.json']\n        refresh_interval: 1s\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let web = format!("127.0.0.1:{}", free_port());
    let server = Command::new(&prom)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--web.listen-address={web}"))
        .arg(format!("--storage.tsdb.path={}", work.path().join("data").display()))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", prom.display()));
    let _server = Reaped(server);

    // Both ranks' series, read back through the query API.
    let query = "/api/v1/query?query=gpushim_process_live_bytes";
    let result = wait_for("Prometheus to hold both ranks' gpushim_process_live_bytes", || {
        let (_, body) = http_get(&web, query, "application/json").ok()?;
        let v: Value = serde_json::from_str(&body).ok()?;
        let r = v["data"]["result"].as_array()?.clone();
        (r.len() == 2).then_some(r)
    });
    let mut got: Vec<(String, String, u64)> = result
        .iter()
        .map(|s| {
            let m = &s["metric"];
            let value: f64 = s["value"][1].as_str().unwrap().parse().unwrap();
            (m["rank"].as_str().unwrap().to_string(), m["job_id"].as_str().unwrap().to_string(), value as u64)
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [("0".to_string(), "promjob".to_string(), live_of(0)), ("1".to_string(), "promjob".to_string(), live_of(1))]
    );
    for s in &result {
        assert_eq!(s["metric"]["job"], "gpushim", "{s}");
    }
    // Every query of the example dashboard runs (its variables at "All"); the first panel's
    // gives each rank's bytes on its own GPU.
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/grafana/gpushim.json")).unwrap(),
    )
    .unwrap();
    for (n, panel) in dash["panels"].as_array().unwrap().iter().enumerate() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap().replace("$job_id", ".*").replace("$rank", ".*");
            let (_, body) = http_get(&web, &format!("/api/v1/query?query={}", percent(&expr)), "*/*").unwrap();
            let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{expr}: {e}: {body}"));
            assert_eq!(v["status"], "success", "{expr}: {v}");
            if n == 0 {
                let mut got: Vec<(String, String, u64)> = v["data"]["result"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| {
                        let value: f64 = s["value"][1].as_str().unwrap().parse().unwrap();
                        let m = &s["metric"];
                        (m["rank"].as_str().unwrap().into(), m["ordinal"].as_str().unwrap().into(), value as u64)
                    })
                    .collect();
                got.sort();
                assert_eq!(got, [("0".into(), "0".into(), live_of(0)), ("1".into(), "1".into(), live_of(1))], "{v}");
            }
        }
    }
    for live in ranks {
        let d = live.finish();
        assert!(d.status.success(), "{d}");
    }
    assert!(!names_in(dir.path()).iter().any(|n| n.ends_with(".sd.json")));
}

#[test]
fn the_example_alert_rules_are_valid_for_promtool() {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/prometheus/gpushim-alerts.yml");
    let Ok(out) = Command::new("promtool").arg("check").arg("rules").arg(&rules).output() else {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(!ci, "promtool is not installed, and CI is set: .ci/run installs Debian's prometheus package");
        eprintln!("SKIPPED: promtool is not installed (apt-get install prometheus)");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SUCCESS: 2 rules found"), "{text}");
}

#[test]
fn a_client_that_never_reads_its_answers_holds_up_neither_other_scrapes_nor_the_collectors_end() {
    // One connection sends scrape after scrape and reads none of the answers, until the
    // socket's buffers are full: the server's write to it blocks.
    let t = Target::new("hostile", "metrics-stuck")
        .args(&["metrics"])
        .env("GPUSHIM_METRICS", "127.0.0.1:0")
        .env("GPUSHIM_METRICS_TOP", "1000");
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let (_, sd) = sd_file(t.dir.path());
    let addr = sd[0]["targets"][0].as_str().unwrap().to_string();
    let pid = live.pid;
    let all = format!("gpushim_allocations_total{{pid=\"{pid}\"}}");
    scrape_until(&addr, "*/*", |b| sample(b, &all) == Some(29.0));
    let stuck = TcpStream::connect(&addr).unwrap();
    stuck.set_nonblocking(true).unwrap();
    let req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut sent = 0;
    let mut w = &stuck;
    // Until a write would block: the collector no longer reads this connection's requests.
    loop {
        match w.write(req) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(sent > 0);

    // Another scraper is still answered.
    let (head, text) = http_get(&addr, "/metrics", "*/*").unwrap();
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(sample(&text, &all), Some(29.0), "{text}");

    // The program's end: the collector writes its report and ends, the stuck client still
    // connected.
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    let files = names_in(t.dir.path());
    assert!(files.contains(&format!("gpushim-{pid}.json")), "{files:?}");
    assert!(!files.iter().any(|n| n.contains(".sd.json")), "{files:?}");
    drop(stuck);
}
