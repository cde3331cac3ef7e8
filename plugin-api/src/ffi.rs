//! The ABI contract: the `#[repr(C)]` types that cross the boundary between a host and a plugin
//! library. Plugin authors never touch these; [`crate::export_plugin!`] generates the glue and hosts
//! go through `rho-runtime`.
//!
//! Every type here derives [`StableAbi`], so a host that loads a library built against another
//! layout gets `LibraryError::AbiInstability` at load time instead of undefined behaviour.
//!
//! # How the interface grows
//!
//! [`PluginMod`] is an abi_stable prefix type: its fields up to `call` are there in every plugin;
//! later fields were added at its end, one interface version at a time, each
//! `#[sabi(missing_field(option))]`, so a host reads `None` from a plugin built before them.
//! Nothing else changes: no field of an existing type is added, removed, reordered or retyped (a
//! new shape is a new type, reached through a new field of [`PluginMod`]; [`HostFns`] is the
//! other prefix type, grown the same way, each step freezing the older tables as [`v1`],
//! [`v2`] and [`v3`] freeze the root module and the table), and what can grow
//! without an ABI step (what a plugin declares) travels as JSON ([`crate::declare`]).
//! [`INTERFACE_VERSION`] counts the steps; a host loads every version from
//! [`OLDEST_INTERFACE_VERSION`] to its own, and the package version stays `0.1.x`, which
//! abi_stable requires to match.
//!
//! | version | added |
//! |---|---|
//! | 1 | `interface_version`, `describe`, `call` |
//! | 2 | `declare` (hints, titles, output schemas, result limits, capabilities), `call_with` (time left, trace context, structured answers) |
//! | 3 | `call_host`: `call_with` with the host's services ([`FfiHost`]: log lines, questions to the user), a table of functions that grows at its end like this module; answers of blocks ([`FfiAnswer3`]: audio, resources, links, in order) |
//! | 4 | [`HostFns::ask_all`]: several questions at once, each under a name the tool may choose ([`FfiQuestion`]) |

use std::sync::atomic::{AtomicBool, Ordering};

use abi_stable::{
    StableAbi, declare_root_module_statics,
    library::RootModule,
    marker_type::ErasedObject,
    package_version_strings,
    sabi_types::{RRef, VersionStrings},
    std_types::{ROption, RResult, RSlice, RStr, RString, RVec},
};

/// The version of the calling convention described in this module, as plugins built against this
/// crate report it. A host refuses a plugin outside [`OLDEST_INTERFACE_VERSION`]`..=`this, on top
/// of abi_stable's own layout check.
pub const INTERFACE_VERSION: u32 = 4;

/// The oldest interface version a host built against this crate still loads (with defaults for
/// everything that version cannot declare).
pub const OLDEST_INTERFACE_VERSION: u32 = 1;

/// The symbol under which every plugin exports its root module (abi_stable's mangled name for the
/// root module loader). [`crate::export_plugin!`] uses it; a unit test checks it against abi_stable.
pub const ROOT_SYMBOL: &str = "_1as_0lib_1header_0root_bmodule_bloader";

