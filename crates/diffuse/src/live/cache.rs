//! `diffuse cache info` and `diffuse cache clear`: the worker caches `diffuse run` keeps between
//! runs (`diffuse_runtime::run_caches`).

use crate::size::format_size;
use anyhow::Result;
use clap::{Args, Subcommand};
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
    /// Delete every worker cache nothing uses now.
    Clear,
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
        What::Clear => {
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
