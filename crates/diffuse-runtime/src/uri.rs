//! Input and output URIs: the schemes diffuse reads and writes, their canonical form, and the
//! local path a `file://` URI names.
//!
//! A URI is put in canonical form once, when its task is parsed, and everything after that (the
//! cache key, the source version, the fetch, the location index) uses the canonical text whole:
//!
//! * the scheme is case-insensitive: `FILE:///a` is `file:///a`;
//! * `file://` URIs follow RFC 8089: `file:///abs/path` or `file://localhost/abs/path`, with
//!   percent-encoding (`my%20file.txt`, as Python's `Path.as_uri()` writes it) decoded when the
//!   path is opened; a raw space is accepted and encoded. `?` and `#` start a query or a fragment,
//!   which a file has not: a `?` in a file name is written `%3F`. Dot segments are resolved;
//! * `http(s)://` URIs keep their query string and user information (`user:pass@`, sent as basic
//!   authentication); the host is lower-cased; a fragment, which a client never sends, is dropped;
//! * `s3://bucket/key` keeps its key byte for byte (S3 keys are not percent-encoded);
//! * `tmp://NAME` names an intermediate object: written by one task, kept in its worker's cache,
//!   read by others, never on persistent storage. NAME is 1-200 characters of `A-Z a-z 0-9 . _ -`
//!   (no path separator), and not `.` or `..`. Storage never sees these URIs ([`scheme`] is
//!   `None` for them);
//! * `blob://SHA256` names a blob kept by the dispatcher (`PUT /v1/blobs/{sha256}`), read by
//!   workers from it: 64 hex digits, lower-cased; its name is its version.

use std::path::PathBuf;

/// The storage a URI names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// A POSIX path (a shared file system).
    File,
    /// An S3 bucket and key.
    S3,
    /// An HTTP or HTTPS URL.
    Http,
    /// A blob the dispatcher keeps, by its SHA-256.
    Blob,
}

/// The scheme of a canonical URI.
pub fn scheme(uri: &str) -> Option<Scheme> {
    let (s, _) = uri.split_once("://")?;
    match s {
        "file" => Some(Scheme::File),
        "s3" => Some(Scheme::S3),
        "http" | "https" => Some(Scheme::Http),
        "blob" => Some(Scheme::Blob),
        _ => None,
    }
}

/// The canonical form of an input or output URI, or why it is not one diffuse can read.
pub fn canonical(uri: &str) -> Result<String, String> {
    if uri.contains('\0') {
        return Err(format!("'{}' contains a NUL byte", uri.escape_debug()));
    }
    let Some((scheme, rest)) = uri.split_once("://") else {
        return Err(format!(
            "'{uri}' is not a file://, s3://, http://, https://, blob:// or tmp:// URI"
        ));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "tmp" => tmp_name(rest).map(|n| format!("tmp://{n}")),
        "file" => canonical_file(&format!("file://{rest}")),
        "http" | "https" => canonical_http(&format!("{}://{rest}", scheme.to_ascii_lowercase())),
        "s3" => {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() || key.is_empty() {
                return Err(format!("'{uri}': s3:// URIs are s3://bucket/key"));
            }
            Ok(format!("s3://{rest}"))
        }
        "blob" => {
            let sha = rest.to_ascii_lowercase();
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "'{uri}': blob:// URIs are blob://SHA256 (64 hex digits: the SHA-256 of its bytes)"
                ));
            }
            Ok(format!("blob://{sha}"))
        }
        _ => Err(format!(
            "'{uri}' is not a file://, s3://, http://, https://, blob:// or tmp:// URI"
        )),
    }
}

/// Whether an object lives only in workers' caches, with no storage to read it from: an
/// intermediate object (`tmp://NAME`) or a kept result's file (`result://SHA256`).
pub fn on_workers_only(uri: &str) -> bool {
    is_tmp(uri) || crate::reuse::kept::is_result_object(uri)
}

/// Whether a canonical URI names an intermediate object (`tmp://NAME`).
pub fn is_tmp(uri: &str) -> bool {
    uri.starts_with("tmp://")
}

