//! `diffuse cache info` and `diffuse cache clear`: the worker caches `diffuse run` keeps between
//! runs (`diffuse_runtime::run_caches`); `diffuse cache results`: the kept results reused by
//! content, beside those caches or in a running dispatcher.

use super::api::{Client, ClientArgs};
use crate::size::format_size;
use anyhow::Result;
use clap::{Args, Subcommand};
use diffuse_runtime::dispatcher::answers::ResultsView;
use diffuse_runtime::run_caches;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `diffuse cache`.
#[derive(Args, Debug)]
pub struct CacheArgs {
    #[command(subcommand)]
    what: What,
    /// The caches' root [default: $XDG_CACHE_HOME/diffuse, else ~/.cache/diffuse].
    #[arg(long, global = true)]
    cache_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Each worker cache: objects, bytes, whether a run or a worker uses it now.
    Info {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete every worker cache nothing uses now, and the index of results kept in them.
    Clear,
    /// The results kept for reuse (docs/runtime.md, "Results reused by content"): how many,
    /// their bytes, the input digests known; those of `diffuse run` (beside its caches), or of
    /// a running dispatcher with --dispatcher.
    Results {
        /// Forget every kept result (their copies stay in the caches until evicted): the
        /// tasks run again.
        #[arg(long)]
        clear: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        client: super::api::ClientArgs,
    },
}

/// `diffuse cache`.
pub fn cache(a: CacheArgs) -> Result<ExitCode> {
    let root = a.cache_dir.unwrap_or_else(run_caches::default_root);
    match a.what {
        What::Info { json } => {
            let dirs = run_caches::info(&root)?;
            if json {
                println!("{}", serde_json::to_string(&dirs)?);
            } else if dirs.is_empty() {
                println!("{}: no worker cache", root.display());
            } else {
                for d in &dirs {
                    println!(
                        "{}  {} objects, {}{}",
                        d.dir.display(),
                        d.objects,
                        format_size(d.bytes),
                        if d.in_use { ", in use" } else { "" }
                    );
                }
            }
        }
        What::Results {
            clear,
            json,
            client,
        } => return results(&root, clear, json, &client),
        What::Clear => {
            let store = root.join(diffuse_runtime::run::RESULTS_STORE);
            if store.exists() {
                let (s, _) = diffuse_runtime::reuse::store::Store::open(&store)?;
                s.clear();
                s.flush();
                println!("forgot the kept results in {}", store.display());
            }
            let (deleted, kept) = run_caches::clear(&root)?;
            for d in &deleted {
                println!("deleted {}", d.display());
            }
            for d in &kept {
                println!("kept {} (in use)", d.display());
            }
            if deleted.is_empty() && kept.is_empty() {
                println!("{}: no worker cache", root.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `diffuse cache results`: the counts of the kept results, from the index beside the caches
/// under `root`, or from the dispatcher `client` names; with `clear`, forget them.
fn results(
    root: &std::path::Path,
    clear: bool,
    json: bool,
    client: &ClientArgs,
) -> Result<ExitCode> {
    // From the dispatcher: its answer, and the tasks it reused since it started.
    let (view, reused) = if client.names_dispatcher() {
        let c = Client::new(client)?;
        let rt = super::runtime()?;
        let req = if clear {
            c.http.delete(format!("{}/v1/results", c.url))
        } else {
            c.http.get(format!("{}/v1/results", c.url))
        };
        let v: ResultsView = rt
            .block_on(c.call(req))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let reused = v.reused;
        (v, Some(reused))
    } else {
        let path = root.join(diffuse_runtime::run::RESULTS_STORE);
        if !path.exists() {
            println!("{}: no kept result", path.display());
            return Ok(ExitCode::SUCCESS);
        }
        let loaded = diffuse_runtime::reuse::store::load(&path)?;
        if clear {
            let (s, _) = diffuse_runtime::reuse::store::Store::open(&path)?;
            s.clear();
            s.flush();
        }
        let view = ResultsView {
            reuse: true,
            results: loaded.results.len() as u64,
            bytes: loaded.results.iter().map(|(_, r)| r.bytes()).sum::<u64>(),
            digests: loaded.digests.len() as u64,
            store: Some(path.display().to_string()),
            ..ResultsView::default()
        };
        (view, None)
    };
    if json {
        println!("{}", serde_json::to_string(&view)?);
    } else {
        println!(
            "{} results kept ({}), {} input digests known{}",
            view.results,
            format_size(view.bytes),
            view.digests,
            view.store
                .as_ref()
                .map(|s| format!(", in {s}"))
                .unwrap_or_default()
        );
        if let Some(n) = reused {
            println!("{n} tasks reused since the dispatcher started");
        }
        if clear {
            println!("forgot them: their tasks run again");
        }
    }
    Ok(ExitCode::SUCCESS)
}
