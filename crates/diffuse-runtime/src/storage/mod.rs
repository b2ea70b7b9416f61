//! Persistent storage: `file://` (a shared POSIX path, [`file`]), `http(s)://` ([`http`]), and
//! `s3://bucket/key` through the `object_store` crate (credentials, region and endpoint from the
//! usual `AWS_*` variables: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`,
//! `AWS_ENDPOINT` or `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`). Every URI is canonical
//! ([`crate::uri`]) and used whole.
//!
//! Every object has a *version*: its size plus its ETag or modification time. A cached copy
//! whose version differs from the source's is stale and is never served. Only workers read
//! storage; the dispatcher never does (docs/security.md).
//!
//! | module | what it decides |
//! |---|---|
//! | [`error`] | [`StorageError`], the one error every backend returns |
//! | [`download`] | an object's version ([`SourceInfo`]), a finished [`Download`], writing a stream to a file hashed ([`write_hashed`]) |
//! | [`file`] | `file://`: which paths may be read for a task ([`file::FileAccess`]), opened how |
//! | [`output`] | writing a task's output to a `file://` destination, through a temporary file |
//! | [`special`] | which file systems are special (`/proc`, `/sys`, `/dev`...) and never read or written |
//! | [`http`] | `http(s)://`: head and get with the whole URL |
//! | [`blob`] | `blob://SHA256`: blobs read from the dispatcher, checked against their names |
//! | [`throttle`] | the cap on a process's storage reads |
//! | this module | [`Storage`]: picks the backend for a URI; S3 through `object_store` |

pub mod blob;
pub mod download;
pub mod error;
pub mod file;
pub mod http;
pub mod output;
pub mod special;
pub mod throttle;

pub use download::{write_hashed, Download, SourceInfo};
pub use error::StorageError;

use crate::uri::Scheme;
use object_store::{path::Path as StorePath, ObjectMeta, ObjectStore};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

fn s3_version(meta: &ObjectMeta) -> String {
    match &meta.e_tag {
        Some(tag) => format!("{}:{}", meta.size, tag.trim_matches('"')),
        None => format!("{}:{}", meta.size, meta.last_modified.timestamp_millis()),
    }
}

/// Reads and writes persistent storage for a worker.
pub struct Storage {
    /// Which `file://` paths may be read.
    files: file::FileAccess,
    http: reqwest::Client,
    /// S3 clients by bucket, created on first use.
    buckets: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
    /// Shared-storage emulation (`crate::storage_emulator`): read `file://` objects through this
    /// dispatcher URL with this token.
    emulator: Option<(String, String)>,
    /// The cap on this process's storage reads (its share of `--storage-bandwidth-cap`).
    throttle: throttle::Throttle,
    /// Where `blob://` objects are read (a worker's dispatcher).
    blobs: Option<blob::BlobSource>,
}

impl Default for Storage {
    fn default() -> Self {
        Storage::new(file::FileAccess::open_to_all())
    }
}

impl Storage {
    /// A storage client reading `file://` paths under the rules of `files`.
    pub fn new(files: file::FileAccess) -> Storage {
        Storage {
            files,
            http: http::client(),
            buckets: Mutex::new(HashMap::new()),
            emulator: None,
            throttle: throttle::Throttle::default(),
            blobs: None,
        }
    }

    /// Read `blob://` objects from `source` (the worker's dispatcher).
    pub fn with_blobs(mut self, source: blob::BlobSource) -> Storage {
        self.blobs = Some(source);
        self
    }

    /// Store `bytes` as a blob at the dispatcher; its URI.
    pub async fn put_blob(&self, bytes: Vec<u8>) -> Result<String, StorageError> {
        self.blob_source("blob://")?.put(bytes).await
    }

    fn blob_source(&self, uri: &str) -> Result<&blob::BlobSource, StorageError> {
        self.blobs
            .as_ref()
            .ok_or_else(|| StorageError::Unsupported(uri.to_string()))
    }

    /// Limit this process's storage reads to `rate` bytes per second (None: no limit).
    pub fn set_read_rate(&self, rate: Option<f64>) {
        self.throttle.set_rate(rate);
    }

    /// The limit on storage reads, if any.
    pub fn read_rate(&self) -> Option<f64> {
        self.throttle.rate()
    }