/// Check the NAME of `tmp://NAME`.
fn tmp_name(name: &str) -> Result<&str, String> {
    if name.contains('/') || name.contains('\\') {
        return Err(format!(
            "'tmp://{name}': an intermediate object's name has no path separator (it names an object kept on a worker, not a path)"
        ));
    }
    let ok = !name.is_empty()
        && name.len() <= 200
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !ok {
        return Err(format!(
            "'tmp://{name}': an intermediate object's name is 1-200 characters of A-Z a-z 0-9 . _ - (and not . or ..)"
        ));
    }
    Ok(name)
}

fn canonical_file(uri: &str) -> Result<String, String> {
    let mut url = url::Url::parse(uri).map_err(|e| format!("'{uri}': {e}"))?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "'{uri}': a file:// URI has no query or fragment; write a '?' in a file name as %3F and a '#' as %23"
        ));
    }
    match url.host_str() {
        None | Some("") | Some("localhost") => {}
        Some(host) => {
            return Err(format!(
                "'{uri}': file:// URIs name a path on this machine (file:///path or file://localhost/path), not on '{host}'"
            ))
        }
    }
    if url.host_str() == Some("localhost") {
        url.set_host(None).map_err(|e| format!("'{uri}': {e}"))?;
    }
    let path = url
        .to_file_path()
        .map_err(|()| format!("'{uri}': file:// URIs need an absolute path"))?;
    if url.path().ends_with('/') {
        return Err(format!("'{uri}' names a directory, not a file"));
    }
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(format!("'{uri}': the path contains a NUL byte"));
    }
    Ok(url.to_string())
}

fn canonical_http(uri: &str) -> Result<String, String> {
    let mut url = url::Url::parse(uri).map_err(|e| format!("'{uri}': {e}"))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("'{uri}': no host"));
    }
    url.set_fragment(None);
    Ok(url.to_string())
}

/// The local path a canonical `file://` URI names, percent-decoded.
pub fn file_path(uri: &str) -> Option<PathBuf> {
    url::Url::parse(uri).ok()?.to_file_path().ok()
}

/// The canonical `file://` URI of an absolute path (percent-encoded as needed).
pub fn from_path(path: &std::path::Path) -> Option<String> {
    url::Url::from_file_path(path).ok().map(|u| u.to_string())
}

/// The longest file name most file systems take, in bytes.
const NAME_MAX: usize = 255;

/// The file name an input is staged under on a worker (`inputs/<i>/<base name>`): the last part
/// of the URI's path, so that a program that derives an output's name from its input's, knows a
/// format by its extension, or prints the name of what it read sees the name the user gave.
///
/// * `file://`: the path's last component, percent-decoded (`my%20file.txt` is `my file.txt`);
/// * `s3://bucket/key`: the key's last `/`-separated part, byte for byte (keys are not
///   percent-encoded);
/// * `http(s)://`: the URL path's last segment, percent-decoded; the query string is not part of
///   it (`https://h/get/a.bam?sig=x` is `a.bam`);
/// * `tmp://NAME`: NAME.
///
/// A `/` or NUL left after decoding becomes `_`, bytes that are not UTF-8 become U+FFFD, and a
/// name longer than 255 bytes is shortened in its stem (its extension kept). A URI whose last
/// part is empty, `.` or `..` (`https://host/`, `https://host/dir/`) gives `input`.
pub fn base_name(uri: &str) -> String {
    let last: String = match scheme(uri) {
        Some(Scheme::File) => file_path(uri)
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default(),
        Some(Scheme::S3) => uri.rsplit('/').next().unwrap_or_default().to_string(),
        Some(Scheme::Blob) => "blob".to_string(),
        Some(Scheme::Http) => url::Url::parse(uri)
            .ok()
            .and_then(|u| {
                let last = u.path_segments()?.next_back()?.to_string();
                Some(percent_decoded(&last))
            })
            .unwrap_or_default(),
        None => uri.strip_prefix("tmp://").unwrap_or(uri).to_string(),
    };
    let name: String = last
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    match name.as_str() {
        "" | "." | ".." => "input".to_string(),
        _ => shortened(name),
    }
}

/// `s` with each `%XX` replaced by its byte, read as UTF-8 (U+FFFD for what is not).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `name` cut to [`NAME_MAX`] bytes in its stem, its extension (up to 32 bytes) kept.
fn shortened(name: String) -> String {
    if name.len() <= NAME_MAX {
        return name;
    }
    let ext = match name.rfind('.') {
        Some(dot) if dot > 0 && name.len() - dot <= 32 => &name[dot..],
        _ => "",
    };
    let mut end = NAME_MAX - ext.len();
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ext}", &name[..end])
}

