//! The contract between a rho host and its plugins, and the API plugin authors write against.
//!
//! A plugin is a `cdylib` crate that depends on this crate only. Its tools are plain Rust
//! functions; one [`export_plugin!`] lists them:
//!
//! ```
//! use rho_plugin_api::{Answer, Ctx, JsonSchema, Tool, ToolError, export_plugin};
//! use serde::Deserialize;
//!
//! /// Arguments of `echo`.
//! #[derive(Deserialize, JsonSchema)]
//! struct EchoArgs {
//!     /// The text to send back.
//!     text: String,
//! }
//!
//! fn echo(args: EchoArgs, _ctx: &Ctx) -> Result<Answer, ToolError> {
//!     Ok(Answer::text(args.text))
//! }
//!
//! export_plugin! {
//!     Tool::new("echo", "Answers with the text it was given.", echo),
//! }
//!
//! // A tool function is plain Rust: call it directly in a test.
//! let ctx = Ctx::detached("call-1");
//! let answer = echo(EchoArgs { text: "hi".into() }, &ctx).unwrap();
//! assert_eq!(answer.output.text(), "hi");
//! ```
//!
//! The JSON Schema of each tool's arguments is derived from its argument type. Every exported entry
//! point catches panics inside the plugin and returns them as failures that name the location and
//! the message: a panic never reaches the host. Plugins must be built with `panic = "unwind"` (the
//! default).
#![warn(missing_docs)]

mod answer;
mod ask;
mod content;
mod ctx;
pub mod declare;
#[cfg(not(target_arch = "wasm32"))]
pub mod ffi;
#[doc(hidden)]
pub mod glue;
mod log;
pub mod source;
mod tool;
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod wasm;

pub use answer::{Answer, MAX_DETAILS_DEPTH, Output, ToolError, details_depth, drop_details};
pub use ask::{MAX_KEY_LEN, Question, Reply, is_valid_key};
pub use content::{Audio, Block, BlockHead, Image, Resource, ResourceContents, ResourceLink};
pub use ctx::Ctx;
pub use declare::{Capabilities, ToolHints};
pub use log::LogLevel;
pub use schemars::JsonSchema;
pub use serde_json::{Value, json};
pub use tool::{CallFailure, MAX_TOOL_NAME_LEN, Tool, is_valid_tool_name};

/// Re-exported so plugins need no direct dependency on them.
pub use {schemars, serde, serde_json};

/// Exports a plugin's tools: the one macro a plugin crate invokes, once, at its root.
///
/// Takes a comma-separated list of [`Tool`] expressions, or `capabilities: EXPR, tools: [...]`
/// for a plugin that needs more than computing ([`Capabilities`]: paths, network, environment,
/// processes; a host that isolates it grants at least that or refuses it):
///
/// ```
/// use rho_plugin_api::{Answer, Capabilities, Ctx, Tool, ToolError, export_plugin};
///
/// fn home(_args: (), _ctx: &Ctx) -> Result<Answer, ToolError> {
///     Ok(Answer::text(std::env::var("HOME")?))
/// }
///
/// export_plugin! {
///     capabilities: Capabilities::none().env("HOME"),
///     tools: [Tool::new("home", "Answers $HOME.", home).read_only(true)],
/// }
/// ```
///
/// The plugin's name and version are its crate's `CARGO_PKG_NAME` and `CARGO_PKG_VERSION`. The
/// tool list is built once, on first use.
#[macro_export]
macro_rules! export_plugin {
    (@module $tools:expr) => {
        #[doc(hidden)]
        fn __rho_plugin_tools() -> &'static $crate::glue::PluginTools {
            static TOOLS: ::std::sync::OnceLock<$crate::glue::PluginTools> =
                ::std::sync::OnceLock::new();
            TOOLS.get_or_init(|| $tools)
        }

        $crate::__export_module!();
    };
    (capabilities: $caps:expr, tools: [$($tool:expr),* $(,)?] $(,)?) => {
        $crate::export_plugin!(@module
            $crate::glue::PluginTools::new(::std::vec![$($tool),*]).with_capabilities($caps)
        );
    };
    ($($tool:expr),* $(,)?) => {
        $crate::export_plugin!(@module
            $crate::glue::PluginTools::new(::std::vec![$($tool),*])
        );
    };
}

