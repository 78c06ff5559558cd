//! `Debug` for types that must not print all they hold (secrets, clients whose connection info
//! may carry a password, caches): it names the fields shown and marks the rest as left out.

/// `debug_showing!(Type { field, … })`: a `Debug` printing `Type { field: …, .. }`, the
/// fields by their own `Debug`.
macro_rules! debug_showing {
    ($name:ident { $($field:ident),* $(,)? }) => {
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    $(.field(stringify!($field), &self.$field))*
                    .finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use debug_showing;