/// The root module every plugin library exports.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    /// [`INTERFACE_VERSION`] as the plugin was built.
    pub interface_version: u32,
    /// Describes the plugin and its tools. Never unwinds: a panic comes back as `RErr`.
    pub describe: extern "C" fn() -> RResult<FfiPluginInfo, RString>,
    /// Calls one tool. Never unwinds: a panic comes back as an [`FfiFailure`] of kind `Panic`.
    #[sabi(last_prefix_field)]
    pub call: extern "C" fn(tool: RStr<'_>, args_json: RStr<'_>, ctx: FfiCtx<'_>) -> FfiOutcome,
    /// Interface 2: what the plugin declares, a [`crate::declare::Declaration`] as JSON text.
    /// Never unwinds.
    #[sabi(missing_field(option))]
    pub declare: extern "C" fn() -> RResult<RString, RString>,
    /// Interface 2: `call` with the call's time left and trace context, answering with
    /// structured content beside the output. Never unwinds.
    #[sabi(missing_field(option))]
    pub call_with: extern "C" fn(
        tool: RStr<'_>,
        args_json: RStr<'_>,
        ctx: FfiCtx<'_>,
        info: FfiCallInfo<'_>,
    ) -> FfiOutcome2,
    /// Interface 3: `call_with` with what the host offers the running call ([`FfiHost`]),
    /// answering with blocks of content. Never unwinds.
    #[sabi(missing_field(option))]
    pub call_host: extern "C" fn(
        tool: RStr<'_>,
        args_json: RStr<'_>,
        ctx: FfiCtx<'_>,
        info: FfiCallInfo<'_>,
        host: FfiHost<'_>,
    ) -> FfiOutcome3,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "rho_plugin";
    const NAME: &'static str = "rho_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// Interface 1's root module, frozen: a host checks the layout of a plugin built against an older
/// interface with it. abi_stable accepts a library whose root module has at least the fields of
/// the host's type, so a plugin of interface 1 fails the check against today's [`PluginMod`];
/// it passes against this one, and today's [`PluginModRef`] then reads it safely: the fields it
/// lacks read as `None` (each later field is `missing_field(option)`). Never change this type.
pub mod v1 {
    use abi_stable::{
        StableAbi, declare_root_module_statics,
        library::RootModule,
        package_version_strings,
        sabi_types::VersionStrings,
        std_types::{RResult, RStr, RString},
    };

    use super::{FfiCtx, FfiOutcome, FfiPluginInfo};

    /// The root module of interface 1.
    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
    #[sabi(missing_field(panic))]
    pub struct PluginMod {
        /// 1.
        pub interface_version: u32,
        /// Describes the plugin and its tools.
        pub describe: extern "C" fn() -> RResult<FfiPluginInfo, RString>,
        /// Calls one tool.
        #[sabi(last_prefix_field)]
        pub call: extern "C" fn(tool: RStr<'_>, args_json: RStr<'_>, ctx: FfiCtx<'_>) -> FfiOutcome,
    }

    impl RootModule for PluginModRef {
        declare_root_module_statics! {PluginModRef}
        const BASE_NAME: &'static str = "rho_plugin";
        const NAME: &'static str = "rho_plugin";
        const VERSION_STRINGS: VersionStrings = package_version_strings!();
    }
}

/// Interface 2's root module, frozen: as [`v1`], a host checks the layout of a plugin built
/// against interface 2 with it, then reads it through today's [`PluginModRef`]. Never change this
/// type.
pub mod v2 {
    use abi_stable::{
        StableAbi, declare_root_module_statics,
        library::RootModule,
        package_version_strings,
        sabi_types::VersionStrings,
        std_types::{RResult, RStr, RString},
    };

    use super::{FfiCallInfo, FfiCtx, FfiOutcome, FfiOutcome2, FfiPluginInfo};

    /// The root module of interface 2.
    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
    #[sabi(missing_field(panic))]
    pub struct PluginMod {
        /// 2.
        pub interface_version: u32,
        /// Describes the plugin and its tools.
        pub describe: extern "C" fn() -> RResult<FfiPluginInfo, RString>,
        /// Calls one tool.
        #[sabi(last_prefix_field)]
        pub call: extern "C" fn(tool: RStr<'_>, args_json: RStr<'_>, ctx: FfiCtx<'_>) -> FfiOutcome,
        /// What the plugin declares.
        #[sabi(missing_field(option))]
        pub declare: extern "C" fn() -> RResult<RString, RString>,
        /// `call` with call info and structured answers.
        #[sabi(missing_field(option))]
        pub call_with: extern "C" fn(
            tool: RStr<'_>,
            args_json: RStr<'_>,
            ctx: FfiCtx<'_>,
            info: FfiCallInfo<'_>,
        ) -> FfiOutcome2,
    }

    impl RootModule for PluginModRef {
        declare_root_module_statics! {PluginModRef}
        const BASE_NAME: &'static str = "rho_plugin";
        const NAME: &'static str = "rho_plugin";
        const VERSION_STRINGS: VersionStrings = package_version_strings!();
    }
}

/// Interface 3's root module and table of host functions, frozen: as [`v1`], a host checks the
/// layout of a plugin built against interface 3 with them (its `call_host` takes an [`FfiHost`]
/// whose [`HostFns`] had `log` and `ask` only), then reads it through today's types: the table a
/// host hands it has every later function too, which the plugin never asks for. Never change
/// these types.
pub mod v3 {
    use abi_stable::{
        StableAbi, declare_root_module_statics,
        library::RootModule,
        marker_type::ErasedObject,
        package_version_strings,
        sabi_types::{RRef, VersionStrings},
        std_types::{RResult, RStr, RString},
    };

    use super::{
        FfiCallInfo, FfiCtx, FfiOutcome, FfiOutcome2, FfiOutcome3, FfiPluginInfo, FfiReply,
    };

    /// The root module of interface 3.
    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
    #[sabi(missing_field(panic))]
    pub struct PluginMod {
        /// 3.
        pub interface_version: u32,
        /// Describes the plugin and its tools.
        pub describe: extern "C" fn() -> RResult<FfiPluginInfo, RString>,
        /// Calls one tool.
        #[sabi(last_prefix_field)]
        pub call: extern "C" fn(tool: RStr<'_>, args_json: RStr<'_>, ctx: FfiCtx<'_>) -> FfiOutcome,
        /// What the plugin declares.
        #[sabi(missing_field(option))]
        pub declare: extern "C" fn() -> RResult<RString, RString>,
        /// `call` with call info and structured answers.
        #[sabi(missing_field(option))]
        pub call_with: extern "C" fn(
            tool: RStr<'_>,
            args_json: RStr<'_>,
            ctx: FfiCtx<'_>,
            info: FfiCallInfo<'_>,
        ) -> FfiOutcome2,
        /// `call_with` with the host's functions, answering blocks.
        #[sabi(missing_field(option))]
        pub call_host: extern "C" fn(
            tool: RStr<'_>,
            args_json: RStr<'_>,
            ctx: FfiCtx<'_>,
            info: FfiCallInfo<'_>,
            host: FfiHost<'_>,
        ) -> FfiOutcome3,
    }

    impl RootModule for PluginModRef {
        declare_root_module_statics! {PluginModRef}
        const BASE_NAME: &'static str = "rho_plugin";
        const NAME: &'static str = "rho_plugin";
        const VERSION_STRINGS: VersionStrings = package_version_strings!();
    }

    /// What a host offered a running call in interface 3.
    #[repr(C)]
    #[derive(StableAbi, Clone, Copy)]
    pub struct FfiHost<'a> {
        /// Opaque host state.
        pub sink: RRef<'a, ErasedObject>,
        /// The functions.
        pub fns: HostFnsRef,
    }

    /// The host's functions of interface 3.
    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = HostFnsRef)))]
    #[sabi(missing_field(option))]
    pub struct HostFns {
        /// One log line.
        #[sabi(last_prefix_field)]
        pub log: extern "C" fn(sink: RRef<'_, ErasedObject>, level: u8, line: RStr<'_>),
        /// One question.
        pub ask: extern "C" fn(
            sink: RRef<'_, ErasedObject>,
            message: RStr<'_>,
            schema_json: RStr<'_>,
        ) -> FfiReply,
    }
}