/// The URI with any password replaced by `***`, for logs and error messages.
pub fn redacted(uri: &str) -> std::borrow::Cow<'_, str> {
    match url::Url::parse(uri) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("***"));
            url.to_string().into()
        }
        _ => uri.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_case_insensitive() {
        assert_eq!(canonical("FILE:///data/a").unwrap(), "file:///data/a");
        assert_eq!(canonical("Http://Host/X?a=1").unwrap(), "http://host/X?a=1");
        assert_eq!(canonical("S3://b/k").unwrap(), "s3://b/k");
        assert!(canonical("ftp://x/y").is_err());
        assert!(canonical("/data/a").is_err());
    }

    #[test]
    fn file_uris_are_percent_decoded_to_paths() {
        let c = canonical("file:///data/my%20file.txt").unwrap();
        assert_eq!(file_path(&c).unwrap(), PathBuf::from("/data/my file.txt"));
        // A raw space is the same file, and the same canonical URI (one cache entry).
        assert_eq!(canonical("file:///data/my file.txt").unwrap(), c);
        let c = canonical("file://localhost/data/x").unwrap();
        assert_eq!(c, "file:///data/x");
        assert_eq!(
            file_path(&canonical("file:///d/100%25.txt").unwrap()).unwrap(),
            PathBuf::from("/d/100%.txt")
        );
        assert_eq!(
            file_path(&canonical("file:///d/../etc/x").unwrap()).unwrap(),
            PathBuf::from("/etc/x")
        );
        for bad in [
            "file://relative/x",
            "file:///a?b",
            "file:///a#b",
            "file:///a%00b",
            "file://",
        ] {
            assert!(canonical(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn base_names_are_the_last_part_of_the_path() {
        let b = |u: &str| base_name(&canonical(u).unwrap());
        assert_eq!(b("file:///data/a.txt"), "a.txt");
        assert_eq!(b("file:///data/my%20file.txt"), "my file.txt");
        assert_eq!(b("file:///data/100%25%3F.txt"), "100%?.txt");
        assert_eq!(b("file:///data/-n.txt"), "-n.txt");
        // S3 keys are taken byte for byte.
        assert_eq!(b("s3://bucket/runs/7/reads%201.fq.gz"), "reads%201.fq.gz");
        assert_eq!(b("s3://bucket/top.bam"), "top.bam");
        assert_eq!(b("https://h/get/a.bam?sig=x/y.txt"), "a.bam");
        assert_eq!(b("https://h/d/r%C3%A9sum%C3%A9.pdf"), "résumé.pdf");
        assert_eq!(b("https://h/d/a%2Fb.txt"), "a_b.txt");
        assert_eq!(b("https://h/d/a%00b"), "a_b");
        assert_eq!(b("https://h/d/%FF.txt"), "\u{fffd}.txt");
        assert_eq!(b("tmp://stage-1.out"), "stage-1.out");
        for nameless in [
            "https://h",
            "https://h/",
            "https://h/dir/",
            "https://h/d/%2E%2E",
            "s3://b/dir/",
        ] {
            assert_eq!(b(nameless), "input", "{nameless}");
        }
        let long = format!("file:///d/{}.fastq.gz", "x".repeat(300));
        let short = b(&long);
        assert_eq!(short.len(), 255);
        assert!(
            short.starts_with("xxx") && short.ends_with("x.gz"),
            "{short}"
        );
        let wide = format!("file:///d/{}", "é".repeat(200));
        assert!(b(&wide).len() <= 255 && b(&wide).chars().all(|c| c == 'é'));
    }

    #[test]
    fn http_uris_keep_query_and_userinfo() {
        let a = canonical("http://h:8080/q?v=1").unwrap();
        let b = canonical("http://h:8080/q?v=22").unwrap();
        assert_ne!(a, b);
        assert_eq!(a, "http://h:8080/q?v=1");
        assert_eq!(
            canonical("https://u:p@h/x#frag").unwrap(),
            "https://u:p@h/x"
        );
        assert_eq!(redacted("https://u:p@h/x"), "https://u:***@h/x");
        assert_eq!(redacted("https://h/x"), "https://h/x");
    }
}