    /// Read `file://` objects through the dispatcher's storage emulator
    /// (`crate::storage_emulator`, bandwidth-limited) at `url`, with the worker `token`.
    pub fn with_emulator(mut self, url: String, token: String) -> Storage {
        self.emulator = Some((url, token));
        self
    }

    async fn get_via_emulator(
        &self,
        url: &str,
        token: &str,
        uri: &str,
        dest: &Path,
    ) -> Result<Download, StorageError> {
        // The access rules hold for the emulated storage too.
        drop(self.files.open(uri)?);
        let path = uri.strip_prefix("file://").unwrap_or(uri);
        let other = |m: String| StorageError::Other {
            uri: uri.to_string(),
            message: m,
        };
        let resp = self
            .http
            .get(format!("{url}/v1/storage{path}"))
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| other(e.to_string()))?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(StorageError::NotFound(uri.to_string()));
        }
        if !resp.status().is_success() {
            return Err(other(format!("emulated storage: status {}", resp.status())));
        }
        let version = resp
            .headers()
            .get("x-diffuse-version")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let (written, sha256) = write_hashed(
            uri,
            dest,
            throttle::throttled(resp.bytes_stream(), &self.throttle),
        )
        .await?;
        Ok(Download {
            info: SourceInfo {
                size: written,
                version,
            },
            written,
            sha256,
        })
    }

    /// The S3 client and key for an `s3://bucket/key` URI.
    fn bucket(&self, uri: &str) -> Result<(Arc<dyn ObjectStore>, StorePath), StorageError> {
        let other = |e: &dyn std::fmt::Display| StorageError::Other {
            uri: uri.to_string(),
            message: e.to_string(),
        };
        let (bucket, key) = uri
            .strip_prefix("s3://")
            .and_then(|r| r.split_once('/'))
            .ok_or_else(|| StorageError::Unsupported(uri.to_string()))?;
        let key = StorePath::parse(key).map_err(|e| other(&e))?;
        let mut buckets = self.buckets.lock().expect("storage lock");
        if let Some(s) = buckets.get(bucket) {
            return Ok((s.clone(), key));
        }
        let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
            b = b
                .with_allow_http(endpoint.starts_with("http://"))
                .with_endpoint(endpoint);
        }
        let store: Arc<dyn ObjectStore> = Arc::new(b.build().map_err(|e| other(&e))?);
        buckets.insert(bucket.to_string(), store.clone());
        Ok((store, key))
    }

    fn map_err(uri: &str, e: object_store::Error) -> StorageError {
        match e {
            object_store::Error::NotFound { .. } => StorageError::NotFound(uri.to_string()),
            e => StorageError::Other {
                uri: uri.to_string(),
                message: e.to_string(),
            },
        }
    }

    /// Size and version of the object at `uri` (canonical).
    pub async fn head(&self, uri: &str) -> Result<SourceInfo, StorageError> {
        match crate::uri::scheme(uri) {
            Some(Scheme::File) => {
                let files = self.files.clone();
                let uri = uri.to_string();
                tokio::task::spawn_blocking(move || files.head(&uri))
                    .await
                    .map_err(|e| StorageError::Other {
                        uri: String::new(),
                        message: e.to_string(),
                    })?
            }
            Some(Scheme::Http) => http::head(&self.http, uri).await,
            Some(Scheme::Blob) => self.blob_source(uri)?.head(uri).await,
            Some(Scheme::S3) => {
                let (store, key) = self.bucket(uri)?;
                let meta = store.head(&key).await.map_err(|e| Self::map_err(uri, e))?;
                Ok(SourceInfo {
                    size: meta.size,
                    version: s3_version(&meta),
                })
            }
            None => Err(StorageError::Unsupported(uri.to_string())),
        }
    }

    /// Stream the object at `uri` (canonical) into the file `dest` (created or truncated),
    /// hashing it on the way.
    pub async fn get_to_file(&self, uri: &str, dest: &Path) -> Result<Download, StorageError> {
        match crate::uri::scheme(uri) {
            Some(Scheme::File) => {
                if let Some((url, token)) = &self.emulator {
                    return self.get_via_emulator(url, token, uri, dest).await;
                }
                let files = self.files.clone();
                let owned = uri.to_string();
                let file = tokio::task::spawn_blocking(move || files.open(&owned))
                    .await
                    .map_err(|e| StorageError::Other {
                        uri: uri.to_string(),
                        message: e.to_string(),
                    })??;
                let info = file::info_of(&file.metadata().map_err(|e| StorageError::Other {
                    uri: uri.to_string(),
                    message: e.to_string(),
                })?);
                let chunks =
                    read_chunks(tokio::fs::File::from_std(file), self.throttle.chunk_size());
                let (written, sha256) =
                    write_hashed(uri, dest, throttle::throttled(chunks, &self.throttle)).await?;
                Ok(Download {
                    info,
                    written,
                    sha256,
                })
            }
            Some(Scheme::Http) => http::get(&self.http, uri, dest, &self.throttle).await,
            Some(Scheme::Blob) => self.blob_source(uri)?.get(uri, dest, &self.throttle).await,
            Some(Scheme::S3) => {
                let (store, key) = self.bucket(uri)?;
                let result = store.get(&key).await.map_err(|e| Self::map_err(uri, e))?;
                let info = SourceInfo {
                    size: result.meta.size,
                    version: s3_version(&result.meta),
                };
                let (written, sha256) = write_hashed(
                    uri,
                    dest,
                    throttle::throttled(result.into_stream(), &self.throttle),
                )
                .await?;
                Ok(Download {
                    info,
                    written,
                    sha256,
                })
            }
            None => Err(StorageError::Unsupported(uri.to_string())),
        }
    }

    /// Whether a task running as the task user may write `src` to `uri` (see
    /// [`file::FileAccess::check_output`]).
    pub fn check_output(&self, uri: &str, src: &Path) -> Result<(), StorageError> {
        self.files.check_output(uri, src)
    }

    /// Upload the local file `src` to `uri` (task outputs).
    pub async fn put_file(&self, uri: &str, src: &Path) -> Result<(), StorageError> {
        let io = |e: std::io::Error| StorageError::Other {
            uri: uri.to_string(),
            message: e.to_string(),
        };
        match crate::uri::scheme(uri) {
            Some(Scheme::File) => {
                // A shared POSIX path: copied through a temp name and renamed, never from or
                // to a special file system (`file::write_output`).
                let dest =
                    crate::uri::file_path(uri).ok_or(StorageError::Unsupported(uri.to_string()))?;
                let (owned, src) = (uri.to_string(), src.to_path_buf());
                let owner = self.files.task_user();
                tokio::task::spawn_blocking(move || {
                    output::write_output(&owned, &src, &dest, owner)
                })
                .await
                .map_err(|e| io(std::io::Error::other(e)))?
            }
            Some(Scheme::S3) => {
                // The same checked open as for a `file://` output, before anything is sent.
                let (owned, src) = (uri.to_string(), src.to_path_buf());
                let file =
                    tokio::task::spawn_blocking(move || file::open_output_source(&owned, &src))
                        .await
                        .map_err(|e| io(std::io::Error::other(e)))??;
                let (store, key) = self.bucket(uri)?;
                upload(uri, store.as_ref(), &key, file).await
            }
            _ => Err(StorageError::Unsupported(uri.to_string())),
        }
    }
}

