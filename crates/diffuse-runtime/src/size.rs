//! Byte sizes on the command line: `2GB`, `1.5GB`, `512MiB`, `1000000` (bytes).
//!
//! Decimal units (KB, MB, GB, TB) are powers of 1000, as the papers count; binary units (KiB,
//! MiB, GiB, TiB) are powers of 1024.

/// Parse a size; the error says what was expected.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.trim().is_empty() {
        return Err(format!(
            "malformed size '{s}' (expected a number and a unit, e.g. 2GB, 512MiB, 1000000)"
        ));
    }
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown unit '{other}' in size '{s}' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("malformed size '{s}' (expected e.g. 2GB, 512MiB, 1000000)"))?;
    let bytes = n * mult;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size '{s}' is too large"));
    }
    if bytes.round() < 1.0 {
        return Err(format!("size '{s}' must be at least one byte"));
    }
    Ok(bytes.round() as u64)
}

/// Format bytes the way sizes are parsed (decimal units).
pub fn format_size(b: u64) -> String {
    diffuse_core::Bytes(b).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("512MiB"), Ok(512 * 1024 * 1024));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("10 mb"), Ok(10_000_000));
    }

    #[test]
    fn rejects_malformed() {
        assert!(parse_size("GB").is_err());
        assert!(parse_size("2XB").is_err());
        assert!(parse_size("-1GB").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("abc").unwrap_err().contains("malformed"));
        assert!(parse_size("0.4").is_err(), "rounds to zero bytes");
        assert!(parse_size("1e30TB").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(1_500_000_000), "1.5GB");
        assert_eq!(format_size(50_000_000_000), "50GB");
    }
}
