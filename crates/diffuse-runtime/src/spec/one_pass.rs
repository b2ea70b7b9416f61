//! Reading one JSON object into two parts in one pass: the keys a caller handles itself, and the
//! rest as the fields of a struct `M` that derives `Deserialize` (a task's [`super::TaskMore`]).
//!
//! serde's `#[serde(flatten)]` does the same, but it buffers every object in an intermediate
//! tree first (slower; a dispatcher reads tens of thousands of tasks a second) and it turns off
//! `deny_unknown_fields`. Here each value is read once, straight into its field, and a key that
//! neither part knows is refused with serde's own message (`unknown field `colour`, expected one
//! of ...`).

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// Read the rest of `map` as an `M`, after `own` has taken the keys it knows: `own(key, map)`
/// reads the key's value from `map` and answers true, or answers false to leave the key to `M`.
/// `own_keys` (the keys `own` takes) name the whole object's fields in the message for an
/// unknown key.
pub(crate) fn read_rest<'de, A, M, F>(
    map: A,
    own_keys: &'static [&'static str],
    own: F,
) -> Result<M, A::Error>
where
    A: MapAccess<'de>,
    M: de::Deserialize<'de>,
    F: FnMut(&str, &mut A) -> Result<bool, A::Error>,
{
    M::deserialize(Rest {
        map,
        own,
        own_keys,
        fields: &[],
    })
}

/// The object as a deserializer of `M`: it learns `M`'s field names from `deserialize_struct`.
struct Rest<A, F> {
    map: A,
    own: F,
    own_keys: &'static [&'static str],
    fields: &'static [&'static str],
}

impl<'de, A, F> Deserializer<'de> for Rest<A, F>
where
    A: MapAccess<'de>,
    F: FnMut(&str, &mut A) -> Result<bool, A::Error>,
{
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_map(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        mut self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.fields = fields;
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

impl<'de, A, F> MapAccess<'de> for Rest<A, F>
where
    A: MapAccess<'de>,
    F: FnMut(&str, &mut A) -> Result<bool, A::Error>,
{
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(Key(key)) = self.map.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            if (self.own)(&key, &mut self.map)? {
                continue;
            }
            if !self.fields.contains(&key.as_ref()) {
                return Err(unknown_field(&key, self.own_keys, self.fields));
            }
            return seed
                .deserialize(de::value::CowStrDeserializer::new(key))
                .map(Some);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// serde's message for an unknown field, naming both parts' fields.
fn unknown_field<E: de::Error>(key: &str, own: &[&str], fields: &[&str]) -> E {
    let expected = own
        .iter()
        .chain(fields)
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(", ");
    E::custom(format_args!(
        "unknown field `{key}`, expected one of {expected}"
    ))
}

/// A key, borrowed from the input where it can be.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        d.deserialize_identifier(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Rest2 {
        a: u32,
        b: Option<String>,
    }

    #[derive(Debug, PartialEq)]
    struct Whole {
        id: String,
        rest: Rest2,
    }

    impl<'de> de::Deserialize<'de> for Whole {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Whole;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Whole, A::Error> {
                    let mut id = None;
                    let rest = read_rest(map, &["id"], |k, m: &mut A| {
                        Ok(match k {
                            "id" => {
                                id = Some(m.next_value()?);
                                true
                            }
                            _ => false,
                        })
                    })?;
                    let id = id.ok_or_else(|| de::Error::missing_field("id"))?;
                    Ok(Whole { id, rest })
                }
            }
            d.deserialize_map(V)
        }
    }

    #[test]
    fn own_keys_and_the_rest_in_any_order() {
        let w: Whole = serde_json::from_str(r#"{"b":"x","id":"t","a":3}"#).unwrap();
        assert_eq!(
            w,
            Whole {
                id: "t".into(),
                rest: Rest2 {
                    a: 3,
                    b: Some("x".into())
                }
            }
        );
        // An escaped key is not borrowed.
        let w: Whole = serde_json::from_str(r#"{"i\u0064":"t"}"#).unwrap();
        assert_eq!(w.id, "t");
    }

    #[test]
    fn unknown_keys_are_refused_naming_every_field() {
        let e = serde_json::from_str::<Whole>(r#"{"id":"t","c":1}"#).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("unknown field `c`, expected one of `id`, `a`, `b`"),
            "{e}"
        );
        let e = serde_json::from_str::<Whole>(r#"{"a":1,"a":2,"id":"t"}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate field `a`"), "{e}");
    }

    #[test]
    fn errors_keep_their_path() {
        let de = &mut serde_json::Deserializer::from_str(r#"{"id":"t","a":"no"}"#);
        let e = serde_path_to_error::deserialize::<_, Whole>(de).unwrap_err();
        assert_eq!(e.path().to_string(), "a");
        let de = &mut serde_json::Deserializer::from_str(r#"{"id":5}"#);
        let e = serde_path_to_error::deserialize::<_, Whole>(de).unwrap_err();
        assert_eq!(e.path().to_string(), "id");
    }
}