/// Objects up to this size are uploaded in one request, read whole from the opened file;
/// larger ones are streamed from it in parts of this size (S3's smallest part is 5 MiB).
const PUT_PART: usize = 8 << 20;

/// How many parts of a large upload are in flight at once (memory: this many [`PUT_PART`]s).
const PUT_PARTS_IN_FLIGHT: usize = 2;

/// Upload the opened regular file `file` to `key` of `store` (for `uri`): in one request if it
/// is small, else as a multipart upload streamed from the file (aborted on error), so a large
/// output is never held in memory whole.
async fn upload(
    uri: &str,
    store: &dyn ObjectStore,
    key: &StorePath,
    file: std::fs::File,
) -> Result<(), StorageError> {
    use tokio::io::AsyncReadExt;
    let io = |e: std::io::Error| StorageError::Other {
        uri: uri.to_string(),
        message: e.to_string(),
    };
    let size = file.metadata().map_err(io)?.len();
    let mut file = tokio::fs::File::from_std(file);
    if size <= PUT_PART as u64 {
        let mut data = Vec::with_capacity(size as usize);
        // A regular file: read to its end, never more than what it holds.
        file.read_to_end(&mut data).await.map_err(io)?;
        store
            .put(key, data.into())
            .await
            .map_err(|e| Storage::map_err(uri, e))?;
        return Ok(());
    }
    let parts = store
        .put_multipart(key)
        .await
        .map_err(|e| Storage::map_err(uri, e))?;
    let mut writer = object_store::WriteMultipart::new_with_chunk_size(parts, PUT_PART);
    let mut buf = vec![0u8; 1 << 20];
    let sent = async {
        loop {
            let n = file.read(&mut buf).await.map_err(io)?;
            if n == 0 {
                return Ok(());
            }
            writer
                .wait_for_capacity(PUT_PARTS_IN_FLIGHT)
                .await
                .map_err(|e| Storage::map_err(uri, e))?;
            writer.write(&buf[..n]);
        }
    }
    .await;
    match sent {
        Ok(()) => writer
            .finish()
            .await
            .map(drop)
            .map_err(|e| Storage::map_err(uri, e)),
        Err(e) => {
            let _ = writer.abort().await;
            Err(e)
        }
    }
}

