//! The dispatcher's HTTP API as the client commands call it: where the dispatcher is and how to
//! reach it ([`ClientArgs`]), the [`Client`], and why a call failed ([`CallError`]).
//!
//! A dispatcher served over TLS is named with `https://`; `--tls-ca FILE` (or `DIFFUSE_TLS_CA`)
//! adds a site's CA to the roots trusted (the system's and the built-in ones stay). A failed TLS
//! handshake (an untrusted certificate, a server that does not speak TLS) is an error at once,
//! never retried, and says what to do.
//!
//! Every answer is read into the type the dispatcher serializes it from
//! ([`diffuse_runtime::dispatcher::answers`]): an answer of another shape (a field renamed or
//! missing, from a dispatcher of another version) is an error naming the route and the field,
//! never a value shown as 0.

use super::{read_token, DEFAULT_DISPATCHER};
use anyhow::{bail, Context, Result};
use clap::Args;
use diffuse_runtime::dispatcher::answers::Status;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of the client commands.
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// Dispatcher URL [default: $DIFFUSE_DISPATCHER or http://127.0.0.1:8700].
    #[arg(long)]
    dispatcher: Option<String>,
    /// File holding the client token [default: $DIFFUSE_CLIENT_TOKEN].
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// CA certificates (a PEM bundle) to trust, besides the system's, for an https://
    /// dispatcher: a site's own CA.
    #[arg(long, env = "DIFFUSE_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
}

/// A connection to a dispatcher's HTTP API: its URL, the client token, an HTTP client.
pub(crate) struct Client {
    pub(crate) url: String,
    pub(crate) token: String,
    pub(crate) http: reqwest::Client,
}

impl ClientArgs {
    /// Whether `--dispatcher` was given.
    pub(crate) fn names_dispatcher(&self) -> bool {
        self.dispatcher.is_some()
    }
}

impl Client {
    /// A client of the dispatcher `a` names, with its token and the CAs it trusts.
    pub(crate) fn new(a: &ClientArgs) -> Result<Client> {
        let url = a
            .dispatcher
            .clone()
            .or_else(|| std::env::var("DIFFUSE_DISPATCHER").ok())
            .unwrap_or_else(|| DEFAULT_DISPATCHER.into());
        let trust = diffuse_runtime::tls::Trust::from_option(a.tls_ca.as_deref())
            .context("--tls-ca/DIFFUSE_TLS_CA")?;
        Ok(Client {
            url: url.trim_end_matches('/').to_string(),
            token: read_token(&a.token_file, "DIFFUSE_CLIENT_TOKEN", "--token-file")?,
            http: trust
                .reqwest(
                    reqwest::Client::builder()
                        .connect_timeout(Duration::from_secs(10))
                        .timeout(Duration::from_secs(300)),
                )
                .build()?,
        })
    }

    /// The error of a request that got no answer: a failed TLS handshake (not worth retrying),
    /// or an unreachable dispatcher; with the causes and, for TLS, what to do.
    pub(crate) fn unanswered(&self, e: &reqwest::Error) -> CallError {
        let why = diffuse_runtime::tls::describe(e);
        if diffuse_runtime::tls::tls_failure(e).is_some() {
            CallError::Tls(format!("cannot connect to {}: {why}", self.url))
        } else {
            CallError::Unreachable(format!("cannot reach {}: {why}", self.url))
        }
    }

    /// Send `req`; its answer read as a `T`, or an error with the dispatcher's message (or the
    /// HTTP status and body when it is not JSON). `Unreachable` errors are told apart so
    /// callers can retry; an answer that is not a `T` is [`CallError::Mismatch`].
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        let (http, req) = req.bearer_auth(&self.token).build_split();
        let req = req.map_err(|e| CallError::Refused {
            code: 0,
            message: format!("{}: {e}", self.url),
        })?;
        let route = format!("{} {}", req.method(), req.url().path());
        let resp = http.execute(req).await.map_err(|e| self.unanswered(&e))?;
        let code = resp.status();
        let text = resp.text().await.unwrap_or_default();
        if code.is_success() {
            return serde_json::from_str(&text).map_err(|e| {
                CallError::Mismatch(format!(
                    "{}: the answer to {route} is not what this diffuse ({}) expects: {e}; is the dispatcher another version?",
                    self.url,
                    env!("CARGO_PKG_VERSION")
                ))
            });
        }
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let msg = body
            .get("error")
            .and_then(|e| e.as_str())
            .map(String::from)
            .unwrap_or_else(|| text.trim().chars().take(300).collect());
        Err(CallError::Refused {
            code: code.as_u16(),
            message: format!("{} ({code}): {msg}", self.url),
        })
    }

    /// `GET /v1/status`.
    pub(crate) async fn status(&self) -> Result<Status, CallError> {
        self.call(self.http.get(format!("{}/v1/status", self.url)))
            .await
    }
}

/// Why a request to the dispatcher failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// No answer (the dispatcher may be restarting): worth retrying.
    Unreachable(String),
    /// The TLS handshake failed: retrying would not help.
    Tls(String),
    /// An answer other than success.
    Refused { code: u16, message: String },
    /// A success whose body is not the answer this client knows (another version).
    Mismatch(String),
}

impl CallError {
    /// A refusal with one of `codes` (an unknown object, a bad request): its reason on stderr
    /// and exit code 1. Anything else is an error.
    pub(crate) fn exit_if(self, codes: &[u16]) -> Result<ExitCode> {
        match self {
            CallError::Refused { code, message } if codes.contains(&code) => {
                let why = message.split_once("): ").map_or(&*message, |(_, m)| m);
                eprintln!("error: {why}");
                Ok(ExitCode::from(1))
            }
            CallError::Refused { message, .. }
            | CallError::Unreachable(message)
            | CallError::Tls(message)
            | CallError::Mismatch(message) => {
                bail!("{message}")
            }
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(m)
            | CallError::Tls(m)
            | CallError::Mismatch(m)
            | CallError::Refused { message: m, .. } => f.write_str(m),
        }
    }
}

impl std::error::Error for CallError {}