/// What a host offers a running call (interface 3): its functions and the host's state for this
/// call, valid for the duration of one `call_host`.
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct FfiHost<'a> {
    /// Opaque host state handed back to every function of `fns`.
    pub sink: RRef<'a, ErasedObject>,
    /// The functions.
    pub fns: HostFnsRef,
}

/// The host's functions for a running call: an abi_stable prefix type, so later interfaces add
/// functions at its end and a plugin reads `None` from a host built before them.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HostFnsRef)))]
#[sabi(missing_field(option))]
pub struct HostFns {
    /// Writes one log line of the call: `level` 0 (debug) to 7 (emergency), as
    /// [`crate::LogLevel`] orders them. Never unwinds.
    #[sabi(last_prefix_field)]
    pub log: extern "C" fn(sink: RRef<'_, ErasedObject>, level: u8, line: RStr<'_>),
    /// Asks the user a question (a message and the answer's JSON Schema, as JSON text) and
    /// blocks the calling thread until the reply. Never unwinds.
    pub ask: extern "C" fn(
        sink: RRef<'_, ErasedObject>,
        message: RStr<'_>,
        schema_json: RStr<'_>,
    ) -> FfiReply,
    /// Asks the user several questions at once (interface 4) and blocks the calling thread
    /// until every reply is in: one reply per question, in their order. Never unwinds.
    pub ask_all: extern "C" fn(
        sink: RRef<'_, ErasedObject>,
        questions: RSlice<'_, FfiQuestion<'_>>,
    ) -> RVec<FfiReply>,
}