/// The bytes of a file as a stream of 1 MiB chunks.
fn read_chunks(
    file: tokio::fs::File,
    chunk: usize,
) -> impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Unpin {
    use tokio::io::AsyncReadExt;
    Box::pin(futures_util::stream::unfold(
        file,
        move |mut file| async move {
            let mut buf = vec![0u8; chunk];
            match file.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(bytes::Bytes::from(buf)), file))
                }
                Err(e) => Some((Err(e), file)),
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_backend_head_get_and_version_change() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.dat");
        std::fs::write(&f, b"hello").unwrap();
        let uri = format!("file://{}", f.display());
        let s = Storage::default();
        let v1 = s.head(&uri).await.unwrap();
        assert_eq!(v1.size, 5);
        let out = dir.path().join("copy");
        let d = s.get_to_file(&uri, &out).await.unwrap();
        assert_eq!((d.written, d.info.clone()), (5, v1.clone()));
        // sha256("hello")
        assert_eq!(
            d.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(std::fs::read(&out).unwrap(), b"hello");
        std::fs::write(&f, b"hello, world").unwrap();
        assert_ne!(
            s.head(&uri).await.unwrap().version,
            v1.version,
            "a changed source has a new version"
        );
        let missing = format!("file://{}/nope", dir.path().display());
        assert!(matches!(
            s.head(&missing).await,
            Err(StorageError::NotFound(_))
        ));
        assert!(matches!(
            s.head("ftp://x/y").await,
            Err(StorageError::Unsupported(_))
        ));
    }

    #[tokio::test]
    async fn http_backend_reads_from_a_real_server() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("obj.bin"), b"served over http").unwrap();
        let app =
            axum::Router::new().fallback_service(tower_http::services::ServeDir::new(dir.path()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let s = Storage::default();
        let uri = format!("http://{addr}/obj.bin");
        let head = s.head(&uri).await.unwrap();
        assert_eq!(head.size, 16);
        let out = dir.path().join("copy");
        let d = s.get_to_file(&uri, &out).await.unwrap();
        assert_eq!((d.written, d.info.version.clone()), (16, head.version));
        assert_eq!(std::fs::read(&out).unwrap(), b"served over http");
        let missing = format!("http://{addr}/nope.bin");
        assert!(
            matches!(s.head(&missing).await, Err(StorageError::NotFound(_))),
            "404 is not found"
        );
    }

    #[tokio::test]
    async fn http_uses_the_whole_uri_query_string_and_userinfo() {
        use axum::extract::Query;
        use axum::http::HeaderMap;
        use std::collections::HashMap;
        let app = axum::Router::new().route(
            "/q",
            axum::routing::get(
                |Query(q): Query<HashMap<String, String>>, headers: HeaderMap| async move {
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("none")
                        .to_string();
                    let body = format!("v={} auth={auth}", q.get("v").cloned().unwrap_or_default());
                    ([("etag", "\"e1\"")], body)
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::default();
        let read = |uri: String| {
            let (s, out) = (&s, dir.path().join("o"));
            async move {
                let _ = std::fs::remove_file(&out);
                s.get_to_file(&crate::uri::canonical(&uri).unwrap(), &out)
                    .await
                    .unwrap();
                std::fs::read_to_string(&out).unwrap()
            }
        };
        assert_eq!(read(format!("http://{addr}/q?v=1")).await, "v=1 auth=none");
        assert_eq!(
            read(format!("http://{addr}/q?v=22")).await,
            "v=22 auth=none"
        );
        // user:pass -> Basic dXNlcjpwYXNz
        assert_eq!(
            read(format!("HTTP://user:pass@{addr}/q?v=3")).await,
            "v=3 auth=Basic dXNlcjpwYXNz"
        );
    }

    #[tokio::test]
    async fn file_uris_are_percent_decoded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("my file.txt"), b"spaced").unwrap();
        let uri = crate::uri::canonical(&format!("file://{}/my%20file.txt", dir.path().display()))
            .unwrap();
        let out = dir.path().join("copy");
        let d = Storage::default().get_to_file(&uri, &out).await.unwrap();
        assert_eq!(d.written, 6);
        assert_eq!(std::fs::read(&out).unwrap(), b"spaced");
    }

    #[tokio::test]
    async fn an_input_is_never_written_through_a_link_and_replaces_what_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, b"input bytes").unwrap();
        let uri = format!("file://{}", src.display());
        let victim = dir.path().join("cron-x");
        std::fs::write(&victim, b"untouched").unwrap();
        let planted = dir.path().join("planted");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("new-file"), &dangling).unwrap();
        // The cache's temporary file of a transfer that failed, left behind.
        let stale = dir.path().join("0.part");
        std::fs::write(&stale, b"partial").unwrap();
        let s = Storage::default();
        for dest in [&planted, &dangling, &stale] {
            s.get_to_file(&uri, dest).await.unwrap();
            assert!(!dest.is_symlink(), "{}", dest.display());
            assert_eq!(std::fs::read(dest).unwrap(), b"input bytes");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
        assert!(!dir.path().join("new-file").exists());
    }

    #[tokio::test]
    async fn an_s3_output_is_refused_before_upload_when_its_source_is_special() {
        use object_store::{ClientOptions, RetryConfig};
        // A store nobody listens at: anything sent fails at once, unlike a refusal.
        let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = unused.local_addr().unwrap().port();
        drop(unused);
        let store = object_store::aws::AmazonS3Builder::new()
            .with_bucket_name("b")
            .with_region("us-east-1")
            .with_endpoint(format!("http://127.0.0.1:{port}"))
            .with_access_key_id("testing")
            .with_secret_access_key("testing")
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(true)
                    .with_timeout(std::time::Duration::from_secs(5)),
            )
            .build()
            .unwrap();
        let s = Storage::default();
        s.buckets
            .lock()
            .unwrap()
            .insert("b".into(), Arc::new(store));
        let dir = tempfile::tempdir().unwrap();
        let link = |name: &str, to: &Path| {
            let p = dir.path().join(name);
            std::os::unix::fs::symlink(to, &p).unwrap();
            p
        };
        let environ = link("environ", Path::new("/proc/self/environ"));
        let null = link("null", Path::new("/dev/null"));
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Should the FIFO be opened for reading after all, a writer ends the wait.
        let release = fifo.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(10));
            let _ = std::fs::write(release, b"");
        });
        for (src, why) in [
            (&environ, "the task's output is on procfs"),
            (&null, "the task's output is on devtmpfs"),
            (&fifo, "the task's output is not a regular file"),
        ] {
            match s.put_file("s3://b/out", src).await {
                Err(StorageError::Refused { why: got, .. })
                | Err(StorageError::Other { message: got, .. })
                    if got.contains(why) => {}
                other => panic!("{}: {other:?}", src.display()),
            }
        }
        // An ordinary file goes to the store (which is not there).
        let ok = dir.path().join("ok");
        std::fs::write(&ok, b"x").unwrap();
        match s.put_file("s3://b/out", &ok).await {
            Err(StorageError::Other { message, .. }) => {
                assert!(message.contains("error sending request"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn put_file_writes_outputs_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, b"out").unwrap();
        let dest = dir.path().join("sub/dir/result.txt");
        Storage::default()
            .put_file(&format!("file://{}", dest.display()), &src)
            .await
            .unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"out");
    }
}
