//! A task's stdout and stderr: copied from its pipes to log files, each file created at its first
//! byte, kept up to a cap (the rest counted, not kept, and the cut marked at the end of the
//! file), with the last [`TAIL`] bytes remembered to explain a failure; and the log directory
//! pruned by age and size ([`prune_logs`]).

use std::collections::VecDeque;
use std::path::PathBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes of the end of stderr kept to explain a failed attempt.
pub const TAIL: usize = 4096;

/// What was captured of one stream.
#[derive(Debug, Default)]
pub struct Captured {
    /// The log file, if the stream had any byte.
    pub path: Option<PathBuf>,
    /// Bytes the task wrote.
    pub total: u64,
    /// Bytes kept in the file (at most the cap).
    pub kept: u64,
    /// The last [`TAIL`] bytes written.
    pub tail: Vec<u8>,
    /// Why the file could not be written to the end (the task's own result is not affected).
    pub error: Option<String>,
}

impl Captured {
    /// The tail as text (invalid UTF-8 replaced), for reports.
    pub fn tail_text(&self) -> Option<String> {
        (!self.tail.is_empty()).then(|| String::from_utf8_lossy(&self.tail).into_owned())
    }
}

/// Copy a pipe to `path` (created, with its directory, at the first byte), keeping at most `cap`
/// bytes; then say in the file how much more there was. If the disk is full, `make_room` is
/// asked once to free some (the worker evicts cached objects) and the write tried again; a file
/// that still cannot be written is left as it is and the pipe drained to the end, so the task
/// does not block, with the error in [`Captured::error`].
pub async fn capture(
    pipe: Option<impl tokio::io::AsyncRead + Unpin>,
    path: PathBuf,
    cap: u64,
    make_room: impl Fn() -> bool,
) -> std::io::Result<Captured> {
    let mut c = Captured::default();
    let Some(mut pipe) = pipe else { return Ok(c) };
    let mut buf = vec![0u8; 64 * 1024];
    let mut file: Option<tokio::fs::File> = None;
    let mut tail: VecDeque<u8> = VecDeque::new();
    loop {
        let n = pipe.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        c.total += n as u64;
        let start = chunk.len().saturating_sub(TAIL);
        tail.extend(&chunk[start..]);
        let excess = tail.len().saturating_sub(TAIL);
        tail.drain(..excess);
        if c.error.is_some() {
            continue;
        }
        if file.is_none() {
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            file = Some(tokio::fs::File::create(&path).await?);
        }
        let room = cap.saturating_sub(c.kept) as usize;
        if room > 0 {
            let keep = &chunk[..chunk.len().min(room)];
            let f = file.as_mut().expect("created");
            let mut written = f.write_all(keep).await;
            if matches!(&written, Err(e) if e.kind() == std::io::ErrorKind::StorageFull)
                && make_room()
            {
                written = f.write_all(keep).await;
            }
            match written {
                Ok(()) => c.kept += keep.len() as u64,
                Err(e) => {
                    tracing::warn!(
                        "{}: {e}; the rest of this output is not kept",
                        path.display()
                    );
                    c.error = Some(format!("{}: {e}", path.display()));
                }
            }
        }
    }
    if let (Some(mut f), None) = (file.take(), &c.error) {
        if c.total > c.kept {
            let note = format!(
                "\n[diffuse: output cut at {} bytes; {} more bytes were not kept]\n",
                c.kept,
                c.total - c.kept
            );
            f.write_all(note.as_bytes()).await?;
        }
        if let Err(e) = f.flush().await {
            c.error = Some(format!("{}: {e}", path.display()));
        }
    }
    if c.total > 0 {
        c.path = Some(path);
    }
    c.tail = tail.into();
    Ok(c)
}

/// Every hour (and at start): delete captured output older than `retention`, then the oldest
/// files until the directory holds at most `max` bytes.
pub(super) async fn prune_logs(dir: std::path::PathBuf, retention: std::time::Duration, max: u64) {
    loop {
        let d = dir.clone();
        let _ = tokio::task::spawn_blocking(move || prune_once(&d, retention, max)).await;
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    }
}

/// One pruning pass of [`prune_logs`]; returns the files deleted.
pub fn prune_once(dir: &std::path::Path, retention: std::time::Duration, max: u64) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let now = std::time::SystemTime::now();
    let mut files: Vec<(std::time::SystemTime, u64, std::path::PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            m.is_file()
                .then(|| (m.modified().unwrap_or(now), m.len(), e.path()))
        })
        .collect();
    files.sort();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    let mut deleted = 0;
    for (modified, len, path) in files {
        let old = now.duration_since(modified).unwrap_or_default() > retention;
        if (old || total > max) && std::fs::remove_file(&path).is_ok() {
            total -= len;
            deleted += 1;
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_over_the_cap_is_cut_and_marked_and_the_tail_kept() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let c = capture(Some(&data[..]), dir.path().join("out"), 1000, || false)
            .await
            .unwrap();
        assert_eq!((c.total, c.kept), (10_000, 1000));
        assert_eq!(c.tail, data[10_000 - TAIL..]);
        let file = std::fs::read(dir.path().join("out")).unwrap();
        assert_eq!(&file[..1000], &data[..1000]);
        let note = String::from_utf8_lossy(&file[1000..]);
        assert!(
            note.contains("output cut at 1000 bytes; 9000 more bytes were not kept"),
            "{note}"
        );
        let quiet = capture(Some(&b""[..]), dir.path().join("none"), 1000, || false)
            .await
            .unwrap();
        assert!(quiet.path.is_none() && !dir.path().join("none").exists());
    }
}
