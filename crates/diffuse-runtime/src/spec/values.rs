//! How some task field values are written in JSON, for [`super::TaskMore`]'s serde form:
//! sizes (bytes, or `"4GB"`), small priorities (`-32768` to `32767`), and policy names.
//! Each module here is a `#[serde(with = ...)]` pair; a value they refuse is a parse error
//! naming its field.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serializer};
use std::fmt;

/// `Option<u64>` bytes, written as a number or a string with a unit (`"4GB"`, `"512MiB"`).
pub(super) mod size {
    use super::*;

    /// Bytes, as a number.
    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_u64(*b),
            None => s.serialize_none(),
        }
    }

    /// A number of bytes, a string with a unit, or null (unset).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(SizeVisitor)
    }

    struct SizeVisitor;

    impl<'de> Visitor<'de> for SizeVisitor {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a size: bytes, or a string such as \"4GB\"")
        }

        fn visit_u64<E: de::Error>(self, b: u64) -> Result<Option<u64>, E> {
            Ok(Some(b))
        }

        fn visit_i64<E: de::Error>(self, b: i64) -> Result<Option<u64>, E> {
            u64::try_from(b)
                .map(Some)
                .map_err(|_| E::invalid_value(de::Unexpected::Signed(b), &self))
        }

        fn visit_str<E: de::Error>(self, t: &str) -> Result<Option<u64>, E> {
            crate::size::parse_size(t).map(Some).map_err(E::custom)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
            Ok(None)
        }

        fn visit_none<E: de::Error>(self) -> Result<Option<u64>, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
            d.deserialize_any(SizeVisitor)
        }
    }
}

/// An `i16` priority, written as any JSON integer (or null: 0) and refused outside
/// `-32768..32767` with that range in the message.
pub(super) mod small {
    use super::*;

    /// As a number.
    pub fn serialize<S: Serializer>(v: &i16, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i16(*v)
    }

    /// An integer in range, or null (0).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i16, D::Error> {
        Option::<i64>::deserialize(d)?.map_or(Ok(0), |p| {
            i16::try_from(p).map_err(|_| de::Error::custom(format!("{p} is outside -32768..32767")))
        })
    }
}

/// `Option<PolicyKind>` by name (`"gcc"`, any case), as `--policy` takes it.
pub(super) mod policy {
    use super::*;
    use diffuse_core::PolicyKind;

    /// Its name.
    pub fn serialize<S: Serializer>(v: &Option<PolicyKind>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(k) => s.collect_str(k),
            None => s.serialize_none(),
        }
    }

    /// A policy's name, or null (unset).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PolicyKind>, D::Error> {
        Option::<std::borrow::Cow<'de, str>>::deserialize(d)?
            .map(|p| p.parse::<PolicyKind>().map_err(de::Error::custom))
            .transpose()
    }
}

/// `i16` is zero (left out when written).
pub(super) fn is_zero(n: &i16) -> bool {
    *n == 0
}
