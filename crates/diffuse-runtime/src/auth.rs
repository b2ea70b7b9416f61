//! Bearer tokens: how every endpoint of the dispatcher, the storage emulator and the workers'
//! peer servers checks the `Authorization` header.

use axum::http::HeaderMap;

/// Constant-time comparison, so a token cannot be guessed byte by byte from response times.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// Whether the request carries exactly `token`.
pub fn authorized(headers: &HeaderMap, token: &str) -> bool {
    bearer(headers).is_some_and(|t| same(t, token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_the_bearer_token() {
        let mut h = HeaderMap::new();
        assert!(!authorized(&h, "secret"));
        h.insert("authorization", "Bearer secret".parse().unwrap());
        assert!(authorized(&h, "secret"));
        assert!(!authorized(&h, "secreT"));
        assert!(!authorized(&h, "secret2"));
        h.insert("authorization", "Basic secret".parse().unwrap());
        assert!(!authorized(&h, "secret"));
    }
}
