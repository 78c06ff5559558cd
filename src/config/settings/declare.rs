//! The two macros the declarations are written in: [`settings!`] (one group: its typed struct,
//! its declarations, reading and `check-config` lines) and [`settings_root!`] (the groups).

/// One group of settings:
///
/// ```ignore
/// settings! {
///     /// What the group is.
///     pub struct WorkerSettings = "Worker slots and the claim loop" {
///         concurrency: NonZeroU32 = Positive, Setting {
///             name: "WORKER_CONCURRENCY",
///             flag: "worker-concurrency",
///             default: Fallback::Value("128"),
///             help: "sends in flight per replica",
///             doc: "Sends in flight per process.",
///             ..Setting::NEW
///         };
///     }
/// }
/// ```
///
/// gives `pub struct WorkerSettings { pub concurrency: NonZeroU32 }` with `SETTINGS` (the
/// declarations, in order), `TITLE`, `read` (each field through [`super::Env::read`]) and
/// `lines` (`NAME=shown value`, for `check-config`).
macro_rules! settings {
    (
        $(#[$meta:meta])*
        pub struct $group:ident = $title:literal {
            $(
                $(#[$field_meta:meta])*
                $field:ident: $ty:ty = $kind:expr, $setting:expr;
            )*
        }
    ) => {
        $(#[$meta])*
        /// One field per declaration below; each one's meaning is its `help`.
        #[derive(Clone, PartialEq, Eq)]
        pub struct $group {
            $(
                $(#[$field_meta])*
                #[doc = concat!("See the declaration of `", stringify!($field), "` in this group.")]
                pub $field: $ty,
            )*
        }

        impl $group {
            /// The group's declarations, in order.
            pub const SETTINGS: &'static [$crate::config::settings::Setting] = &[$($setting),*];
            /// The env example's section title.
            pub const TITLE: &'static str = $title;

            /// Reads every setting of the group.
            pub(crate) fn read(
                env: &$crate::config::env::Env<'_>,
            ) -> Result<Self, $crate::config::ConfigError> {
                Ok(Self {
                    $( $field: env.read(&$setting, &$kind)?, )*
                })
            }

            /// `NAME=value` for each setting, as `check-config` prints it.
            pub(crate) fn lines(&self) -> Vec<String> {
                vec![$(
                    format!(
                        "{}={}",
                        $setting.name,
                        $crate::config::settings::Kind::show(&$kind, &self.$field)
                    )
                ),*]
            }
        }
    };
}

/// The groups, in the env example's order: `Settings` (one field per group), `GROUPS`, and
/// `Settings::read` / `Settings::lines` over all of them.
macro_rules! settings_root {
    ($($field:ident: $group:ident),* $(,)?) => {
        /// Every setting's value, by group ([`all`] lists the declarations).
        #[derive(Clone, PartialEq, Eq)]
        pub struct Settings {
            $(
                #[doc = concat!("[`", stringify!($group), "`]")]
                pub $field: $group,
            )*
        }

        /// The groups, in order.
        pub const GROUPS: &[Group] = &[$(Group {
            title: $group::TITLE,
            settings: $group::SETTINGS,
        }),*];

        impl Settings {
            /// Reads every setting.
            pub(crate) fn read(env: &Env<'_>) -> Result<Self, ConfigError> {
                Ok(Self { $($field: $group::read(env)?,)* })
            }

            /// `check-config`'s lines: every setting, in order.
            pub(crate) fn lines(&self) -> Vec<String> {
                let mut lines = Vec::new();
                $(lines.extend(self.$field.lines());)*
                lines
            }
        }
    };
}