/// One question across the boundary (interface 4).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct FfiQuestion<'a> {
    /// The name it goes by ([`crate::Question::key`]); empty: the host names it.
    pub key: RStr<'a>,
    /// What the user is asked.
    pub message: RStr<'a>,
    /// The JSON Schema of the answer, as JSON text.
    pub schema_json: RStr<'a>,
}

/// A question as a host receives it through [`HostServices::ask`]: each part `None` when it is
/// not UTF-8 text.
#[derive(Debug, Clone, Copy)]
pub struct CheckedQuestion<'a> {
    /// Its key; `Some("")` when the host names it.
    pub key: Option<&'a str>,
    /// Its message.
    pub message: Option<&'a str>,
    /// Its schema's JSON text.
    pub schema_json: Option<&'a str>,
}

/// How a question was answered, across the boundary.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfiReplyKind {
    /// The user answered.
    Accepted,
    /// The user said no, or no one could be asked.
    Declined,
    /// The question was dismissed or given up on.
    Cancelled,
}

/// A reply across the boundary: its kind, the answer as JSON text (accepted) or the reason
/// (declined, cancelled), and the call's time left once the reply came (the wait does not count
/// against the call's timeout: the host moves the deadline by it).
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct FfiReply {
    /// How it was answered.
    pub kind: FfiReplyKind,
    /// The answer's JSON text, or the reason.
    pub text: RString,
    /// Milliseconds until the host gives up on the call, as of the reply; `RNone` without a
    /// deadline.
    pub time_left_ms: ROption<u64>,
}

/// What a host does with what a running call hands it through [`FfiHost`]. Each argument comes
/// checked: `None` for a level that is none, text that is not UTF-8.
pub trait HostServices: Sync {
    /// One log line.
    fn log(&self, level: Option<crate::LogLevel>, line: Option<&str>);
    /// Questions asked together; blocks until every reply is in: one per question, in order.
    fn ask(&self, questions: &[CheckedQuestion<'_>]) -> Vec<FfiReply>;
}

impl<'a> FfiHost<'a> {
    /// The host's side for one call, served by `services`; a panic inside it is caught (a log
    /// line dropped, a question cancelled), never unwinding into the plugin.
    pub fn new(services: &'a &'a dyn HostServices) -> Self {
        static FNS: std::sync::OnceLock<HostFnsRef> = std::sync::OnceLock::new();
        let fns = *FNS.get_or_init(|| {
            use abi_stable::prefix_type::PrefixTypeTrait;
            HostFns {
                log: log_trampoline,
                ask: ask_trampoline,
                ask_all: ask_all_trampoline,
            }
            .leak_into_prefix()
        });
        let ptr = services as *const &'a dyn HostServices as *const ErasedObject;
        // SAFETY: `ptr` comes from a reference that lives for 'a; the trampolines cast it back
        // to the same type.
        let sink = unsafe { RRef::from_raw(ptr) };
        FfiHost { sink, fns }
    }
}

/// The services behind a sink made by [`FfiHost::new`].
fn services<'a>(sink: RRef<'a, ErasedObject>) -> &'a dyn HostServices {
    let ptr = sink.as_ptr() as *const &dyn HostServices;
    // SAFETY: only `FfiHost::new` builds hosts with these trampolines, from this exact type.
    unsafe { *ptr }
}

