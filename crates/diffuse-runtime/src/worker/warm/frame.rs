//! The frames between a worker and a warm process (docs/warm.md, "The protocol"): a header of
//! two big-endian `u32` (the JSON object's length, the payload's length), the JSON object, the
//! payload. The messages are [`ToWarm`] and [`FromWarm`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol this worker speaks; a warm process saying another is refused.
pub const PROTOCOL: u32 = 1;

/// Most bytes of a frame's JSON object.
const MAX_JSON: u32 = 16 << 20;
/// Most bytes of a frame's payload (a reuse-mode call's result).
pub const MAX_PAYLOAD: u32 = 1 << 30;

/// What the worker sends.
#[derive(Debug, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum ToWarm<'a> {
    /// Import the modules, run the code: once, after `hello`.
    Setup {
        /// Modules.
        preload: &'a [String],
        /// Code.
        setup: Option<&'a str>,
    },
    /// Run a call; its argument bytes are the payload.
    Call(CallOrder<'a>),
    /// A forked child may start (it is in its cgroup).
    Go {
        /// The call.
        id: u64,
    },
    /// Exit.
    Exit,
}

/// One call, as the warm process gets it.
#[derive(Debug, Serialize)]
pub struct CallOrder<'a> {
    /// Its number on this connection.
    pub id: u64,
    /// `module:function`.
    pub entry: &'a str,
    /// The staged function file.
    #[serde(rename = "fn")]
    pub function: String,
    /// The staged inputs, as written in the task.
    pub inputs: Vec<String>,
    /// Its working directory.
    pub cwd: String,
    /// Its whole environment.
    pub env: BTreeMap<String, String>,
    /// The FIFO its stdout goes to.
    pub stdout: String,
    /// The FIFO its stderr goes to.
    pub stderr: String,
    /// Where a forked child writes the result.
    pub result: String,
}

/// What a warm process sends.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum FromWarm {
    /// At start.
    Hello {
        /// Its protocol.
        protocol: u32,
        /// Its Python's version.
        #[serde(default)]
        python: String,
    },
    /// Set up.
    Ready {
        /// Its resident memory, bytes.
        #[serde(default)]
        rss: u64,
    },
    /// The setup failed (it exits).
    Failed {
        /// The traceback.
        error: String,
    },
    /// Fork mode: the call's child.
    Forked {
        /// The call.
        id: u64,
        /// The child's pid (and process group).
        pid: u32,
    },
    /// Fork mode: the call's child ended.
    Exited {
        /// The call.
        id: u64,
        /// Its exit code; negative: killed by that signal.
        code: i32,
    },
    /// Reuse mode: the call ended; its result is the payload.
    Done {
        /// The call.
        id: u64,
        /// The entry returned (false: it raised; the traceback went to the call's stderr).
        ok: bool,
        /// Processes the call left, killed.
        #[serde(default)]
        killed: u32,
    },
}

impl FromWarm {
    /// The call a message is about, if any.
    pub fn call_id(&self) -> Option<u64> {
        match self {
            FromWarm::Forked { id, .. }
            | FromWarm::Exited { id, .. }
            | FromWarm::Done { id, .. } => Some(*id),
            _ => None,
        }
    }
}

/// Write one frame.
pub async fn write<W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: &ToWarm<'_>,
    payload: &[u8],
) -> std::io::Result<()> {
    let json = serde_json::to_vec(msg).expect("a message serializes");
    let mut frame = Vec::with_capacity(8 + json.len() + payload.len());
    frame.extend_from_slice(&(json.len() as u32).to_be_bytes());
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&json);
    frame.extend_from_slice(payload);
    w.write_all(&frame).await?;
    w.flush().await
}

/// Read one frame: the message and its payload; None at end of file.
pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<(FromWarm, Vec<u8>)>> {
    let mut header = [0u8; 8];
    match r.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let json_len = u32::from_be_bytes(header[..4].try_into().expect("4 bytes"));
    let payload_len = u32::from_be_bytes(header[4..].try_into().expect("4 bytes"));
    if json_len > MAX_JSON || payload_len > MAX_PAYLOAD {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {json_len} + {payload_len} bytes: not the warm protocol"),
        ));
    }
    let mut json = vec![0u8; json_len as usize];
    r.read_exact(&mut json).await?;
    let mut payload = vec![0u8; payload_len as usize];
    r.read_exact(&mut payload).await?;
    let msg = serde_json::from_slice(&json).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "a message of the warm process: {e}: {}",
                String::from_utf8_lossy(&json[..json.len().min(200)])
            ),
        )
    })?;
    Ok(Some((msg, payload)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_frame_is_two_lengths_a_json_object_and_a_payload() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write(&mut a, &ToWarm::Go { id: 7 }, b"xyz").await.unwrap();
        let json = br#"{"op":"go","id":7}"#;
        let mut raw = vec![0u8; 8 + json.len() + 3];
        b.read_exact(&mut raw).await.unwrap();
        assert_eq!(&raw[..8], &[0, 0, 0, json.len() as u8, 0, 0, 0, 3]);
        assert_eq!(&raw[8..8 + json.len()], json);
        assert_eq!(&raw[8 + json.len()..], b"xyz");
        let reply = br#"{"op":"done","id":7,"ok":true}"#;
        let mut frame = Vec::new();
        frame.extend_from_slice(&(reply.len() as u32).to_be_bytes());
        frame.extend_from_slice(&2u32.to_be_bytes());
        frame.extend_from_slice(reply);
        frame.extend_from_slice(b"ok");
        a.write_all(&frame).await.unwrap();
        drop(a);
        let (msg, payload) = read(&mut b).await.unwrap().unwrap();
        assert!(matches!(
            msg,
            FromWarm::Done {
                id: 7,
                ok: true,
                killed: 0
            }
        ));
        assert_eq!(payload, b"ok");
        assert!(read(&mut b).await.unwrap().is_none(), "end of file");
    }
}
