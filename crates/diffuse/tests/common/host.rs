//! What the tests need of the machine beyond the cluster: root, the process table, a tiny HTTP
//! server whose every answer the test decides, and a size-limited file system.

#![allow(dead_code)] // each test crate uses a different part

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Whether the tests run as root (network namespaces, mounts, other users need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Say that a test is skipped, and why (it cannot run here), so a skip is never silent.
pub fn skip(why: &str) {
    eprintln!("SKIPPED: {why}");
}

/// The pids of every process whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    processes_where(|cmdline| cmdline.contains(marker))
}

/// The pids of every process whose command line (arguments joined by spaces) starts with
/// `prefix`.
pub fn processes_starting(prefix: &str) -> Vec<u32> {
    processes_where(|cmdline| cmdline.starts_with(prefix))
}

fn processes_where(matches: impl Fn(&str) -> bool) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if matches(&text) {
            pids.push(pid);
        }
    }
    pids
}

/// One HTTP request as the test server saw it.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A test HTTP/1.1 server on 127.0.0.1: `answer` gives (status, body) for each request; every
/// answer carries an ETag and a Content-Length, and a HEAD gets the headers only. It counts the
/// connections it accepted.
pub struct HttpServer {
    pub port: u16,
    pub connections: Arc<AtomicUsize>,
}

impl HttpServer {
    pub fn start(answer: impl Fn(&Request) -> (u16, Vec<u8>) + Send + Sync + 'static) -> Self {
        Self::start_on("127.0.0.1:0", answer)
    }

    pub fn start_on(
        addr: &str,
        answer: impl Fn(&Request) -> (u16, Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind(addr).expect("bind the test HTTP server");
        let port = listener.local_addr().expect("addr").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        let answer = Arc::new(answer);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let answer = answer.clone();
                std::thread::spawn(move || serve(stream, &*answer));
            }
        });
        HttpServer { port, connections }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

fn serve(stream: TcpStream, answer: &dyn Fn(&Request) -> (u16, Vec<u8>)) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
            return;
        };
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let req = Request {
            method: method.to_string(),
            target: target.to_string(),
            headers,
        };
        let (code, body) = answer(&req);
        let head = format!(
            "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nETag: \"e{}\"\r\nConnection: keep-alive\r\n\r\n",
            body.len(),
            body.len()
        );
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
        if req.method != "HEAD" && out.write_all(&body).is_err() {
            return;
        }
    }
}

/// A TCP listener that accepts connections and never answers; counts them.
pub fn silent_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            c.fetch_add(1, Ordering::SeqCst);
            held.push(s);
        }
    });
    (port, count)
}

/// A tmpfs of `mb` MiB mounted at `dir` (created), unmounted when dropped. Needs root.
pub struct SmallDisk {
    pub dir: PathBuf,
}

impl SmallDisk {
    pub fn mount(dir: &Path, mb: u64) -> SmallDisk {
        std::fs::create_dir_all(dir).expect("mount point");
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount tmpfs at {}", dir.display());
        SmallDisk {
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}

/// Read whatever is available on `s` within the socket's read timeout; `None` if the peer closed
/// the connection.
pub fn read_or_closed(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = [0u8; 1024];
    match s.read(&mut buf) {
        Ok(0) => None,
        Ok(n) => Some(buf[..n].to_vec()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
        Err(_) => Some(Vec::new()),
    }
}