extern "C" fn log_trampoline(sink: RRef<'_, ErasedObject>, level: u8, line: RStr<'_>) {
    let level = crate::LogLevel::ALL.get(usize::from(level)).copied();
    let text = checked_text(line);
    let services = services(sink);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| services.log(level, text)));
}

extern "C" fn ask_trampoline(
    sink: RRef<'_, ErasedObject>,
    message: RStr<'_>,
    schema_json: RStr<'_>,
) -> FfiReply {
    let question = CheckedQuestion {
        key: Some(""),
        message: checked_text(message),
        schema_json: checked_text(schema_json),
    };
    ask_checked(sink, &[question])
        .into_iter()
        .next()
        .unwrap_or_else(host_failed)
}

extern "C" fn ask_all_trampoline(
    sink: RRef<'_, ErasedObject>,
    questions: RSlice<'_, FfiQuestion<'_>>,
) -> RVec<FfiReply> {
    let questions: Vec<CheckedQuestion<'_>> = questions
        .iter()
        .map(|q| CheckedQuestion {
            key: checked_text(q.key),
            message: checked_text(q.message),
            schema_json: checked_text(q.schema_json),
        })
        .collect();
    let mut replies = ask_checked(sink, &questions);
    // One reply per question, whatever the host did.
    replies.resize_with(questions.len(), host_failed);
    replies.into()
}

/// `questions` put to the services behind `sink`, a panic caught.
fn ask_checked(sink: RRef<'_, ErasedObject>, questions: &[CheckedQuestion<'_>]) -> Vec<FfiReply> {
    let services = services(sink);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| services.ask(questions)))
        .unwrap_or_else(|_| questions.iter().map(|_| host_failed()).collect())
}

/// The reply of a question the host failed on.
fn host_failed() -> FfiReply {
    FfiReply {
        kind: FfiReplyKind::Cancelled,
        text: "the host failed while asking".into(),
        time_left_ms: ROption::RNone,
    }
}

/// What a plugin says about itself.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct FfiPluginInfo {
    /// The plugin's name (its crate name).
    pub name: RString,
    /// The plugin's version (its crate version).
    pub version: RString,
    /// Its tools, in the order the author listed them.
    pub tools: RVec<FfiToolDesc>,
}

/// One tool as a plugin describes it.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct FfiToolDesc {
    /// The tool's name; hosts accept `^[a-zA-Z0-9_-]{1,64}$` only.
    pub name: RString,
    /// A description for the model.
    pub description: RString,
    /// The JSON Schema of the arguments, as JSON text.
    pub parameters_json: RString,
    /// The tool's own timeout, if it has one.
    pub timeout_ms: ROption<u64>,
}

/// The result of one call across the boundary.
pub type FfiOutcome = RResult<FfiAnswer, FfiFailure>;

/// Which shape of output an [`FfiAnswer`] carries.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfiOutputKind {
    /// Text only.
    Text,
    /// Exactly one image, with text.
    Image,
    /// Any number of images, with text.
    Images,
}

/// An image across the boundary: its mime type and raw bytes (never base64).
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct FfiImage {
    /// e.g. `image/png`.
    pub mime_type: RString,
    /// The encoded image.
    pub bytes: RVec<u8>,
}

/// A successful answer across the boundary.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct FfiAnswer {
    /// The shape of the output.
    pub kind: FfiOutputKind,
    /// The text for the model.
    pub text: RString,
    /// Images (empty for `Text`, one for `Image`).
    pub images: RVec<FfiImage>,
    /// Details for screens, as JSON text.
    pub details_json: ROption<RString>,
}

/// What interface 2 tells a tool about its call beside [`FfiCtx`]; valid for the duration of one
/// `call_with`.
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct FfiCallInfo<'a> {
    /// Milliseconds until the host gives up on the call, as of the call's start; `RNone` without
    /// a deadline.
    pub time_left_ms: ROption<u64>,
    /// The W3C `traceparent` of the call; empty when none.
    pub traceparent: RStr<'a>,
}

/// An answer of interface 2: interface 1's answer and structured content.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct FfiAnswer2 {
    /// The output and details.
    pub answer: FfiAnswer,
    /// Structured content (checked by the host against the tool's output schema), as JSON text.
    pub structured_json: ROption<RString>,
}

