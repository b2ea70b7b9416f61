//! Input lookups for the dispatcher, which never reads storage itself: the size and version of
//! each submitted input, at most `LOOKUPS_AT_ONCE` at a time, each within the lookup timeout.

use super::ctx::Ctx;
use crate::proto::{LookupResult, ToDispatcher};
use std::sync::Arc;
use std::time::Duration;

/// Look up each URI's size and version, concurrently, each within `timeout`.
pub(super) async fn lookup(ctx: Arc<Ctx>, id: u64, uris: Vec<String>, timeout: Duration) {
    let results = futures_util::future::join_all(uris.into_iter().map(|uri| {
        let ctx = ctx.clone();
        async move {
            let _place = ctx.lookups.acquire().await;
            let r = tokio::time::timeout(timeout, ctx.storage.head(&uri)).await;
            let (size, version, error) = match r {
                Ok(Ok(info)) => (Some(info.size), Some(info.version), None),
                Ok(Err(crate::storage::StorageError::NotFound(u))) => {
                    (None, None, Some(format!("not found: {u}")))
                }
                Ok(Err(e)) => (None, None, Some(e.to_string())),
                Err(_) => (
                    None,
                    None,
                    Some(format!(
                        "{}: no answer from storage within {:.0?} (the lookup timeout)",
                        crate::uri::redacted(&uri),
                        timeout
                    )),
                ),
            };
            LookupResult {
                uri,
                size,
                version,
                error,
            }
        }
    }))
    .await;
    let _ = ctx.out.send(ToDispatcher::LookedUp { id, results });
}
