//! The shape every list of policies shares: an enum with one variant per policy, each with its
//! name and its builder, written once as [`registry!`]. The dispatch policies
//! (`dispatch/registry.rs`), eviction orders (`eviction/registry.rs`) and staging schedules
//! (`staging/registry.rs`) are each one use of it: adding a policy is one line there.
//!
//! What a use gets: the enum (serde names = the policy names), `ALL` in list order, `name()`,
//! `build(..)` calling the line's builder, `FromStr` (any case; an unknown name is refused
//! naming every known one) and `Display` (the name).

/// `registry! { /// doc  #[derive(..extra..)] pub enum Kind: "noun", fn build(arg: Arg) -> Out;
/// /// doc  Variant = "name" => |arg| builder, ... }`.
macro_rules! registry {
    (
        $(#[$enum_attr:meta])*
        pub enum $kind:ident: $noun:literal, fn build($arg:ident: $arg_ty:ty) -> $out:ty;
        $( $(#[$attr:meta])* $variant:ident = $name:literal => $build:expr, )*
    ) => {
        $(#[$enum_attr])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $kind {
            $( $(#[$attr])* #[serde(rename = $name)] $variant, )*
        }

        impl $kind {
            /// Every one, in the order of the list.
            pub const ALL: &'static [$kind] = &[$($kind::$variant),*];

            /// Its name, as on the command line.
            pub fn name(self) -> &'static str {
                match self {
                    $($kind::$variant => $name,)*
                }
            }

            /// Build it.
            pub fn build(self, $arg: $arg_ty) -> $out {
                match self {
                    $($kind::$variant => {
                        let build: fn($arg_ty) -> $out = $build;
                        build($arg)
                    })*
                }
            }
        }

        impl std::str::FromStr for $kind {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let lower = s.to_ascii_lowercase();
                if let Some(k) = Self::ALL.iter().find(|k| k.name() == lower) {
                    return Ok(*k);
                }
                let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
                Err(format!(
                    "unknown {} '{s}' (expected {})",
                    $noun,
                    $crate::registry::one_of(&names)
                ))
            }
        }

        impl std::fmt::Display for $kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

pub(crate) use registry;

/// `a, b or c`.
pub fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}