/// The entry points of a native plugin (`export_plugin!`'s expansion for a `cdylib`).
#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_module {
    () => {
        #[doc(hidden)]
        extern "C" fn __rho_plugin_describe() -> $crate::glue::abi_stable::std_types::RResult<
            $crate::ffi::FfiPluginInfo,
            $crate::glue::abi_stable::std_types::RString,
        > {
            $crate::glue::describe(
                ::std::env!("CARGO_PKG_NAME"),
                ::std::env!("CARGO_PKG_VERSION"),
                __rho_plugin_tools,
            )
        }

        #[doc(hidden)]
        extern "C" fn __rho_plugin_declare() -> $crate::glue::abi_stable::std_types::RResult<
            $crate::glue::abi_stable::std_types::RString,
            $crate::glue::abi_stable::std_types::RString,
        > {
            $crate::glue::declare(__rho_plugin_tools)
        }

        #[doc(hidden)]
        extern "C" fn __rho_plugin_call(
            tool: $crate::glue::abi_stable::std_types::RStr<'_>,
            args_json: $crate::glue::abi_stable::std_types::RStr<'_>,
            ctx: $crate::ffi::FfiCtx<'_>,
        ) -> $crate::ffi::FfiOutcome {
            $crate::glue::call(__rho_plugin_tools, tool, args_json, ctx)
        }

        #[doc(hidden)]
        extern "C" fn __rho_plugin_call_with(
            tool: $crate::glue::abi_stable::std_types::RStr<'_>,
            args_json: $crate::glue::abi_stable::std_types::RStr<'_>,
            ctx: $crate::ffi::FfiCtx<'_>,
            info: $crate::ffi::FfiCallInfo<'_>,
        ) -> $crate::ffi::FfiOutcome2 {
            $crate::glue::call_with(
                __rho_plugin_tools,
                tool,
                args_json,
                ctx,
                ::std::option::Option::Some(info),
            )
        }

        #[doc(hidden)]
        extern "C" fn __rho_plugin_call_host(
            tool: $crate::glue::abi_stable::std_types::RStr<'_>,
            args_json: $crate::glue::abi_stable::std_types::RStr<'_>,
            ctx: $crate::ffi::FfiCtx<'_>,
            info: $crate::ffi::FfiCallInfo<'_>,
            host: $crate::ffi::FfiHost<'_>,
        ) -> $crate::ffi::FfiOutcome3 {
            $crate::glue::call_host(
                __rho_plugin_tools,
                tool,
                args_json,
                ctx,
                ::std::option::Option::Some(info),
                ::std::option::Option::Some(host),
            )
        }

        #[doc(hidden)]
        fn __rho_plugin_module() -> $crate::ffi::PluginModRef {
            $crate::glue::module($crate::glue::EntryPoints {
                describe: __rho_plugin_describe,
                call: __rho_plugin_call,
                declare: __rho_plugin_declare,
                call_with: __rho_plugin_call_with,
                call_host: __rho_plugin_call_host,
            })
        }

        #[doc(hidden)]
        extern "C" fn __rho_plugin_root() -> $crate::glue::abi_stable::library::RootModuleResult {
            $crate::glue::abi_stable::library::__call_root_module_loader(__rho_plugin_module)
        }

        /// The plugin's root module, as abi_stable's loader looks it up.
        #[doc(hidden)]
        #[unsafe(export_name = "_1as_0lib_1header_0root_bmodule_bloader")]
        pub static __RHO_PLUGIN_ROOT: $crate::glue::abi_stable::library::LibHeader = unsafe {
            $crate::glue::abi_stable::library::LibHeader::from_constructor::<
                $crate::ffi::PluginModRef,
            >(
                __rho_plugin_root,
                $crate::glue::abi_stable::library::CheckTypeLayout::Yes,
            )
        };
    };
}

/// The exports of a component (`export_plugin!`'s expansion for `wasm32`): the `tools`
/// interface of the `rho:plugin` world.
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
#[macro_export]
macro_rules! __export_module {
    () => {
        #[doc(hidden)]
        struct __RhoPlugin;

        impl $crate::wasm::Guest for __RhoPlugin {
            fn describe() -> ::std::result::Result<$crate::wasm::WitPluginInfo, ::std::string::String> {
                $crate::wasm::describe(
                    ::std::env!("CARGO_PKG_NAME"),
                    ::std::env!("CARGO_PKG_VERSION"),
                    __rho_plugin_tools,
                )
            }

            fn declare() -> ::std::result::Result<::std::string::String, ::std::string::String> {
                $crate::wasm::declare(__rho_plugin_tools)
            }

            fn call(
                tool: ::std::string::String,
                args_json: ::std::string::String,
                info: $crate::wasm::CallInfo,
            ) -> ::std::result::Result<$crate::wasm::WitAnswer, $crate::wasm::WitFailure> {
                $crate::wasm::call(__rho_plugin_tools, tool, args_json, info)
            }
        }

        $crate::wasm::bindings::__rho_wit_export!(__RhoPlugin with_types_in $crate::wasm::bindings);
    };
}
