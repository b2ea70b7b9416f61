//! `diffuse locate` and `diffuse place`: Hercules' locate and place, through the dispatcher's
//! `/v1/objects/{uri}` routes.

use super::api::{Client, ClientArgs};
use super::runtime;
use anyhow::Result;
use diffuse_runtime::dispatcher::answers::{ObjectView, Placed};
use std::process::ExitCode;

/// `diffuse locate`.
#[derive(clap::Args)]
pub struct LocateArgs {
    /// The object: tmp://NAME, file:///path, s3://bucket/key, ...
    uri: String,
    /// Print the dispatcher's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// `diffuse place`.
#[derive(clap::Args)]
pub struct PlaceArgs {
    /// A tmp:// object some task writes.
    uri: String,
    /// The worker's name (as `diffuse status` lists it).
    node: String,
    #[command(flatten)]
    client: ClientArgs,
}

/// `{dispatcher}/v1/objects/{uri}{tail}`, the URI percent-encoded as one path segment.
fn object_url(c: &Client, uri: &str, tail: &[&str]) -> Result<reqwest::Url> {
    let mut url = reqwest::Url::parse(&format!("{}/v1/objects/", c.url))?;
    {
        let mut seg = url
            .path_segments_mut()
            .map_err(|()| anyhow::anyhow!("{} cannot take a path", c.url))?;
        seg.pop_if_empty().push(uri);
        seg.extend(tail);
    }
    Ok(url)
}

/// `diffuse locate URI`: `STATE on NODE, NODE (SIZE bytes, written by TASK)`.
pub fn locate(a: LocateArgs) -> Result<ExitCode> {
    let c = Client::new(&a.client)?;
    let url = object_url(&c, &a.uri, &[])?;
    let v: ObjectView = match runtime()?.block_on(c.call(c.http.get(url))) {
        Ok(v) => v,
        Err(e) => return e.exit_if(&[400, 404]),
    };
    if a.json {
        println!("{}", serde_json::to_string(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut line = format!("{}: {}", v.uri, v.state);
    if !v.nodes.is_empty() {
        line.push_str(&format!(" on {}", v.nodes.join(", ")));
    }
    let mut more = Vec::new();
    if let Some(s) = v.size {
        more.push(format!("{s} bytes"));
    }
    if let Some(p) = &v.producer {
        more.push(format!("written by task '{p}'"));
    }
    if let Some(p) = &v.placed {
        more.push(format!("placed on '{p}'"));
    }
    if !more.is_empty() {
        line.push_str(&format!(" ({})", more.join(", ")));
    }
    println!("{line}");
    Ok(ExitCode::SUCCESS)
}

/// `diffuse place URI NODE`: prints what the dispatcher did.
pub fn place(a: PlaceArgs) -> Result<ExitCode> {
    let c = Client::new(&a.client)?;
    let url = object_url(&c, &a.uri, &["placement"])?;
    let body = serde_json::json!({ "node": a.node });
    match runtime()?.block_on(c.call::<Placed>(c.http.put(url).json(&body))) {
        Ok(v) => {
            println!("{}", v.result);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => e.exit_if(&[400, 404]),
    }
}