/// The result of one `call_with` across the boundary.
pub type FfiOutcome2 = RResult<FfiAnswer2, FfiFailure>;

/// One block of an answer across the boundary: its [`crate::BlockHead`] as JSON text, and its
/// payload raw (text's bytes, an image's, audio's or a blob's; empty for a link).
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct FfiBlock {
    /// The block without its payload, JSON text.
    pub head_json: RString,
    /// The payload.
    pub payload: RVec<u8>,
}

/// An answer of interface 3: interface 2's, or blocks of content.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct FfiAnswer3 {
    /// The answer; of an answer of blocks, its details and structured content only (the output
    /// is empty text).
    pub answer: FfiAnswer2,
    /// The blocks, in order; empty unless the output is made of blocks.
    pub blocks: RVec<FfiBlock>,
}

/// The result of one `call_host` across the boundary.
pub type FfiOutcome3 = RResult<FfiAnswer3, FfiFailure>;

/// Why a call failed.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfiFailureKind {
    /// The tool answered with an error.
    Error,
    /// The tool (or the plugin's glue) panicked; the message says where and why.
    Panic,
    /// The plugin has no tool of that name.
    UnknownTool,
    /// The arguments did not deserialize into the tool's argument type.
    InvalidArguments,
}

/// A failed call across the boundary.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct FfiFailure {
    /// What kind of failure.
    pub kind: FfiFailureKind,
    /// The text for the model.
    pub message: RString,
    /// Details for screens, as JSON text.
    pub details_json: ROption<RString>,
}

/// The call context across the boundary: valid for the duration of one `call`.
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct FfiCtx<'a> {
    /// The call's id, as the model gave it.
    pub call_id: RStr<'a>,
    /// Set by the host when it gives up on the call.
    pub cancelled: &'a AtomicBool,
    /// Opaque host state handed back to `send_update`.
    pub sink: RRef<'a, ErasedObject>,
    /// Sends one partial update (text) to the host. Never unwinds.
    pub send_update: extern "C" fn(sink: RRef<'a, ErasedObject>, update: RStr<'_>),
}

impl<'a> FfiCtx<'a> {
    /// Builds a context for one call from host data. `on_update` receives every partial update the
    /// plugin sends, `None` for one that is not UTF-8 (abi_stable's `RStr` takes its maker's word
    /// for it, so the host checks); a panic inside it is caught and the update dropped, never
    /// unwinding into the plugin.
    pub fn new(
        call_id: &'a str,
        cancelled: &'a AtomicBool,
        on_update: &'a &'a (dyn Fn(Option<&str>) + Sync),
    ) -> Self {
        let ptr = on_update as *const &(dyn Fn(Option<&str>) + Sync) as *const ErasedObject;
        // SAFETY: `ptr` comes from a reference that lives for 'a; `trampoline` casts it back to the
        // same type.
        let sink = unsafe { RRef::from_raw(ptr) };
        FfiCtx {
            call_id: RStr::from_str(call_id),
            cancelled,
            sink,
            send_update: trampoline,
        }
    }

    /// Whether the host has given up on the call.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

extern "C" fn trampoline(sink: RRef<'_, ErasedObject>, update: RStr<'_>) {
    let ptr = sink.as_ptr() as *const &(dyn Fn(Option<&str>) + Sync);
    // SAFETY: only `FfiCtx::new` builds contexts with this trampoline, from this exact type.
    let on_update: &&(dyn Fn(Option<&str>) + Sync) = unsafe { &*ptr };
    let text = checked_text(update);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_update(text)));
}

/// A plugin's text as text, if it is UTF-8 (abi_stable's `RStr` takes its maker's word for it).
fn checked_text<'a>(text: RStr<'a>) -> Option<&'a str> {
    // SAFETY: an `RStr` is a pointer and a length into memory valid for the call; its bytes are
    // read as bytes and checked, never taken for text unchecked.
    let bytes = unsafe { std::slice::from_raw_parts(text.as_ptr(), text.len()) };
    std::str::from_utf8(bytes).ok()
}
